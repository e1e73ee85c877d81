/* hier.c — collectives of a group that spans processes (contract: comm.h).
 *
 * Hierarchical: the group's devices in this process meet in shared memory
 * (they publish their buffers and sync as in comm.c); the first of them, the
 * leader, exchanges MPI messages with the leaders of the group's other
 * processes (net.c); the other local devices then copy or compute their part
 * from what the leader received. Phases of one call: 1 = local buffers
 * published, 2 = the leader's exchange is done, 3 = every local device has
 * finished reading its peers' buffers.
 *
 * Results are bit-identical to the single-process collectives: what crosses
 * processes are the members' raw contributions (never partial sums), and
 * every reduction combines all n members in member order with comm_reduce,
 * exactly as comm.c does.
 *
 * All-reduce is a direct reduce-scatter + all-gather between processes: the
 * leader of the i-th process of the group reduces chunk i of the vector from
 * every member's input and sends the result to the other leaders. Per
 * process and call that sends (P-1)/P of the vector per local member, plus
 * (P-1)/P of the result: with one device per process it is the
 * bandwidth-optimal 2(P-1)/P of a ring, in one step instead of P-1.
 * The two phases are pipelined in segments of HIER_SEGMENT_BYTES of each
 * chunk (all_reduce_pipelined): every reduce-scatter message and every
 * all-gather receive is posted at once, and as soon as segment s of our
 * chunk arrived from every member it is summed and its all-gather sends are
 * posted, behind the reduce-scatter's later segments on the same
 * connections. So a link never drains between the phases (between two
 * hosts at 1 Gbit/s it idled for the last segment's flight, the sum of the
 * whole chunk and a rendezvous of MPI's TCP transport with the peer's
 * polls, every all-reduce). Segments only cut the ranges: each element is
 * summed over the same members in the same order, the same bits.
 * A vector of at most HIER_ONE_STEP_BYTES (MPI's eager size: BN statistics,
 * biases, the loss) goes in one exchange instead of two: every local
 * member's whole input to every other process, and every leader reduces the
 * whole vector (the same members in the same order, so the same bits); one
 * latency instead of two for (P-1) x the bytes of a small vector.
 *
 * With TESSEL_HIER_ALLREDUCE=1 and k > 1 devices of the group in every
 * process, all-reduce is two-level instead (all_reduce_2level): a
 * reduce-scatter inside each process (local member s sums chunk s of the k
 * local inputs), an all-reduce of each 1/k chunk across processes by the
 * members of sub-index s (the same direct reduce-scatter + all-gather), and
 * an all-gather inside the process. A process then sends 2(P-1)/P of the
 * vector instead of (k+1)(P-1)/P, but each element is summed per process
 * first, then over processes: a different order than one process's member
 * order, so results differ from it by rounding (every member still gets the
 * same bits, and a run is repeatable). Off by default for that reason. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "comm/net.h"
#include "comm/reduce.h"
#include "metrics/metrics_internal.h" /* CommHierCopyBytes */
#include "util/config.h" /* TESSEL_HIER_ALLREDUCE */
#include "util/error.h"

int comm_tag(const ts_comm *c, int device, int id) {
  return c->tag_base + (int)(c->dev[device].seq % (uint32_t)c->tag_span) * c->n + id;
}

/* A group seen by process: which members are local, which processes take
 * part and in which order. */
typedef struct {
  int n, np, nl, me; /* members, processes, local members, our process's index */
  int *proc;         /* (np) process ids, in order of first appearance in the group */
  int *pidx;         /* (n) per member: index into proc */
  int *sub;          /* (n) per member: its index among its process's members */
  int *cnt;          /* (np) members per process */
  int *loc;          /* (nl) local members' device ids, in group order */
  int *mem;          /* for the caller of hgroup_make to free */
} hgroup;

static int hgroup_make(const ts_comm *c, const int *group, int n, hgroup *h, const char *what) {
  int *m = malloc((size_t)5 * (size_t)n * sizeof *m);
  if (!m) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
  *h = (hgroup){.n = n, .proc = m, .pidx = m + n, .sub = m + 2 * n, .cnt = m + 3 * n, .loc = m + 4 * n, .mem = m};
  int me_proc = c->proc[c->first];
  h->me = -1;
  for (int i = 0; i < n; i++) {
    int p = c->proc[group[i]], k = 0;
    while (k < h->np && h->proc[k] != p) k++;
    if (k == h->np) {
      h->proc[h->np] = p;
      h->cnt[h->np++] = 0;
    }
    h->pidx[i] = k;
    h->sub[i] = h->cnt[k]++;
    if (p == me_proc) {
      h->me = k;
      h->loc[h->nl++] = group[i];
    }
  }
  return 0;
}

static void *grow(comm_dev *d, size_t bytes, const char *what) {
  if (bytes > d->net_cap) {
    void *p = malloc(bytes);
    if (!p) {
      set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes of messages", what, bytes);
      return NULL;
    }
    free(d->net_buf);
    d->net_buf = p;
    d->net_cap = bytes;
  }
  return d->net_buf ? d->net_buf : (void *)d; /* non-NULL even for 0 bytes */
}

static const char *src_of(const ts_comm *c, int dev) {
  return atomic_load_explicit(&c->dev[dev].src, memory_order_relaxed);
}

static int timeout_of(ts_comm *c) { return atomic_load(&c->timeout_ms); }

/* Phases 2 and 3 of all-reduce and all-gather: the leader's out holds the
 * result; every other local member copies it. */
static int copy_from_leader(ts_comm *c, int device, const hgroup *h, void *out, size_t bytes, const char *what) {
  if (comm_sync(c, device, what, h->loc, h->nl, 2)) return -1;
  if (device != h->loc[0] && bytes)
    memcpy(out, atomic_load_explicit(&c->dev[h->loc[0]].dst, memory_order_relaxed), bytes);
  return comm_sync(c, device, what, h->loc, h->nl, 3);
}

int hier_barrier(ts_comm *c, int device, const int *group, int n) {
  const char *what = "comm_barrier";
  c->dev[device].seq++;
  hgroup h;
  if (hgroup_make(c, group, n, &h, what) < 0) return -1;
  int rc = comm_sync(c, device, what, h.loc, h.nl, 1);
  if (rc == 0 && device == h.loc[0]) {
    net_msg *m = malloc((size_t)2 * (size_t)h.np * sizeof *m);
    char token[2][1];
    int k = 0;
    if (!m) rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    for (int j = 0; rc == 0 && j < h.np; j++) {
      if (j == h.me) continue;
      m[k++] = (net_msg){h.proc[j], comm_tag(c, device, group[0]), true, token[0], 0};
      m[k++] = (net_msg){h.proc[j], comm_tag(c, device, group[0]), false, token[1], 0};
    }
    if (rc == 0) rc = net_exchange(c->net, m, k, timeout_of(c), what);
    free(m);
  }
  if (rc == 0) rc = comm_sync(c, device, what, h.loc, h.nl, 2);
  free(h.mem);
  return rc;
}

/* [lo, hi) of part i of `count` elements cut into `parts` parts whose starts
 * are multiples of 64 bytes. */
static void part_of(int64_t count, int parts, int i, size_t es, int64_t *lo, int64_t *hi) {
  int64_t align = (int64_t)(64 / es), per = ((count + parts - 1) / parts + align - 1) / align * align;
  *lo = (int64_t)i * per < count ? (int64_t)i * per : count;
  *hi = *lo + per < count ? *lo + per : count;
}

/* The two-level all-reduce (TESSEL_HIER_ALLREDUCE=1; the file comment):
 * phases 1 = buffers published, 2 = every local member holds its chunk's
 * result, 3 = every local member copied the others' chunks. */
static int all_reduce_2level(ts_comm *c, int device, const int *group, const hgroup *h, ts_dtype dt,
                             ts_reduce_kind op, const void *src, void *out, int64_t count) {
  const char *what = "all_reduce";
  comm_dev *d = &c->dev[device];
  size_t es = ts_dtype_size(dt);
  int k = h->nl, s = 0;
  while (h->loc[s] != device) s++;
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  atomic_store_explicit(&d->dst, out, memory_order_relaxed);
  if (comm_sync(c, device, what, h->loc, k, 1)) return -1;
  /* 1. chunk s summed over the local members (group order) into our out */
  int64_t lo, hi;
  part_of(count, k, s, es, &lo, &hi);
  for (int m = 0; m < k; m++) d->srcs[m] = src_of(c, h->loc[m]) + (size_t)lo * es;
  void *mine = (char *)out + (size_t)lo * es;
  if (hi > lo) comm_reduce(dt, op, k, d->srcs, 1, &mine, hi - lo, false);
  /* 2. that chunk all-reduced over the processes by their sub-index-s
   * members: process j sums part j of it (process order) and sends it to
   * the others. An op that is not a plain sum (MEAN) divides by the local
   * count first: comm_reduce's MEAN of k then of P is the mean of k*P. */
  int64_t len = hi - lo, plo, phi;
  part_of(len, h->np, h->me, es, &plo, &phi);
  size_t pb = (size_t)(phi - plo) * es;
  char *slots = grow(d, (size_t)(h->np > 1 ? h->np - 1 : 1) * (pb ? pb : 1), what);
  net_msg *m = malloc((size_t)2 * (size_t)h->np * sizeof *m);
  int rc = -1;
  if (!slots || !m) {
    if (!m) set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    goto done;
  }
  int tag = comm_tag(c, device, group[s]), n_msg = 0, slot = 0;
  for (int j = 0; j < h->np; j++) {
    if (j == h->me) continue;
    int64_t jlo, jhi;
    part_of(len, h->np, j, es, &jlo, &jhi);
    m[n_msg++] = (net_msg){h->proc[j], tag, true, (char *)mine + (size_t)jlo * es, (size_t)(jhi - jlo) * es};
    m[n_msg++] = (net_msg){h->proc[j], tag, false, slots + (size_t)slot++ * pb, pb};
  }
  if (net_exchange(c->net, m, n_msg, timeout_of(c), what) < 0) goto done;
  slot = 0;
  for (int j = 0; j < h->np; j++)
    d->srcs[j] = j == h->me ? (const char *)mine + (size_t)plo * es : slots + (size_t)slot++ * pb;
  void *part = (char *)mine + (size_t)plo * es;
  if (phi > plo) comm_reduce(dt, op, h->np, d->srcs, 1, &part, phi - plo, false);
  n_msg = 0;
  for (int j = 0; j < h->np; j++) {
    if (j == h->me) continue;
    int64_t jlo, jhi;
    part_of(len, h->np, j, es, &jlo, &jhi);
    m[n_msg++] = (net_msg){h->proc[j], tag, true, part, pb};
    m[n_msg++] = (net_msg){h->proc[j], tag, false, (char *)mine + (size_t)jlo * es, (size_t)(jhi - jlo) * es};
  }
  if (net_exchange(c->net, m, n_msg, timeout_of(c), what) < 0) goto done;
  /* 3. the other local members' chunks */
  if (comm_sync(c, device, what, h->loc, k, 2)) goto done;
  for (int t = 0; t < k; t++) {
    if (t == s) continue;
    int64_t tlo, thi;
    part_of(count, k, t, es, &tlo, &thi);
    const char *peer = atomic_load_explicit(&c->dev[h->loc[t]].dst, memory_order_relaxed);
    if (thi > tlo) memcpy((char *)out + (size_t)tlo * es, peer + (size_t)tlo * es, (size_t)(thi - tlo) * es);
  }
  rc = comm_sync(c, device, what, h->loc, k, 3);
done:
  free(m);
  return rc;
}

/* The two-level all-reduce applies: asked for, several local members here
 * and the same number in every process of the group. */
static bool use_2level(const hgroup *h) {
  if (!env_config()->hier_allreduce || h->nl < 2 || h->np < 2) return false;
  for (int j = 0; j < h->np; j++)
    if (h->cnt[j] != h->nl) return false;
  return true;
}

enum { HIER_ONE_STEP_BYTES = 4096 };

/* The leader's one-exchange all-reduce of a small vector (the file
 * comment): m has room for n * np messages. */
static int all_reduce_one_step(ts_comm *c, int device, const int *group, const hgroup *h, ts_dtype dt,
                               ts_reduce_kind op, void *out, int64_t count, net_msg *m) {
  const char *what = "all_reduce";
  comm_dev *d = &c->dev[device];
  size_t bytes = (size_t)count * ts_dtype_size(dt);
  char *slots = grow(d, (size_t)(h->n - h->nl) * bytes, what);
  if (!slots) return -1;
  int tag = comm_tag(c, device, group[0]), k = 0, slot = 0;
  for (int i = 0; i < h->n; i++) {
    if (h->pidx[i] == h->me) {
      for (int j = 0; j < h->np; j++)
        if (j != h->me) m[k++] = (net_msg){h->proc[j], tag, true, (void *)src_of(c, group[i]), bytes};
    } else {
      m[k++] = (net_msg){h->proc[h->pidx[i]], tag, false, slots + (size_t)slot++ * bytes, bytes};
    }
  }
  if (net_exchange(c->net, m, k, timeout_of(c), what) < 0) return -1;
  slot = 0;
  for (int i = 0; i < h->n; i++)
    d->srcs[i] = h->pidx[i] == h->me ? src_of(c, group[i]) : slots + (size_t)slot++ * bytes;
  if (count > 0) comm_reduce(dt, op, h->n, d->srcs, 1, &out, count, false);
  return 0;
}

/* The segments of the pipelined all-reduce (the file comment): chunk j of
 * `count` elements (reduced by process j, starts aligned to 64 bytes) and
 * segment s of it, [lo, hi), both empty past the end. */
typedef struct {
  int64_t count, per, seg; /* elements: the vector, a chunk, a segment */
  int segs;                /* per chunk (every process cuts the same way) */
} cuts;

static int cuts_of(int64_t count, int np, size_t es, cuts *k, const char *what) {
  const ts_env_config *env = env_config();
  if (env->hier_segment_invalid)
    return set_error("%s: TESSEL_HIER_SEGMENT_BYTES=%s: expected bytes in [0, 1073741824] (0: one segment)", what,
                     env->hier_segment_invalid);
  int64_t align = (int64_t)(64 / es), per = ((count + np - 1) / np + align - 1) / align * align;
  int64_t sb = env->hier_segment_bytes < 0 ? HIER_SEGMENT_BYTES : env->hier_segment_bytes;
  int64_t seg = sb == 0 ? per : (sb / (int64_t)es + align - 1) / align * align; /* whole 64-byte lines */
  if (seg < 1) seg = 1;
  *k = (cuts){count, per, seg, per ? (int)((per + seg - 1) / seg) : 1};
  return 0;
}

static void seg_of(const cuts *k, int j, int s, int64_t *lo, int64_t *hi) {
  int64_t c_lo = (int64_t)j * k->per < k->count ? (int64_t)j * k->per : k->count;
  int64_t c_hi = c_lo + k->per < k->count ? c_lo + k->per : k->count;
  int64_t a = c_lo + (int64_t)s * k->seg, b = a + k->seg;
  *lo = a < c_hi ? a : c_hi;
  *hi = b < c_hi ? b : c_hi;
}

/* Where remote member `slot`'s segment s of our chunk lands: slot `slot` of
 * `slots` (one chunk of cb bytes each), s segments in. */
static char *slot_segment(char *slots, int slot, size_t cb, const cuts *k, int s, size_t es) {
  return slots + (size_t)slot * cb + (size_t)s * (size_t)k->seg * es;
}

/* The leader's all-reduce of a vector past HIER_ONE_STEP_BYTES (the file
 * comment): every message of both phases is posted at once but the
 * all-gather's sends, which go per segment as soon as its sum is done. */
static int all_reduce_pipelined(ts_comm *c, int device, const int *group, const hgroup *h, ts_dtype dt,
                                ts_reduce_kind op, void *out, int64_t count) {
  const char *what = "all_reduce";
  comm_dev *d = &c->dev[device];
  int n = h->n, np = h->np, tmo = timeout_of(c);
  size_t es = ts_dtype_size(dt);
  cuts k = {0};
  if (cuts_of(count, np, es, &k, what) < 0) return -1;
  int S = k.segs, tag = comm_tag(c, device, group[0]);
  int64_t lo, hi;
  size_t cb = (size_t)k.per * es; /* a slot: one remote member's part of our chunk */
  char *slots = grow(d, (size_t)(n - h->nl) * cb, what);
  /* per segment: the reduce-scatter's sends and receives, the all-gather's
   * sends; then the all-gather's receives (one pending) */
  net_msg *m = malloc(((size_t)S * ((size_t)n * (size_t)np + (size_t)np) + (size_t)S * (size_t)np) * sizeof *m);
  net_pending **p = calloc((size_t)3 * (size_t)S + 1, sizeof *p);
  int rc = -1, k_msg = 0;
  if (!slots || !m || !p) {
    if (slots) set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
    goto done;
  }
  for (int s = 0; s < S; s++) {
    int first = k_msg;
    for (int i = 0; i < n; i++) /* our member i's segment s of every other process's chunk */
      for (int j = 0; j < np && h->pidx[i] == h->me; j++) {
        if (j == h->me) continue;
        seg_of(&k, j, s, &lo, &hi);
        m[k_msg++] = (net_msg){h->proc[j], tag, true, (char *)src_of(c, group[i]) + (size_t)lo * es,
                               (size_t)(hi - lo) * es};
      }
    if (net_start(c->net, m + first, k_msg - first, what, &p[3 * s]) < 0) goto done;
    first = k_msg;
    seg_of(&k, h->me, s, &lo, &hi);
    for (int i = 0, slot = 0; i < n; i++) /* remote member i's segment s of our chunk */
      if (h->pidx[i] != h->me)
        m[k_msg++] = (net_msg){h->proc[h->pidx[i]], tag, false, slot_segment(slots, slot++, cb, &k, s, es),
                               (size_t)(hi - lo) * es};
    if (net_start(c->net, m + first, k_msg - first, what, &p[3 * s + 1]) < 0) goto done;
  }
  int first = k_msg; /* every other process's reduced chunk, into out */
  for (int s = 0; s < S; s++)
    for (int j = 0; j < np; j++) {
      if (j == h->me) continue;
      seg_of(&k, j, s, &lo, &hi);
      m[k_msg++] = (net_msg){h->proc[j], tag, false, (char *)out + (size_t)lo * es, (size_t)(hi - lo) * es};
    }
  if (net_start(c->net, m + first, k_msg - first, what, &p[3 * S]) < 0) goto done;
  for (int s = 0; s < S; s++) {
    if (net_wait(p[3 * s + 1], tmo) < 0) {
      p[3 * s + 1] = NULL;
      goto done;
    }
    p[3 * s + 1] = NULL;
    seg_of(&k, h->me, s, &lo, &hi);
    for (int i = 0, slot = 0; i < n; i++)
      d->srcs[i] = h->pidx[i] == h->me ? src_of(c, group[i]) + (size_t)lo * es
                                       : slot_segment(slots, slot++, cb, &k, s, es);
    void *dst = (char *)out + (size_t)lo * es;
    if (hi > lo) comm_reduce(dt, op, n, d->srcs, 1, &dst, hi - lo, false);
    first = k_msg;
    for (int j = 0; j < np; j++)
      if (j != h->me) m[k_msg++] = (net_msg){h->proc[j], tag, true, dst, (size_t)(hi - lo) * es};
    if (net_start(c->net, m + first, k_msg - first, what, &p[3 * s + 2]) < 0) goto done;
  }
  rc = 0;
  for (int i = 0; i <= 3 * S; i++) {
    if (rc == 0 && net_wait(p[i], tmo) < 0) rc = -1;
    else if (rc < 0) net_cancel(p[i]);
    p[i] = NULL;
  }
done:
  for (int i = 0; p && i <= 3 * S; i++) net_cancel(p[i]);
  if (rc == 0 && TS_METRICS_ON()) obs_count("CommHierSegments", S);
  free(p);
  free(m);
  return rc;
}

int hier_all_reduce(ts_comm *c, int device, const int *group, int n, int r, ts_dtype dt, ts_reduce_kind op,
                    const void *in, void *out, int64_t count) {
  (void)r;
  const char *what = "all_reduce";
  comm_dev *d = &c->dev[device];
  size_t es = ts_dtype_size(dt), bytes = (size_t)count * es;
  d->seq++;
  hgroup h;
  if (hgroup_make(c, group, n, &h, what) < 0) return -1;
  if (use_2level(&h)) {
    const void *src2 = in;
    int rc2 = -1;
    if (in != out && comm_overlaps(in, bytes, out, bytes) && !(src2 = comm_stage(c, device, what, in, bytes)))
      rc2 = -1;
    else
      rc2 = all_reduce_2level(c, device, group, &h, dt, op, src2, out, count);
    free(h.mem);
    return rc2;
  }
  int rc = -1;
  net_msg *m = NULL;
  const void *src = in;
  if (in != out && comm_overlaps(in, bytes, out, bytes) && !(src = comm_stage(c, device, what, in, bytes)))
    goto done;
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  atomic_store_explicit(&d->dst, out, memory_order_relaxed);
  if (comm_sync(c, device, what, h.loc, h.nl, 1)) goto done;
  if (device == h.loc[0] && bytes <= HIER_ONE_STEP_BYTES) {
    m = malloc(((size_t)n * (size_t)h.np + 1) * sizeof *m);
    if (!m) {
      set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
      goto done;
    }
    if (all_reduce_one_step(c, device, group, &h, dt, op, out, count, m) < 0) goto done;
  } else if (device == h.loc[0]) {
    if (all_reduce_pipelined(c, device, group, &h, dt, op, out, count) < 0) goto done;
  }
  rc = copy_from_leader(c, device, &h, out, bytes, what);
done:
  free(m);
  free(h.mem);
  return rc;
}

int hier_all_gather(ts_comm *c, int device, const int *group, int n, int r, const void *in, void *out,
                    int64_t outer, size_t chunk_bytes) {
  const char *what = "all_gather";
  comm_dev *d = &c->dev[device];
  size_t in_bytes = (size_t)outer * chunk_bytes, out_bytes = in_bytes * (size_t)n;
  d->seq++;
  hgroup h;
  if (hgroup_make(c, group, n, &h, what) < 0) return -1;
  int rc = -1;
  net_msg *m = NULL;
  bool in_place = outer == 1 && in == (const char *)out + (size_t)r * chunk_bytes;
  const void *src = in;
  if (!in_place && comm_overlaps(in, in_bytes, out, out_bytes) &&
      !(src = comm_stage(c, device, what, in, in_bytes)))
    goto done;
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  atomic_store_explicit(&d->dst, out, memory_order_relaxed);
  if (comm_sync(c, device, what, h.loc, h.nl, 1)) goto done;
  if (device == h.loc[0]) {
    char *slots = grow(d, outer == 1 ? 0 : (size_t)(n - h.nl) * in_bytes, what);
    m = malloc(((size_t)n * (size_t)h.np + 1) * sizeof *m);
    if (!slots || !m) {
      if (!m) set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what);
      goto done;
    }
    int tag = comm_tag(c, device, group[0]), k = 0, slot = 0;
    for (int i = 0; i < n; i++) {
      if (h.pidx[i] == h.me) {
        for (int j = 0; j < h.np; j++)
          if (j != h.me) m[k++] = (net_msg){h.proc[j], tag, true, (void *)src_of(c, group[i]), in_bytes};
      } else { /* outer 1: straight into its place in out (src, staged or in place, is not there) */
        char *rb = outer == 1 ? (char *)out + (size_t)i * chunk_bytes : slots + (size_t)slot++ * in_bytes;
        m[k++] = (net_msg){h.proc[h.pidx[i]], tag, false, rb, in_bytes};
      }
    }
    if (net_exchange(c->net, m, k, timeout_of(c), what) < 0) goto done;
    slot = 0;
    for (int i = 0; i < n; i++) {
      bool local = h.pidx[i] == h.me;
      if (!local && outer == 1) continue; /* received in place */
      const char *s = local ? src_of(c, group[i]) : slots + (size_t)slot++ * in_bytes;
      if (!local) obs_count("CommHierCopyBytes", (int64_t)in_bytes);
      for (int64_t o = 0; o < outer; o++) {
        char *dst = (char *)out + ((size_t)o * (size_t)n + (size_t)i) * chunk_bytes;
        if (dst != s + (size_t)o * chunk_bytes) memcpy(dst, s + (size_t)o * chunk_bytes, chunk_bytes);
      }
    }
  }
  rc = copy_from_leader(c, device, &h, out, out_bytes, what);
done:
  free(m);
  free(h.mem);
  return rc;
}

/* The rank of process j's first member when the blocks of our members for
 * j's members already lie in one piece, in order, in our member's input: a
 * single local member, outer 1 and j's members at consecutive ranks; else -1
 * (the leader packs them). */
static int send_in_place(const hgroup *h, int j, int64_t outer) {
  if (h->nl != 1 || outer != 1) return -1;
  int t0 = -1, last = -1;
  for (int t = 0; t < h->n; t++) {
    if (h->pidx[t] != j) continue;
    if (t0 < 0) t0 = t;
    else if (t != last + 1) return -1;
    last = t;
  }
  return t0;
}

/* Reduce-scatter and all-to-all move the same blocks: member i's in viewed as
 * (outer, n, row) sends block in_i[:, t, :] to member t. The leader sends,
 * per other process j, the blocks of our members for j's members ([i local]
 * [t of j], each outer*row bytes: straight from the input where they lie in
 * one piece (send_in_place), else packed; metrics CommHierCopyBytes), and
 * receives j's blocks for ours ([i of j][t local]); received blocks are
 * published through the leader's dst. */
static int exchange_blocks(ts_comm *c, int device, const int *group, const hgroup *h, int64_t outer, size_t row,
                           const char *what) {
  comm_dev *d = &c->dev[device];
  int n = h->n;
  size_t blk = (size_t)outer * row, send_total = 0, recv_total = 0;
  for (int j = 0; j < h->np; j++) {
    if (j == h->me) continue;
    if (send_in_place(h, j, outer) < 0) send_total += (size_t)h->nl * (size_t)h->cnt[j] * blk;
    recv_total += (size_t)h->cnt[j] * (size_t)h->nl * blk;
  }
  char *buf = grow(d, recv_total + send_total, what);
  net_msg *m = malloc((size_t)2 * (size_t)h->np * sizeof *m);
  if (!buf || !m) {
    free(m);
    return buf ? set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", what) : -1;
  }
  char *rp = buf, *sp = buf + recv_total;
  int tag = comm_tag(c, device, group[0]), k = 0;
  for (int j = 0; j < h->np; j++) {
    if (j == h->me) continue;
    size_t rb = (size_t)h->cnt[j] * (size_t)h->nl * blk; /* as many bytes each way */
    int t0 = send_in_place(h, j, outer);
    char *s0 = t0 >= 0 ? (char *)src_of(c, h->loc[0]) + (size_t)t0 * row : sp;
    for (int i = 0; i < n && t0 < 0; i++) {
      if (h->pidx[i] != h->me) continue;
      const char *in = src_of(c, group[i]);
      for (int t = 0; t < n; t++) {
        if (h->pidx[t] != j) continue;
        for (int64_t o = 0; o < outer; o++, sp += row)
          memcpy(sp, in + ((size_t)o * (size_t)n + (size_t)t) * row, row);
      }
    }
    if (t0 < 0) obs_count("CommHierCopyBytes", (int64_t)rb);
    m[k++] = (net_msg){h->proc[j], tag, true, s0, rb};
    m[k++] = (net_msg){h->proc[j], tag, false, rp, rb};
    rp += rb;
  }
  int rc = net_exchange(c->net, m, k, timeout_of(c), what);
  free(m);
  atomic_store_explicit(&d->dst, buf, memory_order_relaxed);
  return rc;
}

/* Where block (member i -> local member of rank t) is, row o: in a local
 * member's input or in the leader's received blocks. */
static const char *block_row(const ts_comm *c, const int *group, const hgroup *h, int i, int t, int64_t o,
                             int64_t outer, size_t row) {
  if (h->pidx[i] == h->me) return src_of(c, group[i]) + ((size_t)o * (size_t)h->n + (size_t)t) * row;
  size_t blk = (size_t)outer * row, off = 0;
  for (int j = 0; j < h->pidx[i]; j++)
    if (j != h->me) off += (size_t)h->cnt[j] * (size_t)h->nl * blk;
  off += ((size_t)h->sub[i] * (size_t)h->nl + (size_t)h->sub[t]) * blk + (size_t)o * row;
  return (const char *)atomic_load_explicit(&c->dev[h->loc[0]].dst, memory_order_relaxed) + off;
}

/* Shared frame of reduce-scatter (dt valid) and all-to-all (reduce false). */
static int blocks_call(ts_comm *c, int device, const int *group, int n, int r, bool reduce, ts_dtype dt,
                       ts_reduce_kind op, const void *in, void *out, int64_t outer, size_t row, const char *what) {
  comm_dev *d = &c->dev[device];
  size_t in_bytes = (size_t)outer * row * (size_t)n, out_bytes = reduce ? (size_t)outer * row : in_bytes;
  d->seq++;
  hgroup h;
  if (hgroup_make(c, group, n, &h, what) < 0) return -1;
  int rc = -1;
  const void *src = in;
  if (comm_overlaps(in, in_bytes, out, out_bytes) && !(src = comm_stage(c, device, what, in, in_bytes))) goto done;
  atomic_store_explicit(&d->src, src, memory_order_relaxed);
  if (comm_sync(c, device, what, h.loc, h.nl, 1)) goto done;
  if (device == h.loc[0] && exchange_blocks(c, device, group, &h, outer, row, what) < 0) goto done;
  if (comm_sync(c, device, what, h.loc, h.nl, 2)) goto done;
  for (int64_t o = 0; o < outer && row; o++) {
    if (reduce) {
      for (int i = 0; i < n; i++) d->srcs[i] = block_row(c, group, &h, i, r, o, outer, row);
      void *dst = (char *)out + (size_t)o * row;
      comm_reduce(dt, op, n, d->srcs, 1, &dst, (int64_t)(row / ts_dtype_size(dt)), false);
    } else {
      for (int i = 0; i < n; i++) /* out[o, i, :] = in_i[o, r, :] */
        memcpy((char *)out + ((size_t)o * (size_t)n + (size_t)i) * row, block_row(c, group, &h, i, r, o, outer, row),
               row);
    }
  }
  rc = comm_sync(c, device, what, h.loc, h.nl, 3);
done:
  free(h.mem);
  return rc;
}

int hier_reduce_scatter(ts_comm *c, int device, const int *group, int n, int r, ts_dtype dt, ts_reduce_kind op,
                        const void *in, void *out, int64_t outer, int64_t chunk) {
  return blocks_call(c, device, group, n, r, true, dt, op, in, out, outer, (size_t)chunk * ts_dtype_size(dt),
                     "reduce_scatter");
}

int hier_all_to_all(ts_comm *c, int device, const int *group, int n, int r, const void *in, void *out,
                    int64_t outer, size_t chunk_bytes) {
  return blocks_call(c, device, group, n, r, false, TS_F32, TS_REDUCE_SUM, in, out, outer, chunk_bytes,
                     "all_to_all");
}
