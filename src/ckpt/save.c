/* save.c — ts_ckpt_save and the background saver: every process holds the
 * buffers of its own devices (ts_buffer_hold: the snapshot, no copy), writes
 * their blocks as one safetensors file of a temporary directory, then
 * process 0 assembles index.json from the processes' small descriptions of
 * what they wrote and publishes the checkpoint by renames (commit.c).
 *
 * Stages and their barriers (ts_client_check_same, which also carries each
 * process's verdict so that one failure fails every process):
 *   prepare   process 0 creates ROOT/.tmp-step-N             | barrier
 *   snapshot  each process holds its buffers                  | barrier
 *             (the caller waits only up to here)
 *   files     each process writes shard-P-of-Q.safetensors    | barrier
 *             from the held buffers (copy, checksums and
 *             writes pipelined; each hold released once
 *             copied; fsync), and for P > 0 shard-P-of-Q.json
 *   commit    process 0: index.json, rename into place,       | barrier
 *             `latest`, pruning
 * ts_ckpt_save runs the files stage on the caller's thread; a saver runs it
 * on a thread of its own, and the commit too when alone (with several
 * processes the barriers after `files` are in the poll or wait that finds
 * every process done: collectives stay on the caller's thread).
 *
 * The files stage itself (a pipeline: copy + checksums of a chunk of the
 * file's image from the held blocks while the chunks before it are written
 * with O_DIRECT) is save_write.c; what both share is save_internal.h. */
#define _GNU_SOURCE /* sync_file_range */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h> /* SCHED_IDLE */
#include <sys/mman.h>
#include <sys/resource.h> /* setpriority */
#include <sys/stat.h>
#include <sys/syscall.h> /* SYS_gettid */
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "ckpt/save_internal.h"
#include "util/clock.h"
#include "util/config.h" /* TESSEL_CKPT_PRIORITY */
#include "tessel/metrics.h" /* ts_metrics_add: CkptSnapshotTime, ... */
#include "util/error.h"
#include "util/hash.h" /* util_hash64: format 1 */


void (*ckpt_test_hook)(const char *stage); /* ckpt_internal.h: NULL unless a test sets it */
int ckpt_write_version = CKPT_FORMAT_VERSION; /* ckpt_internal.h: tests set 1 */

void ckpt_test_stage(const char *stage) {
  if (ckpt_test_hook) ckpt_test_hook(stage);
}

ts_ckpt_kind ts_ckpt_kind_of(const char *name, bool trainable) {
  static const char *const sfx[] = {".exp_avg", ".exp_avg_sq", ".momentum_buffer"};
  size_t n = name ? strlen(name) : 0;
  for (int k = 0; k < 3; k++) {
    size_t m = strlen(sfx[k]);
    if (n > m && strcmp(name + n - m, sfx[k]) == 0) return TS_CKPT_OPTIMIZER;
  }
  return trainable ? TS_CKPT_PARAM : TS_CKPT_BUFFER;
}

/* Every process reports its verdict for `stage`; 0 only if all succeeded.
 * Collective (a barrier: no process passes before all have arrived). */
static int ckpt_agree(ts_client *c, const char *stage, int rc) {
  char own[1024];
  snprintf(own, sizeof own, "%s", rc == 0 ? "" : ts_last_error());
  char text[1200];
  snprintf(text, sizeof text, "checkpoint %s: %s", stage, rc == 0 ? "ok" : own);
  int same = ts_client_check_same(c, "the checkpoint save", text);
  if (rc != 0) return set_error("%s", own);
  if (same != 0) return set_error("checkpoint %s failed on another process: %s", stage, ts_last_error());
  return 0;
}


/* The blocks of tensor i this process writes: every distinct non-empty
 * range once, by the lowest device id holding it (replicas written once). */
static int save_plan_tensor(ts_client *c, const ts_ckpt_entry *e, int i, save_block **out, int *n, int *cap) {
  int nd = ts_client_num_devices(c), rank = ts_buffer_rank(e->buf);
  int64_t (*seen)[2][TS_MAX_RANK] = malloc((size_t)nd * sizeof *seen);
  if (!seen) return set_error("checkpoint: out of memory");
  int ns = 0, rc = 0;
  for (int d = 0; d < nd && rc == 0; d++) {
    int64_t st[TS_MAX_RANK] = {0}, li[TS_MAX_RANK] = {0};
    if (ts_buffer_shard_range(e->buf, d, st, li) < 0) {
      rc = -1;
      break;
    }
    if (ckpt_block_numel(rank, st, li) == 0) continue;
    bool dup = false;
    for (int k = 0; k < ns && !dup; k++)
      dup = memcmp(seen[k][0], st, sizeof st) == 0 && memcmp(seen[k][1], li, sizeof li) == 0;
    if (dup) continue;
    memcpy(seen[ns][0], st, sizeof st);
    memcpy(seen[ns][1], li, sizeof li);
    ns++;
    if (!ts_client_is_local_device(c, d)) continue;
    if (*n == *cap) {
      int nc = *cap ? 2 * *cap : 16;
      save_block *nb = realloc(*out, (size_t)nc * sizeof *nb);
      if (!nb) {
        rc = set_error("checkpoint: out of memory");
        break;
      }
      *out = nb, *cap = nc;
    }
    save_block *b = &(*out)[(*n)++];
    memset(b, 0, sizeof *b);
    b->t = i, b->device = d;
    memcpy(b->start, st, sizeof st);
    memcpy(b->limit, li, sizeof li);
  }
  free(seen);
  return rc;
}

static void save_block_name(const ts_ckpt_entry *e, const save_block *b, char *buf, size_t n) {
  ck_tensor t = {.name = (char *)e->name, .rank = ts_buffer_rank(e->buf)};
  memcpy(t.shape, ts_buffer_shape(e->buf), (size_t)t.rank * sizeof *t.shape);
  ck_block cb = {0};
  memcpy(cb.start, b->start, sizeof cb.start);
  memcpy(cb.limit, b->limit, sizeof cb.limit);
  ckpt_block_name(&t, &cb, buf, n);
}

/* The mesh of the first sharded buffer, as "data=2,model=2". */
static void save_mesh_text(int n, const ts_ckpt_entry *t, char *buf, size_t len) {
  buf[0] = 0;
  for (int i = 0; i < n; i++) {
    const ts_sharding *s = ts_buffer_sharding(t[i].buf);
    if (!s) continue;
    const ts_mesh *m = ts_sharding_mesh(s);
    int o = 0;
    for (int a = 0; a < ts_mesh_rank(m) && o >= 0 && (size_t)o < len; a++) {
      const char *nm = ts_mesh_axis_name(m, a);
      o += nm ? snprintf(buf + o, len - (size_t)o, "%s%s=%lld", a ? "," : "", nm, (long long)ts_mesh_axis_size(m, a))
              : snprintf(buf + o, len - (size_t)o, "%s%lld", a ? "," : "", (long long)ts_mesh_axis_size(m, a));
    }
    return;
  }
}

static int save_check_args(ts_client *c, const char *root, const ts_ckpt_meta *meta, int n, const ts_ckpt_entry *t) {
  if (!c || !root || !root[0] || !meta || n < 0 || (n > 0 && !t))
    return set_error("ts_ckpt_save: NULL or empty argument (client, root, meta or tensors)");
  if (meta->step < 0 || meta->step > 99999999)
    return set_error("ts_ckpt_save: step %lld is outside [0, 99999999]", (long long)meta->step);
  if (strlen(root) > 3000) return set_error("ts_ckpt_save: root path is too long");
  for (int i = 0; i < n; i++) {
    if (!t[i].name || !t[i].name[0] || strlen(t[i].name) > 1000 || !t[i].buf)
      return set_error("ts_ckpt_save: tensor %d has no name, a name over 1000 bytes or no buffer", i);
    if ((unsigned)t[i].kind > TS_CKPT_BUFFER)
      return set_error("ts_ckpt_save: tensor %s has unknown kind %d", t[i].name, (int)t[i].kind);
    for (int j = 0; j < i; j++)
      if (strcmp(t[i].name, t[j].name) == 0) return set_error("ts_ckpt_save: tensor %s is listed twice", t[i].name);
  }
  return 0;
}


/* Releases the holds not released yet (the copy is done, or the save failed). */
void job_release(save_job *j) {
  for (int i = 0; j->holds && i < j->n; i++)
    if (j->holds[i]) {
      ts_buffer_hold_release(j->holds[i]);
      j->holds[i] = NULL;
    }
}

static void job_free(save_job *j) {
  if (!j) return;
  job_release(j);
  free(j->holds);
  free(j->same);
  for (int i = 0; j->t && i < j->n; i++) {
    free(j->t[i].name);
    free(j->t[i].sharding);
    free(j->t[i].spec);
  }
  for (int k = 0; j->se && k < j->nb; k++) free(j->se[k].name);
  free(j->t);
  free(j->se);
  free(j->bl);
  free(j->hdr);
  free(j->side);
  free(j);
}

/* The partition spec of s as text with axis names ("data+model,None"); "" when
 * replicated or NULL. malloc'd. */
static char *save_spec_text(const ts_sharding *s) {
  ts_strbuf sb = {0};
  const ts_partition_spec *ps = s ? ts_sharding_spec(s) : NULL;
  const ts_mesh *m = s ? ts_sharding_mesh(s) : NULL;
  bool any = false;
  for (int d = 0; ps && d < ps->rank; d++) any = any || ps->naxes[d] > 0;
  for (int d = 0; any && d < ps->rank; d++) {
    sb_printf(&sb, d ? "," : "");
    if (ps->naxes[d] == 0) sb_printf(&sb, "None");
    for (int k = 0; k < ps->naxes[d]; k++) {
      const char *nm = ts_mesh_axis_name(m, ps->axes[d][k]);
      if (nm) sb_printf(&sb, "%s%s", k ? "+" : "", nm);
      else sb_printf(&sb, "%s%d", k ? "+" : "", ps->axes[d][k]);
    }
  }
  return sb_finish(&sb, "checkpoint");
}

/* The snapshot, on the caller's thread: plans this process's blocks, builds
 * the header, describes the tensors for the index and holds every buffer
 * (ts_buffer_hold: the next steps compute their new values into other
 * memory, the blocks stay as they are now) for save_copy to read on the
 * writer's thread. No block is copied here. */
static int save_snapshot(ts_ckpt_saver *s, save_job *j, const ts_ckpt_entry *t) {
  ts_client *c = s->c;
  int cap = 0, rc = 0;
  if (!(j->t = calloc((size_t)j->n + 1, sizeof *j->t)) || !(j->holds = calloc((size_t)j->n + 1, sizeof *j->holds)) ||
      !(j->same = calloc((size_t)j->n + 1, sizeof *j->same)))
    return set_error("checkpoint: out of memory");
  for (int i = 0; i < j->n && rc == 0; i++) {
    ck_tensor *ct = &j->t[i];
    ct->name = strdup(t[i].name);
    ct->dt = ts_buffer_dtype(t[i].buf);
    ct->rank = ts_buffer_rank(t[i].buf);
    memcpy(ct->shape, ts_buffer_shape(t[i].buf), (size_t)ct->rank * sizeof *ct->shape);
    ct->kind = t[i].kind;
    const ts_sharding *sh = ts_buffer_sharding(t[i].buf);
    ct->sharding = sh ? ts_sharding_to_string(sh) : strdup("{replicated}");
    ct->spec = save_spec_text(sh);
    if (!ct->name || !ct->sharding || !ct->spec) rc = set_error("checkpoint: out of memory");
    if (rc == 0) rc = save_plan_tensor(c, &t[i], i, &j->bl, &j->nb, &cap);
  }
  if (rc == 0 && !(j->se = calloc((size_t)j->nb + 1, sizeof *j->se))) rc = set_error("checkpoint: out of memory");
  uint64_t off = 0;
  for (int k = 0; k < j->nb && rc == 0; k++) {
    const ts_ckpt_entry *e = &t[j->bl[k].t];
    char bn[2048];
    save_block_name(e, &j->bl[k], bn, sizeof bn);
    st_entry *se = &j->se[k];
    se->dt = ts_buffer_dtype(e->buf);
    se->rank = ts_buffer_rank(e->buf);
    for (int d = 0; d < se->rank; d++) se->shape[d] = j->bl[k].limit[d] - j->bl[k].start[d];
    se->begin = off;
    off += (uint64_t)ts_shape_numel(se->rank, se->shape) * ts_dtype_size(se->dt);
    se->end = off;
    if (!(se->name = strdup(bn))) rc = set_error("checkpoint: out of memory");
  }
  j->data_bytes = off;
  char *json = NULL;
  if (rc == 0 && !(json = st_header_build(j->nb, j->se, &j->hlen))) rc = -1;
  if (rc == 0 && !(j->hdr = malloc(8 + j->hlen))) rc = set_error("checkpoint: out of memory");
  if (rc == 0) {
    for (int k = 0; k < 8; k++) j->hdr[k] = (char)(uint8_t)((uint64_t)j->hlen >> (8 * k)); /* little-endian u64 */
    memcpy(j->hdr + 8, json, j->hlen);
  }
  free(json);
  for (int i = 0; i < j->n && rc == 0; i++) { /* a buffer listed twice is held once */
    j->same[i] = i;
    for (int k = 0; k < i && j->same[i] == i; k++)
      if (t[k].buf == t[i].buf) j->same[i] = k;
    if (j->same[i] == i && !(j->holds[i] = ts_buffer_hold_new((ts_buffer *)t[i].buf))) {
      char e[900];
      snprintf(e, sizeof e, "%s", ts_last_error());
      rc = set_error("checkpoint: %s: %s", t[i].name, e);
    }
  }
  return rc;
}

/* The prepare stage (process 0): ROOT exists, debris of crashed saves is
 * gone, the temporary directory is created. */
static int save_prepare(const save_job *j) {
  if (ckpt_prepare_root(j->root) < 0) return -1;
  if (mkdir(j->tmp, 0755) != 0) return set_error("%s: cannot create: %s", j->tmp, strerror(errno));
  return 0;
}

/* The writer: the files stage, and alone the commit. Runs on the saver's
 * thread (or inline for ts_ckpt_save); its error goes to job->err. */
static void *save_writer(void *arg) {
  ts_ckpt_saver *s = arg;
  save_job *j = s->job;
  ckpt_test_stage("copy");
  int rc = j->np == 1 ? save_prepare(j) : 0;
  if (rc == 0) rc = save_files(s, j); /* the copy and the writes, overlapped */
  else job_release(j);
  if (rc == 0) ckpt_test_stage("files");
  j->written_at = util_now_s();
  if (rc == 0 && j->np == 1) {
    rc = ckpt_commit(j->root, j->tmp, &j->meta, j->version, j->n, j->t, 1, j->side, j->keep, &j->published);
    j->committed_at = util_now_s();
  }
  if (rc != 0) {
    snprintf(j->err, sizeof j->err, "%s", ts_last_error());
    if (j->np == 1) ckpt_remove_dir(j->tmp); /* best effort: the previous checkpoint is untouched */
  }
  j->rc = rc;
  atomic_store(&s->done, 1);
  return NULL;
}

/* The calling thread (a saver's own thread, never the caller's) at the
 * saver's priority: nice 19 or SCHED_IDLE. Linux keeps both per thread and
 * threads inherit them: the writer lowers itself only after starting its
 * write threads (they keep the caller's priority; save_write.c). Best
 * effort: a refusal leaves the thread as it was. */
void saver_thread_priority(ts_ckpt_priority p) {
  if (p == TS_CKPT_PRIORITY_NORMAL) return;
  pid_t tid = (pid_t)syscall(SYS_gettid);
  if (p == TS_CKPT_PRIORITY_IDLE) {
    struct sched_param sp = {.sched_priority = 0};
    if (sched_setscheduler(tid, SCHED_IDLE, &sp) == 0) return;
  }
  (void)setpriority(PRIO_PROCESS, (id_t)tid, 19);
}

/* save_writer on the saver's own thread: the files stage lowers it to the
 * saver's priority once it has started its write threads (save_write.c). */
static void *save_writer_thread(void *arg) {
  ts_ckpt_saver *s = arg;
  s->job->own_thread = true;
  return save_writer(arg);
}

/* Several processes, every process's file written (the writer joined, rc
 * its verdict): the "files" barrier (every block file is on disk before
 * process 0 indexes them), and the commit lag: the last process's file
 * written -> found_at (CLOCK_MONOTONIC of each process: comparable on one
 * host; across hosts only as far as their clocks agree). 0 or -1 on every
 * process alike. Collective. */
static int finish_files(ts_ckpt_saver *s, int rc) {
  save_job *j = s->job;
  if (ckpt_agree(s->c, "files", rc) < 0) return -1;
  int64_t last = 0;
  if (ts_client_max(s->c, (int64_t)(1e9 * j->written_at), &last) < 0) return -1;
  j->lag_s = j->found_at - 1e-9 * (double)last;
  if (j->lag_s < 0) j->lag_s = 0;
  return 0;
}

/* Process 0's commit, on the commit thread (or inline). */
static void *save_committer(void *arg) {
  ts_ckpt_saver *s = arg;
  save_job *j = s->job;
  int rc = ckpt_commit(j->root, j->tmp, &j->meta, j->version, j->n, j->t, j->np, j->side, j->keep, &j->published);
  j->committed_at = util_now_s();
  if (rc != 0) snprintf(j->commit_err, sizeof j->commit_err, "%s", ts_last_error());
  j->commit_rc = rc;
  atomic_store(&s->cdone, 1);
  return NULL;
}

/* save_committer on a thread of its own. */
static void *save_committer_thread(void *arg) {
  ts_ckpt_saver *s = arg;
  saver_thread_priority(s->prio);
  return save_committer(arg);
}

/* Joins the writer: its verdict (the error set when it failed). */
static int join_writer(ts_ckpt_saver *s) {
  if (s->threaded) pthread_join(s->th, NULL);
  s->threaded = false;
  if (s->job->rc != 0) set_error("%s", s->job->err);
  return s->job->rc;
}

/* Completes the save in flight: the barriers and the commit of several
 * processes (whatever a poll has not done yet), the statistics; the job is
 * gone afterwards. 0 or -1 (on every process alike). */
static int saver_finish(ts_ckpt_saver *s) {
  save_job *j = s->job;
  double t0 = util_now_s();
  int rc = 0;
  bool files_ok = j->phase == PHASE_COMMIT; /* a poll agreed on the files and started the commit */
  if (j->phase == PHASE_FAILED) {
    rc = set_error("%s", j->err);
  } else if (!files_ok) {
    rc = join_writer(s);
    if (j->np > 1) {
      if (j->found_at == 0) j->found_at = t0;
      rc = finish_files(s, rc);
      files_ok = rc == 0;
      if (rc == 0 && j->rank == 0) { /* inline: the caller waits for this save anyway */
        save_committer(s);
        rc = j->commit_rc;
        if (rc != 0) set_error("%s", j->commit_err);
      }
    }
  } else if (j->rank == 0) {
    if (s->cthreaded) pthread_join(s->cth, NULL);
    s->cthreaded = false;
    rc = j->commit_rc;
    if (rc != 0) set_error("%s", j->commit_err);
  }
  if (j->np > 1) {
    /* Barrier: nobody goes on (and, say, loads or saves again) before the checkpoint is in place. */
    if (files_ok && ckpt_agree(s->c, "commit", rc) < 0) rc = -1;
    if (rc != 0 && j->rank == 0) {
      char err[1024];
      snprintf(err, sizeof err, "%s", ts_last_error());
      ckpt_remove_dir(j->tmp);
      set_error("%s", err);
    }
    j->commit_wait_s += util_now_s() - t0;
  }
  if (rc != 0 && j->background) { /* reported steps later: say which save */
    char err[1024];
    snprintf(err, sizeof err, "%s", ts_last_error());
    set_error("checkpoint of step %lld (saved in the background) failed: %s", (long long)j->meta.step, err);
  }
  if (rc == 0) {
    ts_ckpt_save_stats *st = &s->stats;
    st->step = j->meta.step;
    st->saves++;
    st->bytes = 8 + j->hlen + j->data_bytes;
    st->snapshot_s = j->snapshot_s;
    st->blocked_s = j->blocked_s;
    st->write_s = j->write_s;
    st->copy_s = j->copy_s;
    st->commit_lag_s = j->np > 1 ? j->lag_s : 0;
    st->commit_wait_s = j->np > 1 ? j->commit_wait_s : 0;
    double now = util_now_s(), pub = (double)j->published.tv_sec + 1e-9 * (double)j->published.tv_nsec;
    st->total_s = (j->rank == 0 ? pub : now) - j->t_start;
    st->prune_s = j->rank == 0 ? j->committed_at - pub : 0;
    ts_metrics_add("CkptCopyTime", TS_METRIC_TIME, (int64_t)(1e9 * st->copy_s));
    ts_metrics_add("CkptWriteTime", TS_METRIC_TIME, (int64_t)(1e9 * st->write_s));
    ts_metrics_add("CkptSaveTime", TS_METRIC_TIME, (int64_t)(1e9 * st->total_s));
    ts_metrics_add("CkptBytes", TS_METRIC_BYTES, (int64_t)st->bytes);
    if (j->np > 1) ts_metrics_add("CkptCommitWaitTime", TS_METRIC_TIME, (int64_t)(1e9 * st->commit_wait_s));
  }
  job_free(j);
  s->job = NULL;
  return rc;
}

/* A saver without a priority read (ts_ckpt_save: the caller's thread writes). */
static ts_ckpt_saver *saver_alloc(ts_client *c) {
  if (!c) {
    set_error("ts_ckpt_saver_new: NULL client");
    return NULL;
  }
  ts_ckpt_saver *s = calloc(1, sizeof *s);
  if (!s) {
    set_error("ts_ckpt_saver_new: out of memory");
    return NULL;
  }
  s->c = c;
  s->stats.step = -1;
  s->prio = TS_CKPT_PRIORITY_NORMAL;
  atomic_init(&s->done, 0);
  return s;
}

ts_ckpt_saver *ts_ckpt_saver_new(ts_client *c) {
  ts_ckpt_saver *s = saver_alloc(c);
  if (!s) return NULL;
  const char *pr = env_config()->ckpt_priority;
  if (!pr || strcmp(pr, "low") == 0) s->prio = TS_CKPT_PRIORITY_LOW;
  else if (strcmp(pr, "idle") == 0) s->prio = TS_CKPT_PRIORITY_IDLE;
  else if (strcmp(pr, "normal") == 0) s->prio = TS_CKPT_PRIORITY_NORMAL;
  else {
    set_error("TESSEL_CKPT_PRIORITY=%s: expected low, idle or normal", pr);
    free(s);
    return NULL;
  }
  return s;
}

int ts_ckpt_saver_set_priority(ts_ckpt_saver *s, ts_ckpt_priority p) {
  if (!s) return set_error("ts_ckpt_saver_set_priority: NULL saver");
  if (p != TS_CKPT_PRIORITY_LOW && p != TS_CKPT_PRIORITY_IDLE && p != TS_CKPT_PRIORITY_NORMAL)
    return set_error("ts_ckpt_saver_set_priority: %d is not a ts_ckpt_priority", (int)p);
  s->prio = p;
  return 0;
}

void ts_ckpt_saver_free(ts_ckpt_saver *s) {
  if (!s) return;
  if (s->job) saver_finish(s);
  if (s->snap) munmap(s->snap, s->snap_cap);
  free(s);
}

int ts_ckpt_saver_wait(ts_ckpt_saver *s) {
  if (!s) return set_error("ts_ckpt_saver_wait: NULL saver");
  return s->job ? saver_finish(s) : 0;
}

int ts_ckpt_saver_poll(ts_ckpt_saver *s) {
  if (!s) return set_error("ts_ckpt_saver_poll: NULL saver");
  if (!s->job) return 0;
  save_job *j = s->job;
  int64_t busy = !atomic_load(&s->done) || (j->phase == PHASE_COMMIT && s->cthreaded && !atomic_load(&s->cdone));
  /* Several processes: go on only when all are done (the barriers must not
   * wait for a slow disk inside a training step). */
  if (j->np > 1 && ts_client_max(s->c, busy, &busy) < 0) return -1;
  if (busy) return 1;
  if (j->np > 1 && j->phase == PHASE_FILES) {
    /* Every file is written: the "files" barrier now, then process 0
     * commits on a thread of its own (index.json, renames, fsyncs, pruning:
     * not inside a training step); a later poll completes the save. */
    double t0 = util_now_s();
    j->found_at = t0;
    if (finish_files(s, join_writer(s)) < 0) {
      snprintf(j->err, sizeof j->err, "%s", ts_last_error());
      j->phase = PHASE_FAILED;
      saver_finish(s);
      return -1;
    }
    j->phase = PHASE_COMMIT;
    if (j->rank == 0) {
      atomic_store(&s->cdone, 0);
      s->cthreaded = pthread_create(&s->cth, NULL, save_committer_thread, s) == 0;
      if (!s->cthreaded) save_committer(s);
    }
    j->commit_wait_s += util_now_s() - t0;
    return 1;
  }
  return saver_finish(s) < 0 ? -1 : 0;
}

int ts_ckpt_saver_stats(const ts_ckpt_saver *s, ts_ckpt_save_stats *out) {
  if (!s || !out) return set_error("ts_ckpt_saver_stats: NULL saver or output");
  *out = s->stats;
  return 0;
}

int64_t ts_ckpt_saver_pending_step(const ts_ckpt_saver *s) { return s && s->job ? s->job->meta.step : -1; }

/* A save: waits for the previous one, then prepare and snapshot (collective),
 * then the writer on the saver's thread (background) or inline. pre_rc < 0:
 * this process already failed (its error is set); it still takes part in
 * the barriers so that the others fail too instead of waiting. */
static int saver_start(ts_ckpt_saver *s, const char *root, const ts_ckpt_meta *meta, int n, const ts_ckpt_entry *t,
                       int keep, bool background, int pre_rc) {
  if (!s) return set_error("ts_ckpt_save: NULL saver");
  double t0 = util_now_s();
  ts_client *c = s->c;
  char err[1024];
  if (s->job) { /* at most one in flight: the previous save completes first */
    if (pre_rc < 0) snprintf(err, sizeof err, "%s", ts_last_error());
    if (saver_finish(s) < 0) return -1; /* its error: reported now, this save not started */
    if (pre_rc < 0) set_error("%s", err);
  }
  double blocked = util_now_s() - t0;
  int rc = pre_rc < 0 ? -1 : save_check_args(c, root, meta, n, t);
  save_job *j = calloc(1, sizeof *j);
  if (rc == 0 && !j) rc = set_error("checkpoint: out of memory");
  int rank = ts_client_process_index(c);
  if (rc == 0) {
    j->n = n, j->keep = keep, j->rank = rank, j->np = ts_client_process_count(c), j->background = background;
    j->version = ckpt_write_version;
    j->t_start = t0, j->blocked_s = blocked;
    j->meta = *meta;
    if (!j->meta.mesh[0]) save_mesh_text(n, t, j->meta.mesh, sizeof j->meta.mesh);
    j->meta.num_devices = ts_client_num_devices(c);
    j->meta.process_count = j->np;
    snprintf(j->meta.tessel_version, sizeof j->meta.tessel_version, "%s", TS_VERSION_STRING);
    snprintf(j->root, sizeof j->root, "%s", root);
    snprintf(j->tmp, sizeof j->tmp, "%s/.tmp-step-%08lld", root, (long long)j->meta.step);
    if (rank == 0 && j->np > 1) rc = save_prepare(j); /* alone: the writer does it, off the caller's wait */
  }
  /* Barrier: the temporary directory exists before anyone writes into it. */
  if (ckpt_agree(c, "prepare", rc) < 0) goto fail;
  rc = save_snapshot(s, j, t);
  /* Barrier: every process holds its blocks (or the save fails everywhere now). */
  if (ckpt_agree(c, "snapshot", rc) < 0) goto fail;
  j->snapshot_s = util_now_s() - t0;
  ts_metrics_add("CkptSnapshotTime", TS_METRIC_TIME, (int64_t)(1e9 * j->snapshot_s));
  if (blocked > 0) ts_metrics_add("CkptBlockedTime", TS_METRIC_TIME, (int64_t)(1e9 * blocked));
  s->job = j;
  atomic_store(&s->done, 0);
  s->threaded = background && pthread_create(&s->th, NULL, save_writer_thread, s) == 0;
  if (!s->threaded) { /* ts_ckpt_save, or no thread to be had: write now */
    save_writer(s);
    if (!background) return saver_finish(s);
  }
  return 0;
fail:
  if (j && rank == 0 && j->tmp[0]) {
    snprintf(err, sizeof err, "%s", ts_last_error());
    ckpt_remove_dir(j->tmp); /* best effort: the previous checkpoint is untouched */
    set_error("%s", err);
  }
  job_free(j);
  return -1;
}

int ts_ckpt_saver_save(ts_ckpt_saver *s, const char *root, const ts_ckpt_meta *meta, int n, const ts_ckpt_entry *t,
                       int keep) {
  return saver_start(s, root, meta, n, t, keep, true, 0);
}

/* The entries of p (NULL and the error set if a buffer cannot be had). */
static ts_ckpt_entry *save_entries(ts_client *c, ts_params *p, int *n) {
  *n = p ? ts_params_count(p) : 0;
  if (!p) {
    set_error("ts_ckpt_save_params: NULL parameter set");
    return NULL;
  }
  ts_ckpt_entry *t = calloc((size_t)*n + 1, sizeof *t);
  if (!t) {
    set_error("ts_ckpt_save_params: out of memory");
    return NULL;
  }
  for (int i = 0; i < *n; i++) {
    t[i].name = ts_params_name(p, i);
    t[i].kind = ts_ckpt_kind_of(t[i].name, ts_params_trainable(p, i));
    if (!(t[i].buf = ts_params_buffer(p, c, i))) {
      free(t);
      return NULL;
    }
  }
  return t;
}

int ts_ckpt_saver_save_params(ts_ckpt_saver *s, const char *root, ts_params *p, const ts_ckpt_meta *meta, int keep) {
  if (!s) return set_error("ts_ckpt_saver_save_params: NULL saver");
  int n = 0;
  ts_ckpt_entry *t = save_entries(s->c, p, &n);
  /* this process's failure alone: it still meets the others at their barriers */
  int rc = saver_start(s, root, meta, n, t, keep, true, t ? 0 : -1);
  free(t);
  return rc;
}

int ts_ckpt_save(ts_client *c, const char *root, const ts_ckpt_meta *meta, int n, const ts_ckpt_entry *t, int keep) {
  if (!c) return set_error("ts_ckpt_save: NULL client");
  ts_ckpt_saver *s = saver_alloc(c);
  if (!s) return ckpt_agree(c, "prepare", -1);
  int rc = saver_start(s, root, meta, n, t, keep, false, 0);
  ts_ckpt_saver_free(s);
  return rc;
}

int ts_ckpt_save_params(ts_client *c, const char *root, ts_params *p, const ts_ckpt_meta *meta, int keep) {
  if (!c) return set_error("ts_ckpt_save_params: NULL client");
  ts_ckpt_saver *s = saver_alloc(c);
  if (!s) return ckpt_agree(c, "prepare", -1);
  int n = 0;
  ts_ckpt_entry *t = save_entries(c, p, &n);
  int rc = saver_start(s, root, meta, n, t, keep, false, t ? 0 : -1);
  free(t);
  ts_ckpt_saver_free(s);
  return rc;
}
