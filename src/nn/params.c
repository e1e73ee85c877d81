/* params.c — named parameter sets: declaration with shape checks, seeded
 * PyTorch-style initialization of host values, lazily created device buffers,
 * and binding parameters into any number of graphs as named inputs.
 *
 * Values live in two places. The host copy is drawn at declaration; the device
 * buffer of a client is created from it on the first ts_params_buffer call and
 * then updated in place by executes (aliased outputs), which this file cannot
 * see. So the rule is: once a buffer has been handed out, the device copy of
 * the client it was handed out for (the "owner") is presumed newer, and
 * ts_params_host / ts_params_sync_host read it back first.
 *
 * ts_params_host hands out a writable pointer. To tell whether the caller
 * wrote through it (which makes the host copy newer, to be uploaded by the
 * next ts_params_buffer) without a "mark dirty" call, a 64-bit hash of the
 * host copy is taken when the pointer is handed out and compared at the next
 * call that touches the parameter. A read-only look therefore never clobbers
 * newer device values, and a write is never lost to a read-back.
 *
 * Initialization draws from xoshiro256** seeded by splitmix64(seed)
 * (util/prng.h), one stream per set, in declaration order: element k of a
 * uniform init is -b + 2b*u_k with u_k in [0, 1) from the top 53 bits; a
 * normal init uses Box-Muller (two draws per element). Zeros / ones draw
 * nothing. Values are computed in double and rounded to the dtype. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error.h"
#include "util/prng.h"   /* xoshiro256** */
#include "tessel/nn.h"
#include "util/half.h" /* f32 -> bf16 / f16 */

/* Buffers of one parameter on one client. */
typedef struct {
  ts_client *client;
  ts_buffer *buf;
} params_dev;

typedef struct {
  char *name;
  ts_dtype dt;
  int rank;
  int64_t shape[TS_MAX_RANK];
  int64_t numel;
  ts_init init;
  bool trainable;
  void *host;       // (shape) row-major, dtype dt
  params_dev *devs; // one per client that asked
  int n_devs;
  int owner;        // index into devs of the presumed-newest device copy, -1 none
  bool host_newer;  // host copy written since the last upload
  bool host_out;    // pointer handed out; host_hash is the content at that time
  uint64_t host_hash;
} params_entry;

struct ts_params {
  ts_prng rng;
  params_entry *e;
  int n, cap;
};

ts_params *ts_params_new(uint64_t seed) {
  ts_params *p = calloc(1, sizeof *p);
  if (!p) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "ts_params_new: out of memory");
    return NULL;
  }
  ts_prng_seed(&p->rng, seed);
  return p;
}

/* Frees the device buffers too, so it must run before ts_client_free of
 * every client that asked for one. */
void ts_params_free(ts_params *p) {
  if (!p) return;
  for (int i = 0; i < p->n; i++) {
    params_entry *e = &p->e[i];
    for (int d = 0; d < e->n_devs; d++) ts_buffer_free(e->devs[d].buf);
    free(e->devs);
    free(e->host);
    free(e->name);
  }
  free(p->e);
  free(p);
}

int ts_params_count(const ts_params *p) { return p ? p->n : 0; }

static bool params_index_ok(const ts_params *p, int i, const char *who) {
  if (!p) {
    set_error("%s: parameter set is NULL", who);
    return false;
  }
  if (i < 0 || i >= p->n) {
    set_error("%s: parameter index %d out of range (the set has %d)", who, i, p->n);
    return false;
  }
  return true;
}

const char *ts_params_name(const ts_params *p, int i) {
  return params_index_ok(p, i, "ts_params_name") ? p->e[i].name : NULL;
}

bool ts_params_trainable(const ts_params *p, int i) {
  return params_index_ok(p, i, "ts_params_trainable") && p->e[i].trainable;
}

int ts_params_find(const ts_params *p, const char *name) {
  if (!p || !name) return -1;
  for (int i = 0; i < p->n; i++)
    if (strcmp(p->e[i].name, name) == 0) return i;
  return -1;
}

int64_t ts_params_numel(const ts_params *p, int i) {
  return params_index_ok(p, i, "ts_params_numel") ? p->e[i].numel : 0;
}

int64_t ts_params_trainable_numel(const ts_params *p) {
  int64_t n = 0;
  for (int i = 0; p && i < p->n; i++)
    if (p->e[i].trainable) n += p->e[i].numel;
  return n;
}

/* "f32[512,784]" */
static const char *params_shape_str(char *buf, size_t len, ts_dtype dt, int rank, const int64_t *shape) {
  size_t o = (size_t)snprintf(buf, len, "%s[", ts_dtype_name(dt));
  for (int i = 0; i < rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

static void params_store(void *host, ts_dtype dt, int64_t k, double v) {
  switch (dt) {
  case TS_F32: ((float *)host)[k] = (float)v; break;
  case TS_F64: ((double *)host)[k] = v; break;
  case TS_BF16: ((uint16_t *)host)[k] = ts_f32_to_bf16((float)v); break;
  case TS_F16: ((uint16_t *)host)[k] = ts_f32_to_f16((float)v); break;
  case TS_I32: ((int32_t *)host)[k] = (int32_t)v; break;
  case TS_I64: ((int64_t *)host)[k] = (int64_t)v; break;
  case TS_U8: ((uint8_t *)host)[k] = (uint8_t)v; break;
  case TS_BOOL: ((uint8_t *)host)[k] = v != 0; break;
  default: break;
  }
}

/* Fills e->host (already zeroed) from e->init. */
static int params_draw(ts_params *p, params_entry *e) {
  ts_init in = e->init;
  double bound = in.a;
  switch (in.kind) {
  case TS_INIT_ZEROS: return 0;
  case TS_INIT_ONES:
    for (int64_t k = 0; k < e->numel; k++) params_store(e->host, e->dt, k, 1.0);
    return 0;
  case TS_INIT_FAN_IN_UNIFORM:
    if (in.fan_in <= 0)
      return set_error("parameter %s: fan-in uniform init needs fan_in > 0, got %lld", e->name,
                          (long long)in.fan_in);
    bound = 1.0 / sqrt((double)in.fan_in);
    /* fall through */
  case TS_INIT_UNIFORM:
    if (!ts_dtype_is_float(e->dt))
      return set_error("parameter %s: random init needs a float dtype, not %s", e->name,
                          ts_dtype_name(e->dt));
    for (int64_t k = 0; k < e->numel; k++)
      params_store(e->host, e->dt, k, -bound + 2.0 * bound * ts_prng_uniform(&p->rng));
    return 0;
  case TS_INIT_NORMAL:
    if (!ts_dtype_is_float(e->dt))
      return set_error("parameter %s: random init needs a float dtype, not %s", e->name,
                          ts_dtype_name(e->dt));
    for (int64_t k = 0; k < e->numel; k++)
      params_store(e->host, e->dt, k, in.a * ts_prng_normal(&p->rng));
    return 0;
  }
  return set_error("parameter %s: unknown init kind %d", e->name, (int)in.kind);
}

/* The index of a new entry, or -1. */
static int params_declare(ts_params *p, const char *name, ts_dtype dt, int rank, const int64_t *shape,
                          ts_init init, bool trainable) {
  if ((unsigned)dt >= TS_DTYPE_COUNT) return set_error("parameter %s: invalid dtype %d", name, (int)dt);
  if (rank < 0 || rank > TS_MAX_RANK)
    return set_error("parameter %s: rank %d out of range [0, %d]", name, rank, TS_MAX_RANK);
  for (int d = 0; d < rank; d++)
    if (shape[d] <= 0)
      return set_error("parameter %s: dim %d has size %lld (must be > 0)", name, d, (long long)shape[d]);
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 32;
    params_entry *ne = realloc(p->e, (size_t)cap * sizeof *ne);
    if (!ne) return set_error_code(TS_ERR_OUT_OF_MEMORY, "parameter %s: out of memory", name);
    p->e = ne;
    p->cap = cap;
  }
  params_entry *e = &p->e[p->n];
  memset(e, 0, sizeof *e);
  e->dt = dt;
  e->rank = rank;
  if (rank) memcpy(e->shape, shape, (size_t)rank * sizeof *shape);
  e->numel = ts_shape_numel(rank, shape);
  e->init = init;
  e->trainable = trainable;
  e->owner = -1;
  e->name = strdup(name);
  e->host = calloc((size_t)e->numel, ts_dtype_size(dt));
  if (!e->name || !e->host) {
    free(e->name);
    free(e->host);
    return set_error_code(TS_ERR_OUT_OF_MEMORY,
                             "parameter %s: out of memory for %lld elements", name, (long long)e->numel);
  }
  if (params_draw(p, e) != 0) {
    free(e->name);
    free(e->host);
    return -1;
  }
  return p->n++;
}

static bool params_same_shape(int ra, const int64_t *a, int rb, const int64_t *b) {
  if (ra != rb) return false;
  for (int d = 0; d < ra; d++)
    if (a[d] != b[d]) return false;
  return true;
}

ts_tensor ts_params_use(ts_params *p, ts_graph *g, const char *name, ts_dtype dt, int rank,
                        const int64_t *shape, ts_init init, bool trainable) {
  if (!p || !g || !name || (rank > 0 && !shape)) {
    set_error("ts_params_use: NULL argument (params %p, graph %p, name %s)", (void *)p, (void *)g,
                 name ? name : "NULL");
    return TS_NONE;
  }
  char want[160], have[160];
  int i = ts_params_find(p, name);
  if (i >= 0) {
    params_entry *e = &p->e[i];
    if (e->dt != dt || !params_same_shape(e->rank, e->shape, rank, shape)) {
      set_error("parameter %s was declared as %s but is now used as %s", name,
                   params_shape_str(have, sizeof have, e->dt, e->rank, e->shape),
                   params_shape_str(want, sizeof want, dt, rank, shape));
      return TS_NONE;
    }
  } else {
    i = params_declare(p, name, dt, rank, shape, init, trainable);
    if (i < 0) return TS_NONE;
  }
  /* One input per name per graph: a second use (e.g. a weight shared by two
   * layers, or the optimizer reading a parameter) returns the same node. */
  ts_tensor t = ts_graph_find_input(g, name);
  if (t == TS_NONE) {
    const params_entry *e = &p->e[i];
    return ts_input(g, name, e->dt, e->rank, e->shape);
  }
  if (ts_tensor_dtype(g, t) != dt || !params_same_shape(ts_tensor_rank(g, t), ts_tensor_shape(g, t), rank, shape)) {
    set_error("parameter %s: the graph already has an input of that name as %s, but the parameter is %s",
                 name,
                 params_shape_str(have, sizeof have, ts_tensor_dtype(g, t), ts_tensor_rank(g, t),
                                  ts_tensor_shape(g, t)),
                 params_shape_str(want, sizeof want, dt, rank, shape));
    return TS_NONE;
  }
  return t;
}

/* Sets "parameter <name>: <what> failed: <the runtime's message>", keeping
 * the runtime's code. */
static int params_fail(const params_entry *e, const char *what) {
  return set_error_context("parameter %s: %s failed", e->name, what);
}

/* A hash of the host copy, 8 bytes at a time (only compared with itself). */
static uint64_t params_hash(const params_entry *e) {
  size_t bytes = (size_t)e->numel * ts_dtype_size(e->dt);
  const uint8_t *b = e->host;
  uint64_t h = 0x243f6a8885a308d3ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  for (; i < bytes; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Settles a handed-out host pointer: if the caller wrote through it, the host
 * copy is now the newest value. */
static void params_settle(params_entry *e) {
  if (!e->host_out) return;
  if (params_hash(e) != e->host_hash) e->host_newer = true;
  e->host_out = false;
}

/* Reads the owner's device copy into the host copy (no-op without one or when
 * the host copy is newer). */
static int params_pull(params_entry *e) {
  if (e->owner < 0 || e->host_newer) return 0;
  size_t bytes = (size_t)e->numel * ts_dtype_size(e->dt);
  if (ts_buffer_read(e->devs[e->owner].buf, e->host, bytes) != 0)
    return params_fail(e, "reading the device value back");
  return 0;
}

void *ts_params_host(ts_params *p, int i) {
  if (!params_index_ok(p, i, "ts_params_host")) return NULL;
  params_entry *e = &p->e[i];
  params_settle(e);
  if (params_pull(e) != 0) return NULL;
  if (e->owner >= 0) {
    e->host_out = true;
    e->host_hash = params_hash(e);
  }
  return e->host;
}

ts_buffer *ts_params_buffer(ts_params *p, ts_client *c, int i) {
  if (!params_index_ok(p, i, "ts_params_buffer")) return NULL;
  if (!c) {
    set_error("ts_params_buffer: client is NULL (parameter %s)", p->e[i].name);
    return NULL;
  }
  params_entry *e = &p->e[i];
  int d = 0;
  while (d < e->n_devs && e->devs[d].client != c) d++;
  /* Switching clients (or a host write) moves the newest value through the host. */
  params_settle(e);
  if (e->owner != d && params_pull(e) != 0) return NULL;
  size_t bytes = (size_t)e->numel * ts_dtype_size(e->dt);
  if (d == e->n_devs) {
    ts_buffer *b = ts_buffer_from_host(c, e->dt, e->rank, e->shape, e->host);
    if (!b) {
      params_fail(e, "creating its device buffer");
      return NULL;
    }
    params_dev *nd = realloc(e->devs, (size_t)(e->n_devs + 1) * sizeof *nd);
    if (!nd) {
      ts_buffer_free(b);
      set_error_code(TS_ERR_OUT_OF_MEMORY, "parameter %s: out of memory", e->name);
      return NULL;
    }
    e->devs = nd;
    e->devs[e->n_devs++] = (params_dev){c, b};
  } else if (e->owner != d || e->host_newer) {
    if (ts_buffer_write(e->devs[d].buf, e->host, bytes) != 0) {
      params_fail(e, "uploading its host value");
      return NULL;
    }
  }
  e->owner = d;
  e->host_newer = false;
  return e->devs[d].buf;
}

int ts_params_sync_host(ts_params *p) {
  if (!p) return set_error("ts_params_sync_host: parameter set is NULL");
  for (int i = 0; i < p->n; i++) {
    params_settle(&p->e[i]);
    if (params_pull(&p->e[i]) != 0) return -1;
  }
  return 0;
}
