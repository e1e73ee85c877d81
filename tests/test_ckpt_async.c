/* test_ckpt_async.c — the background saver (ts_ckpt_saver) and format 2:
 * a background save writes the same bytes as ts_ckpt_save; it saves the
 * snapshot taken when it started while the buffers go on changing (the
 * writer is parked by the testing hook, so the save is provably in flight);
 * the error of a background save is reported by the next poll, wait or save
 * and leaves the previous checkpoint in place; XXH64 matches the reference
 * values and a file's index hash is the XXH64 of its bytes; format-1
 * checkpoints (util_hash64) still load; a filesystem without O_DIRECT
 * (tmpfs) gets the buffered path; the saver's threads run at its priority
 * (TESSEL_CKPT_PRIORITY), the caller's never changes; the memory a step
 * computes a held buffer into is allocated once, with huge pages. */
#define _GNU_SOURCE /* SCHED_IDLE */
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h> /* getrusage */
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h" /* ckpt_test_hook, ckpt_write_version, ckpt_xxh64 */
#include "ckpt_common.h"
#include "runtime/rt.h"  /* rt_hold_allocs */
#include "util/config.h" /* env_config_reload */

static char tmp_root[256];

static ts_client *client_for(int devices) {
  return ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = devices});
}

/* A whole file, NUL-terminated (malloc'd; NULL if unreadable). */
static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  *n = buf ? fread(buf, 1, (size_t)len, f) : 0;
  if (buf) buf[*n] = 0; /* text files are read as strings too */
  fclose(f);
  return buf;
}

/* 0 if the two files have the same bytes. */
static int same_file(const char *a, const char *b) {
  size_t na = 0, nb = 0;
  char *x = slurp(a, &na), *y = slurp(b, &nb);
  int rc = x && y && na == nb && memcmp(x, y, na) == 0 ? 0 : -1;
  free(x);
  free(y);
  return rc;
}

/* Loads root into fresh buffers of layout l and checks they hold version v. */
static void check_load(const char *root, const ck_layout *l, uint64_t v, const char *what) {
  ts_client *c = client_for(ck_layout_devices(l));
  ts_buffer *b[CK_N] = {0};
  CHECK_OK(ck_make_buffers(c, l, 0, true, b));
  ts_ckpt *ck = ts_ckpt_open(root);
  CHECK(ck != NULL, "%s: open: %s", what, ts_last_error());
  for (int i = 0; ck && i < CK_N; i++) {
    CHECK(ts_ckpt_read(ck, c, CK_TENSORS[i].name, b[i]) == 0, "%s: read %s: %s", what, CK_TENSORS[i].name,
          ts_last_error());
    CHECK(ck_check_buffer(b[i], i, v) == 0, "%s: tensor %s is not version %llu", what, CK_TENSORS[i].name,
          (unsigned long long)v);
  }
  CHECK(ck && ts_ckpt_verify(ck) == 0, "%s: verify: %s", what, ts_last_error());
  ts_ckpt_close(ck);
  ck_free_buffers(b);
  ts_client_free(c);
}

static void test_xxh64(void) {
  static const struct {
    const char *s;
    uint64_t h;
  } v[] = {{"", 0xef46db3751d8e999ull},
           {"abc", 0x44bc2cf5ad770999ull},
           {"The quick brown fox jumps over the lazy dog", 0x0b242d361fda71bcull}};
  for (int k = 0; k < 3; k++)
    CHECK(ckpt_xxh64(v[k].s, strlen(v[k].s)) == v[k].h, "XXH64(\"%s\") = %016llx", v[k].s,
          (unsigned long long)ckpt_xxh64(v[k].s, strlen(v[k].s)));
  unsigned char buf[1030];
  for (int i = 0; i < 1030; i++) buf[i] = (unsigned char)(i < 1024 ? i % 256 : "tessel"[i - 1024]);
  CHECK(ckpt_xxh64(buf, 1030) == 0x45b620830f9a80edull, "XXH64 of 1030 bytes");
  /* streaming in uneven pieces = one shot */
  for (int step = 1; step < 70; step += 11) {
    ckpt_xxh64_state s;
    ckpt_xxh64_init(&s);
    for (int i = 0; i < 1030; i += step) ckpt_xxh64_update(&s, buf + i, (size_t)(1030 - i < step ? 1030 - i : step));
    CHECK(ckpt_xxh64_digest(&s) == 0x45b620830f9a80edull, "XXH64 streamed in pieces of %d", step);
  }
  /* two states over the same bytes in one pass (a block's and its file's
   * checksum, save_write.c): t is `phase` bytes ahead (another stripe phase);
   * each equals its own one-shot hash, whatever the pieces */
  for (int phase = 0; phase < 70; phase += 5)
    for (int step = 1; step < 400; step += 37) {
      ckpt_xxh64_state s, t;
      ckpt_xxh64_init(&s);
      ckpt_xxh64_init(&t);
      ckpt_xxh64_update(&t, buf, (size_t)phase);
      for (int i = phase; i < 1030; i += step)
        ckpt_xxh64_update2(&s, &t, buf + i, (size_t)(1030 - i < step ? 1030 - i : step));
      CHECK(ckpt_xxh64_digest(&t) == 0x45b620830f9a80edull && ckpt_xxh64_digest(&s) == ckpt_xxh64(buf + phase, (size_t)(1030 - phase)),
            "XXH64 of two states in one pass: phase %d, pieces of %d", phase, step);
    }
}

/* A background save of a sharded state writes exactly ts_ckpt_save's bytes. */
static void test_identical(void) {
  const ck_layout *l = &CK_LAYOUTS[2]; /* data=2,model=2 */
  ts_client *c = client_for(ck_layout_devices(l));
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(c, l, 1, false, b));
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(7);
  char ra[512], rb[512], pa[600], pb[600];
  snprintf(ra, sizeof ra, "%s/sync", tmp_root);
  snprintf(rb, sizeof rb, "%s/async", tmp_root);
  CHECK_OK(ts_ckpt_save(c, ra, &m, CK_N, e, 0));
  ts_ckpt_saver *s = ts_ckpt_saver_new(c);
  CHECK_OK(ts_ckpt_saver_save(s, rb, &m, CK_N, e, 0));
  CHECK_OK(ts_ckpt_saver_wait(s));
  const char *files[] = {"index.json", "shard-00000-of-00001.safetensors"};
  for (int k = 0; k < 2; k++) {
    snprintf(pa, sizeof pa, "%s/step-00000007/%s", ra, files[k]);
    snprintf(pb, sizeof pb, "%s/step-00000007/%s", rb, files[k]);
    CHECK(same_file(pa, pb) == 0, "%s differs between the synchronous and the background save", files[k]);
  }
  /* the file's hash in the index is XXH64 of its bytes (what xxhsum -H64 prints) */
  ts_ckpt *ck = ts_ckpt_open(rb);
  size_t n = 0;
  char *bytes = slurp(pb, &n);
  CHECK(ck && bytes && ck->version == 2 && ck->f[0].hash == ckpt_xxh64(bytes, n), "file hash is not XXH64 of the file");
  free(bytes);
  ts_ckpt_close(ck);
  check_load(rb, &CK_LAYOUTS[0], 1, "background save onto 1 device");
  ts_ckpt_saver_free(s);
  ck_free_buffers(b);
  ts_client_free(c);
}

/* The saver's priority: the writer thread runs at nice 19 (low, the
 * default), SCHED_IDLE (idle) or the caller's priority (normal); the caller's
 * thread is never changed; the bytes are the same at every priority;
 * TESSEL_CKPT_PRIORITY names the default and a bad value fails
 * ts_ckpt_saver_new, naming it. */
static int seen_nice, seen_policy;
static void priority_hook(const char *stage) {
  if (strcmp(stage, "chunk") == 0 && seen_nice == 99) { /* the copy (the write threads keep the caller's) */
    errno = 0;
    seen_nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid));
    seen_policy = sched_getscheduler(0);
  }
}

static void test_priority(void) {
  const ck_layout *l = &CK_LAYOUTS[1];
  ts_client *c = client_for(ck_layout_devices(l));
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(c, l, 3, false, b));
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(9);
  char ra[512], rb[512], pa[600], pb[600];
  snprintf(ra, sizeof ra, "%s/prio_sync", tmp_root);
  int caller_nice = getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)), caller_policy = sched_getscheduler(0);
  seen_nice = 99;
  ckpt_test_hook = priority_hook;
  CHECK_OK(ts_ckpt_save(c, ra, &m, CK_N, e, 0));
  CHECK(seen_nice == caller_nice, "ts_ckpt_save ran at nice %d, not the caller's %d", seen_nice, caller_nice);
  const ts_ckpt_priority pr[] = {TS_CKPT_PRIORITY_LOW, TS_CKPT_PRIORITY_IDLE, TS_CKPT_PRIORITY_NORMAL};
  for (int k = 0; k < 3; k++) {
    ts_ckpt_saver *s = ts_ckpt_saver_new(c);
    CHECK(s != NULL, "saver: %s", ts_last_error());
    if (!s) break;
    if (k > 0) CHECK_OK(ts_ckpt_saver_set_priority(s, pr[k])); /* k == 0: the default */
    snprintf(rb, sizeof rb, "%s/prio_%d", tmp_root, k);
    seen_nice = 99, seen_policy = -2;
    CHECK_OK(ts_ckpt_saver_save(s, rb, &m, CK_N, e, 0));
    CHECK_OK(ts_ckpt_saver_wait(s));
    if (pr[k] == TS_CKPT_PRIORITY_LOW) CHECK(seen_nice == 19, "low priority: the writer ran at nice %d", seen_nice);
    if (pr[k] == TS_CKPT_PRIORITY_IDLE)
      CHECK(seen_policy == SCHED_IDLE || seen_nice == 19, "idle priority: policy %d nice %d", seen_policy, seen_nice);
    if (pr[k] == TS_CKPT_PRIORITY_NORMAL)
      CHECK(seen_nice == caller_nice && seen_policy == caller_policy, "normal priority: nice %d policy %d", seen_nice,
            seen_policy);
    CHECK(getpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid)) == caller_nice && sched_getscheduler(0) == caller_policy,
          "the caller's priority changed");
    const char *files[] = {"index.json", "shard-00000-of-00001.safetensors"};
    for (int f = 0; f < 2; f++) {
      snprintf(pa, sizeof pa, "%s/step-00000009/%s", ra, files[f]);
      snprintf(pb, sizeof pb, "%s/step-00000009/%s", rb, files[f]);
      CHECK(same_file(pa, pb) == 0, "priority %d: %s differs from the synchronous save", k, files[f]);
    }
    CHECK(ts_ckpt_saver_set_priority(s, (ts_ckpt_priority)7) == -1, "priority 7 accepted");
    ts_ckpt_saver_free(s);
  }
  ckpt_test_hook = NULL;
  setenv("TESSEL_CKPT_PRIORITY", "lowest", 1);
  env_config_reload();
  ts_ckpt_saver *bad = ts_ckpt_saver_new(c);
  CHECK(bad == NULL && strstr(ts_last_error(), "TESSEL_CKPT_PRIORITY=lowest"), "TESSEL_CKPT_PRIORITY=lowest: %s",
        bad ? "accepted" : ts_last_error());
  ts_ckpt_saver_free(bad);
  snprintf(rb, sizeof rb, "%s/prio_badenv", tmp_root); /* ts_ckpt_save does not use it */
  CHECK(ts_ckpt_save(c, rb, &m, CK_N, e, 0) == 0, "ts_ckpt_save with TESSEL_CKPT_PRIORITY=lowest: %s", ts_last_error());
  setenv("TESSEL_CKPT_PRIORITY", "normal", 1);
  env_config_reload();
  ts_ckpt_saver *s = ts_ckpt_saver_new(c);
  seen_nice = 99;
  ckpt_test_hook = priority_hook;
  snprintf(rb, sizeof rb, "%s/prio_env", tmp_root);
  CHECK(s && ts_ckpt_saver_save(s, rb, &m, CK_N, e, 0) == 0 && ts_ckpt_saver_wait(s) == 0, "env normal: %s",
        ts_last_error());
  CHECK(seen_nice == caller_nice, "TESSEL_CKPT_PRIORITY=normal: the writer ran at nice %d", seen_nice);
  ckpt_test_hook = NULL;
  ts_ckpt_saver_free(s);
  unsetenv("TESSEL_CKPT_PRIORITY");
  env_config_reload();
  ck_free_buffers(b);
  ts_client_free(c);
}

/* A state big enough for the snapshot to be copied by several threads (and
 * for several 16 MiB write windows, the last one partial): same bytes both
 * ways, loads back. */
static void test_big(void) {
  ts_client *c = client_for(1);
  enum { NB = 5 };
  int64_t shape[NB] = {2100000, 3000001, 1500000, 17, 2500000}; /* 36 MB of f32, odd sizes */
  ts_buffer *b[NB];
  ts_ckpt_entry e[NB];
  char names[NB][16];
  float *v[NB];
  for (int i = 0; i < NB; i++) {
    v[i] = malloc((size_t)shape[i] * 4);
    for (int64_t k = 0; k < shape[i]; k++) v[i][k] = (float)(k % 1009) * 0.5f + (float)i;
    b[i] = ts_buffer_from_host(c, TS_F32, 1, &shape[i], v[i]);
    snprintf(names[i], sizeof names[i], "big%d", i);
    e[i] = (ts_ckpt_entry){names[i], b[i], TS_CKPT_PARAM};
  }
  ts_ckpt_meta m = ck_meta(9);
  char ra[512], rb[512], pa[600], pb[600];
  snprintf(ra, sizeof ra, "%s/big-sync", tmp_root);
  snprintf(rb, sizeof rb, "%s/big-async", tmp_root);
  CHECK_OK(ts_ckpt_save(c, ra, &m, NB, e, 0));
  ts_ckpt_saver *s = ts_ckpt_saver_new(c);
  CHECK_OK(ts_ckpt_saver_save(s, rb, &m, NB, e, 0));
  CHECK_OK(ts_ckpt_saver_wait(s));
  ts_ckpt_saver_free(s);
  snprintf(pa, sizeof pa, "%s/step-00000009/shard-00000-of-00001.safetensors", ra);
  snprintf(pb, sizeof pb, "%s/step-00000009/shard-00000-of-00001.safetensors", rb);
  CHECK(same_file(pa, pb) == 0, "big state: the background save's file differs");
  ts_ckpt *ck = ts_ckpt_open(rb);
  CHECK(ck && ts_ckpt_verify(ck) == 0, "big state: verify: %s", ts_last_error());
  for (int i = 0; ck && i < NB; i++) {
    float *got = malloc((size_t)shape[i] * 4);
    CHECK(ts_ckpt_read_host(ck, names[i], got, (size_t)shape[i] * 4) == 0 &&
              memcmp(got, v[i], (size_t)shape[i] * 4) == 0,
          "big state: %s differs", names[i]);
    free(got);
  }
  ts_ckpt_close(ck);
  for (int i = 0; i < NB; i++) ts_buffer_free(b[i]), free(v[i]);
  ts_client_free(c);
}

/* ts_params of 40 MB: saved by a saver, loaded by ts_ckpt_load_params with
 * several reading threads onto 2 devices (one tensor sharded). */
static void declare_big(ts_params *p, ts_graph *g, ts_init_kind init) {
  const char *names[] = {"a.weight", "b.weight", "c.weight", "a.weight.exp_avg", "d.bias"};
  int64_t shapes[][2] = {{1000, 2500}, {999, 3001}, {2000, 1000}, {1000, 2500}, {7, 3}};
  for (int i = 0; i < 5; i++)
    ts_params_use(p, g, names[i], TS_F32, 2, shapes[i], (ts_init){init, 1, 0}, i != 3);
}

static void test_params_big(void) {
  char root[512];
  snprintf(root, sizeof root, "%s/params-big", tmp_root);
  ts_client *c1 = client_for(1), *c2 = client_for(2);
  ts_params *p = ts_params_new(5), *q = ts_params_new(6);
  ts_graph *g = ts_graph_new(), *g2 = ts_graph_new();
  declare_big(p, g, TS_INIT_UNIFORM);
  declare_big(q, g2, TS_INIT_ZEROS);
  ts_ckpt_meta meta = ck_meta(4);
  ts_ckpt_saver *s = ts_ckpt_saver_new(c1);
  CHECK_OK(ts_ckpt_saver_save_params(s, root, p, &meta, 0));
  CHECK_OK(ts_ckpt_saver_wait(s));
  ts_ckpt_saver_free(s);
  ts_mesh *mesh = ts_mesh_from_text("fsdp=2");
  ts_partition_spec ps;
  ts_partition_spec_parse(mesh, "fsdp,None", &ps);
  ts_sharding *sh = ts_sharding_new(mesh, &ps, 2);
  CHECK_OK(ts_buffer_reshard(ts_params_buffer(q, c2, ts_params_find(q, "b.weight")), sh));
  ts_ckpt *ck = ts_ckpt_open(root);
  CHECK(ck && ts_ckpt_load_params(ck, c2, q, false) == 0, "load params: %s", ts_last_error());
  ts_ckpt_close(ck);
  CHECK_OK(ts_params_sync_host(p));
  CHECK_OK(ts_params_sync_host(q));
  for (int i = 0; i < ts_params_count(p); i++) {
    int k = ts_params_find(q, ts_params_name(p, i));
    size_t bytes = (size_t)ts_params_numel(p, i) * 4;
    CHECK(k >= 0 && memcmp(ts_params_host(p, i), ts_params_host(q, k), bytes) == 0, "param %s after load",
          ts_params_name(p, i));
  }
  ts_sharding_free(sh);
  ts_mesh_free(mesh);
  ts_params_free(p);
  ts_params_free(q);
  ts_graph_free(g);
  ts_graph_free(g2);
  ts_client_free(c1);
  ts_client_free(c2);
}

/* The writer parks at stage "files" until released: the save is in flight. */
static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;
static int parked, released;
static const char *park_stage = "files";

static void park_hook(const char *stage) {
  if (strcmp(stage, park_stage) != 0) return;
  pthread_mutex_lock(&park_mu);
  parked = 1;
  pthread_cond_broadcast(&park_cv);
  while (!released) pthread_cond_wait(&park_cv, &park_mu);
  pthread_mutex_unlock(&park_mu);
}

/* Training goes on during a save; the checkpoint holds the snapshot. */
static void test_continues(void) {
  const ck_layout *l = &CK_LAYOUTS[1]; /* data=2 */
  ts_client *c = client_for(ck_layout_devices(l));
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(c, l, 1, false, b));
  ck_entries(b, e);
  char root[512];
  snprintf(root, sizeof root, "%s/continues", tmp_root);
  ts_ckpt_saver *s = ts_ckpt_saver_new(c);
  ts_ckpt_meta m = ck_meta(5);
  parked = released = 0;
  ckpt_test_hook = park_hook;
  CHECK_OK(ts_ckpt_saver_save(s, root, &m, CK_N, e, 0));
  pthread_mutex_lock(&park_mu);
  while (!parked) pthread_cond_wait(&park_cv, &park_mu);
  pthread_mutex_unlock(&park_mu);
  CHECK(ts_ckpt_saver_poll(s) == 1, "the save is not in flight");
  CHECK(ts_ckpt_saver_pending_step(s) == 5, "pending step %lld", (long long)ts_ckpt_saver_pending_step(s));
  /* the next "steps": every buffer gets new values while the file is written */
  for (int i = 0; i < CK_N; i++) {
    void *v2 = ck_values(i, 2);
    CHECK_OK(ts_buffer_write(b[i], v2, ck_bytes(i)));
    free(v2);
  }
  pthread_mutex_lock(&park_mu);
  released = 1;
  pthread_cond_broadcast(&park_cv);
  pthread_mutex_unlock(&park_mu);
  CHECK_OK(ts_ckpt_saver_wait(s));
  ckpt_test_hook = NULL;
  ts_ckpt_save_stats st;
  CHECK_OK(ts_ckpt_saver_stats(s, &st));
  CHECK(st.step == 5 && st.saves == 1 && st.bytes > 0 && st.snapshot_s <= st.total_s && st.write_s > 0,
        "stats: step %lld saves %d bytes %llu snapshot %g total %g", (long long)st.step, st.saves,
        (unsigned long long)st.bytes, st.snapshot_s, st.total_s);
  check_load(root, &CK_LAYOUTS[2], 1, "the snapshot, not the later values");
  /* the next save, of the new values, after the first is complete */
  m.step = 6;
  CHECK_OK(ts_ckpt_saver_save(s, root, &m, CK_N, e, 1));
  CHECK_OK(ts_ckpt_saver_wait(s));
  check_load(root, &CK_LAYOUTS[0], 2, "the second save");
  ts_ckpt_saver_free(s);
  ck_free_buffers(b);
  ts_client_free(c);
}

/* Polls until the save in flight is over; its result. */
static int poll_done(ts_ckpt_saver *s) {
  int r;
  while ((r = ts_ckpt_saver_poll(s)) == 1) usleep(1000);
  return r;
}

/* A failed background save: reported (poll, wait or the next save), the
 * previous checkpoint and `latest` untouched, the saver usable after. */
/* The f32 tensors of CK_TENSORS, updated by a "step" in place: x <- 2x + 1
 * (outputs aliased to their inputs, as a training step's parameters). */
static const int STEP_T[] = {0, 1, 2, 7};
#define STEP_N 4

static ts_executable *step_exe(ts_client *c, const ck_layout *l) {
  ts_mesh *m = ts_mesh_from_text(l->mesh);
  ts_graph *g = ts_graph_new();
  for (int k = 0; k < STEP_N; k++) {
    const ck_spec *sp = &CK_TENSORS[STEP_T[k]];
    ts_tensor x = ts_input(g, sp->name, TS_F32, sp->rank, sp->shape);
    ts_sharding *sh = ck_sharding(l, m, STEP_T[k]);
    if (sh) ts_mark_sharding(g, x, sh);
    ts_sharding_free(sh);
    ts_tensor two = ts_broadcast_to(g, ts_scalar(g, TS_F32, 2), sp->rank, sp->shape);
    ts_tensor one = ts_broadcast_to(g, ts_scalar(g, TS_F32, 1), sp->rank, sp->shape);
    ts_graph_alias_output(g, ts_graph_add_output(g, ts_add(g, ts_mul(g, x, two), one)), x);
  }
  ts_compile_options o = {.mesh = m};
  ts_executable *e = ts_compile(c, g, &o);
  CHECK(e != NULL, "compile the step: %s", ts_last_error());
  ts_graph_free(g);
  ts_mesh_free(m);
  return e;
}

static void step_run(ts_executable *e, ts_buffer **b) {
  ts_buffer *in[STEP_N], *out[STEP_N] = {0};
  for (int k = 0; k < STEP_N; k++) in[k] = b[STEP_T[k]];
  CHECK(ts_execute(e, in, out) == 0, "step: %s", ts_last_error());
  for (int k = 0; k < STEP_N; k++) CHECK(out[k] == in[k], "step: output %d is not its input buffer", k);
}

/* want[i]: tensor i's expected bytes after `steps` steps from version 1 (malloc'd). */
static void step_expect(int steps, void **want) {
  for (int i = 0; i < CK_N; i++) {
    want[i] = ck_values(i, 1);
    bool upd = false;
    for (int k = 0; k < STEP_N; k++) upd = upd || STEP_T[k] == i;
    for (size_t q = 0; upd && q < ck_bytes(i) / 4; q++)
      for (int s = 0; s < steps; s++) ((float *)want[i])[q] = ((float *)want[i])[q] * 2.0f + 1.0f;
  }
}

/* The checkpoint at root holds want[i] for every tensor (loaded on layout l). */
static void check_ckpt_values(const char *root, const ck_layout *l, void **want, const char *what) {
  ts_client *c = client_for(ck_layout_devices(l));
  ts_buffer *b[CK_N] = {0};
  CHECK_OK(ck_make_buffers(c, l, 0, true, b));
  ts_ckpt *ck = ts_ckpt_open(root);
  CHECK(ck != NULL, "%s: open: %s", what, ts_last_error());
  for (int i = 0; ck && i < CK_N; i++) {
    void *got = malloc(ck_bytes(i) + 1);
    CHECK(ts_ckpt_read(ck, c, CK_TENSORS[i].name, b[i]) == 0 && ts_buffer_read(b[i], got, ck_bytes(i)) == 0 &&
              memcmp(got, want[i], ck_bytes(i)) == 0,
          "%s: tensor %s differs", what, CK_TENSORS[i].name);
    free(got);
  }
  ts_ckpt_close(ck);
  ck_free_buffers(b);
  ts_client_free(c);
}

static void park_until(const char *stage) {
  parked = released = 0;
  park_stage = stage;
  ckpt_test_hook = park_hook;
  (void)stage;
}
static void park_wait(void) {
  pthread_mutex_lock(&park_mu);
  while (!parked) pthread_cond_wait(&park_cv, &park_mu);
  pthread_mutex_unlock(&park_mu);
}
static void park_release(void) {
  pthread_mutex_lock(&park_mu);
  released = 1;
  pthread_cond_broadcast(&park_cv);
  pthread_mutex_unlock(&park_mu);
}

/* ts_ckpt_saver_save copies nothing: it holds the buffers (ts_buffer_hold)
 * and its writer copies them. Steps that run before the copy (the writer is
 * parked at "copy") update the held parameters in place: they compute into
 * other memory instead, and the checkpoint holds the values of the save's
 * step; a buffer freed meanwhile is still saved. The second save reuses the
 * memory the first one left (the spare). Padded blocks (data=2, uneven). */
static void test_steps_during_copy(void) {
  const ck_layout *l = &CK_LAYOUTS[1]; /* data=2 */
  ts_client *c = client_for(ck_layout_devices(l));
  ts_executable *e = step_exe(c, l);
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry en[CK_N];
  CHECK_OK(ck_make_buffers(c, l, 1, false, b));
  ck_entries(b, en);
  char root[512];
  snprintf(root, sizeof root, "%s/during_copy", tmp_root);
  ts_ckpt_saver *s = ts_ckpt_saver_new(c);
  void *want[CK_N];
  for (int round = 0; round < 2 && e; round++) {
    ts_ckpt_meta m = ck_meta(10 + round);
    park_until("copy");
    CHECK_OK(ts_ckpt_saver_save(s, root, &m, CK_N, en, 0));
    park_wait();
    step_run(e, b); /* out of place: the held memory stays */
    step_run(e, b); /* in place, on the new memory */
    ts_buffer_free(b[4]); /* freed while held: saved all the same */
    b[4] = NULL;
    park_release();
    CHECK_OK(ts_ckpt_saver_wait(s));
    ckpt_test_hook = NULL;
    step_expect(2 * round, want);
    check_ckpt_values(root, &CK_LAYOUTS[2], want, round ? "second save (the spare reused)" : "first save");
    for (int i = 0; i < CK_N; i++) free(want[i]);
    step_expect(2 * round + 2, want);
    for (int i = 0; i < CK_N; i++) {
      if (i == 4) continue;
      void *got = malloc(ck_bytes(i) + 1);
      CHECK(ts_buffer_read(b[i], got, ck_bytes(i)) == 0 && memcmp(got, want[i], ck_bytes(i)) == 0,
            "round %d: buffer %s after the steps", round, CK_TENSORS[i].name);
      free(got);
    }
    for (int i = 0; i < CK_N; i++) free(want[i]);
    ts_buffer *nb[CK_N] = {0}; /* "table" again, version 1 */
    CHECK_OK(ck_make_buffers(c, l, 1, false, nb));
    b[4] = nb[4], nb[4] = NULL;
    ck_free_buffers(nb);
    ck_entries(b, en);
  }
  /* a write to a held buffer waits for the copy; a step after the save ran in place */
  ts_ckpt_meta m = ck_meta(20);
  CHECK_OK(ts_ckpt_saver_save(s, root, &m, CK_N, en, 0));
  void *v3 = ck_values(0, 3);
  CHECK_OK(ts_buffer_write(b[0], v3, ck_bytes(0)));
  CHECK_OK(ts_ckpt_saver_wait(s));
  CHECK(ck_check_buffer(b[0], 0, 3) == 0, "the write after the save");
  free(v3);
  ts_ckpt_saver_free(s);
  ts_executable_free(e);
  ck_free_buffers(b);
  ts_client_free(c);
}

/* The process's minor page faults so far. */
static long minor_faults(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_minflt : 0;
}

/* Whether transparent huge pages can be had with MADV_HUGEPAGE. */
static bool thp_madvise(void) {
  size_t n = 0;
  char *s = slurp("/sys/kernel/mm/transparent_hugepage/enabled", &n);
  bool ok = s && (strstr(s, "[madvise]") || strstr(s, "[always]"));
  free(s);
  return ok;
}

/* Under AddressSanitizer the step also reads the shadow of the 64 MiB it
 * reads and writes (1/8 of each, 4 KiB pages: 2 x 2048 faults); without huge
 * pages the step takes 16384 faults more than that. */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_SHADOW_FAULTS 4096
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN_SHADOW_FAULTS 4096
#endif
#endif
#ifndef ASAN_SHADOW_FAULTS
#define ASAN_SHADOW_FAULTS 0
#endif

/* Huge pages the kernel could not give (/proc/vmstat thp_fault_fallback: it
 * fell back to 4 KiB pages, a fragmented host); 0 where it does not say. */
static long thp_fallbacks(void) {
  size_t n = 0;
  char *s = slurp("/proc/vmstat", &n), *p = s ? strstr(s, "\nthp_fault_fallback ") : NULL;
  long v = p ? strtol(p + 20, NULL, 10) : 0;
  free(s);
  return v;
}

/* A step updating a held 64 MiB buffer computes into new memory: allocated
 * by the first save's step only (the spare is reused by the second), and
 * faulted in as huge pages (about 32 faults, not 16384 of 4 KiB). */
static void test_spare_memory(void) {
  ts_client *c = client_for(1);
  int64_t n = 16 << 20;
  ts_graph *g = ts_graph_new();
  ts_tensor x = ts_input(g, "x", TS_F32, 1, &n);
  ts_graph_alias_output(g, ts_graph_add_output(g, ts_add(g, x, ts_broadcast_to(g, ts_scalar(g, TS_F32, 1), 1, &n))), x);
  ts_executable *e = ts_compile(c, g, NULL);
  CHECK(e != NULL, "compile: %s", ts_last_error());
  float *v = calloc((size_t)n, sizeof *v);
  ts_buffer *b = v ? ts_buffer_from_host(c, TS_F32, 1, &n, v) : NULL; /* written: its pages exist */
  free(v);
  CHECK(b != NULL, "buffer: %s", ts_last_error());
  for (int round = 0; round < 2 && e && b; round++) {
    ts_buffer_hold *h = ts_buffer_hold_new(b);
    CHECK(h != NULL, "hold: %s", ts_last_error());
    long a0 = rt_hold_allocs, f0 = minor_faults(), fb0 = thp_fallbacks();
    ts_buffer *in[1] = {b}, *out[1] = {NULL};
    CHECK(ts_execute(e, in, out) == 0 && out[0] == b, "step beside the hold: %s", ts_last_error());
    long allocs = rt_hold_allocs - a0, faults = minor_faults() - f0, fallbacks = thp_fallbacks() - fb0;
    ts_buffer_hold_release(h);
    CHECK(allocs == (round == 0), "round %d: %ld allocations for the held buffer's new values (want %d)", round,
          allocs, round == 0);
    printf("  round %d: %ld minor faults in the step beside the hold\n", round, faults);
    if (round == 0 && thp_madvise() && fallbacks > 0)
      printf("  the kernel had no huge pages to give (thp_fault_fallback +%ld): fault count not checked\n", fallbacks);
    else if (round == 0 && thp_madvise())
      CHECK(faults < 4096 + ASAN_SHADOW_FAULTS, "the first step beside a hold took %ld page faults for 64 MiB: no huge pages",
            faults);
    if (round == 1) CHECK(faults < 256, "the step with the spare took %ld page faults", faults);
  }
  ts_buffer_free(b);
  ts_executable_free(e);
  ts_graph_free(g);
  ts_client_free(c);
}

/* A CPU device block of 2 MiB or more starts on a huge-page boundary and is
 * marked for huge pages (cpu_device.c): a 6 MiB buffer (three whole huge
 * pages) is 2 MiB-aligned and, written, takes a few faults, not 1536 of
 * 4 KiB (the original copy of a held buffer then misses the TLB as little as
 * its spare, hold.c; bench_ckpt_io --hold-ab). */
static void test_device_huge(void) {
  ts_client *c = client_for(1);
  int64_t n = 3 << 19; /* floats: 6 MiB */
  float *v = malloc((size_t)n * sizeof *v);
  CHECK(v != NULL, "out of memory");
  if (!v) return;
  for (int64_t i = 0; i < n; i++) v[i] = (float)i; /* the source's pages exist before the count */
  long f0 = minor_faults(), fb0 = thp_fallbacks();
  ts_buffer *b = ts_buffer_from_host(c, TS_F32, 1, &n, v);
  long faults = minor_faults() - f0, fallbacks = thp_fallbacks() - fb0;
  CHECK(b != NULL, "buffer: %s", ts_last_error());
  if (b) {
    uintptr_t a = (uintptr_t)b->shards[0];
    CHECK(a % (2u << 20) == 0, "a 6 MiB device block at %#lx: not on a 2 MiB boundary", (unsigned long)a);
    float got[2] = {0};
    CHECK(ts_buffer_read(b, v, (size_t)n * sizeof *v) == 0 && (got[0] = v[0], got[1] = v[n - 1], 1) &&
              got[0] == 0.f && got[1] == (float)(n - 1),
          "the block's values: %g %g", got[0], got[1]);
    printf("  a 6 MiB buffer: %ld minor faults\n", faults);
    if (ASAN_SHADOW_FAULTS)
      printf("  under AddressSanitizer its allocator places the block (968 faults seen): fault count checked in the plain build\n");
    else if (thp_madvise() && fallbacks > 0)
      printf("  the kernel had no huge pages to give (thp_fault_fallback +%ld): fault count not checked\n", fallbacks);
    else if (thp_madvise())
      CHECK(faults < 512, "writing a 6 MiB device block took %ld page faults: no huge pages", faults);
  }
  ts_buffer_free(b);
  free(v);
  ts_client_free(c);
}

static void test_errors(void) {
  ts_client *c = client_for(1);
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(c, &CK_LAYOUTS[0], 1, false, b));
  ck_entries(b, e);
  char file[512], bad[600], good[512], junk[700];
  snprintf(file, sizeof file, "%s/a-file", tmp_root);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  snprintf(bad, sizeof bad, "%s/ckpt", file); /* inside a regular file: cannot be created */
  snprintf(good, sizeof good, "%s/errors", tmp_root);
  ts_ckpt_saver *s = ts_ckpt_saver_new(c);
  ts_ckpt_meta m = ck_meta(1);
  /* reported by poll */
  int rc = ts_ckpt_saver_save(s, bad, &m, CK_N, e, 0);
  if (rc == 0) rc = poll_done(s);
  CHECK(rc == -1 && strstr(ts_last_error(), "a-file"), "poll: %d %s", rc, ts_last_error());
  CHECK(ts_ckpt_saver_poll(s) == 0, "the failed save is still pending");
  /* reported by the next save, which does not start */
  CHECK_OK(ts_ckpt_saver_save(s, bad, &m, CK_N, e, 0));
  CHECK(ts_ckpt_saver_save(s, good, &m, CK_N, e, 0) == -1 && strstr(ts_last_error(), "a-file"), "next save: %s",
        ts_last_error());
  CHECK(ts_ckpt_saver_poll(s) == 0, "a save started after the error");
  /* reported by wait */
  CHECK_OK(ts_ckpt_saver_save(s, bad, &m, CK_N, e, 0));
  CHECK(ts_ckpt_saver_wait(s) == -1 && strstr(ts_last_error(), "a-file"), "wait: %s", ts_last_error());
  /* usable afterwards; a failure in a root with a checkpoint leaves it as it was */
  CHECK_OK(ts_ckpt_saver_save(s, good, &m, CK_N, e, 0));
  CHECK_OK(ts_ckpt_saver_wait(s));
  snprintf(junk, sizeof junk, "%s/.tmp-step-00000099", good); /* debris the prepare cannot remove: */
  mkdir(junk, 0755);
  snprintf(junk, sizeof junk, "%s/.tmp-step-00000099/sub", good); /* a directory inside */
  CHECK(mkdir(junk, 0755) == 0, "mkdir %s: %s", junk, strerror(errno));
  m.step = 2;
  rc = ts_ckpt_saver_save(s, good, &m, CK_N, e, 0);
  if (rc == 0) rc = poll_done(s);
  CHECK(rc == -1 && strstr(ts_last_error(), ".tmp-step-00000099"), "debris: %d %s", rc, ts_last_error());
  char latest[600];
  snprintf(latest, sizeof latest, "%s/latest", good);
  size_t n = 0;
  char *line = slurp(latest, &n);
  CHECK(line && n == 14 && memcmp(line, "step-00000001\n", 14) == 0, "latest changed after a failed save");
  free(line);
  check_load(good, &CK_LAYOUTS[0], 1, "the checkpoint before the failed save");
  rmdir(junk);
  ts_ckpt_saver_free(s);
  ck_free_buffers(b);
  ts_client_free(c);
}

/* Format 1 (util_hash64 checksums) still loads; tmpfs (no O_DIRECT) saves. */
static void test_formats(void) {
  ts_client *c = client_for(2);
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  const ck_layout *l = &CK_LAYOUTS[1];
  CHECK_OK(ck_make_buffers(c, l, 3, false, b));
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(3);
  char root[512], p[600];
  snprintf(root, sizeof root, "%s/v1", tmp_root);
  ckpt_write_version = 1;
  CHECK_OK(ts_ckpt_save(c, root, &m, CK_N, e, 0));
  ckpt_write_version = CKPT_FORMAT_VERSION;
  snprintf(p, sizeof p, "%s/step-00000003/index.json", root);
  size_t n = 0;
  char *idx = slurp(p, &n);
  CHECK(idx && strstr(idx, "\"format_version\": 1") && !strstr(idx, "xxh64"), "not a format-1 index");
  free(idx);
  check_load(root, &CK_LAYOUTS[3], 3, "format 1");
  struct stat st;
  if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(root, sizeof root, "/dev/shm/tessel_test_ckpt_async_%d", (int)getpid());
    CHECK_OK(ts_ckpt_save(c, root, &m, CK_N, e, 0));
    check_load(root, &CK_LAYOUTS[0], 3, "tmpfs (buffered writes)");
    snprintf(p, sizeof p, "rm -rf %s", root);
    if (system(p) != 0) fprintf(stderr, "could not remove %s\n", root);
  }
  ck_free_buffers(b);
  ts_client_free(c);
}

int main(void) {
  ts_test_init("test_ckpt_async", 1);
  snprintf(tmp_root, sizeof tmp_root, "/tmp/tessel_test_ckpt_async_%d", (int)getpid());
  mkdir(tmp_root, 0755);
  test_xxh64();
  test_identical();
  test_priority();
  test_big();
  test_params_big();
  test_continues();
  test_steps_during_copy();
  test_spare_memory();
  test_device_huge();
  test_errors();
  test_formats();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
  if (ts_test_failed == 0 && !getenv("TESSEL_TEST_KEEP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_root);
  return ts_test_finish();
}
