/* mpi_ckpt.c — checkpoints across processes (mpirun -n 2 and -n 3, 4 devices
 * shared out 2+2 or 2+1+1): every process writes only its own blocks (one
 * file per process), process 0 the index; a checkpoint saved on one mesh
 * loads onto another mesh of the same job, onto a single process with
 * another device count (3), and a checkpoint saved by one process loads
 * onto the whole job. Values are compared bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h" /* ckpt_test_hook */
#include "ckpt_common.h"

/* 4-device layouts: the data=2,model=2 one from ckpt_common.h plus these. */
static const ck_layout L_DATA4 = {
    "data=4", "data=4", {"data,None", "data", "None,data", "data,None,None,None", "data,None,None", "data,None", "data", ""}};
static const ck_layout L_REPL4 = {"replicated on 4", "data=4", {0}};

static ts_client *world;
static char fail_dir[700]; /* the commit's temporary directory the hook removes */

/* Process 0's commit (on the saver's commit thread) fails: its temporary
 * directory vanishes after index.json is written, so the rename fails. */
static void fail_commit_hook(const char *stage) {
  if (strcmp(stage, "index") != 0 || !fail_dir[0]) return;
  char cmd[800];
  snprintf(cmd, sizeof cmd, "rm -rf %s", fail_dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", fail_dir);
}
static int rank, nproc;

/* Loads root into layout l on client c and compares every tensor with version v. */
static void check_load(ts_client *c, const char *root, const ck_layout *l, uint64_t v, const char *what) {
  ts_buffer *b[CK_N] = {0};
  CHECK_OK(ck_make_buffers(c, l, 0, true, b));
  ts_ckpt *ck = ts_ckpt_open(root);
  CHECK(ck != NULL, "%s: open: %s", what, ts_last_error());
  for (int i = 0; ck && i < CK_N; i++) {
    CHECK(ts_ckpt_read(ck, c, CK_TENSORS[i].name, b[i]) == 0, "%s: read %s: %s", what, CK_TENSORS[i].name,
          ts_last_error());
    /* ts_buffer_read is collective when blocks live in other processes: every process reads every tensor */
    CHECK(ck_check_buffer(b[i], i, v) == 0, "%s: %s differs (rank %d)", what, CK_TENSORS[i].name, rank);
  }
  ts_ckpt_close(ck);
  ck_free_buffers(b);
}

static void save_layout(ts_client *c, const char *root, const ck_layout *l, uint64_t v, int64_t step) {
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(c, l, v, false, b));
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(step);
  CHECK(ts_ckpt_save(c, root, &m, CK_N, e, 0) == 0, "save %s (rank %d): %s", l->label, rank, ts_last_error());
  ck_free_buffers(b);
}

int main(void) {
  ts_test_init("mpi_ckpt", 1);
  world = ts_client_new(&(ts_client_options){.num_threads = 1, .total_devices = 4, .collective_timeout_ms = 60000});
  if (!world) {
    fprintf(stderr, "client: %s\n", ts_last_error());
    return 1;
  }
  rank = ts_client_process_index(world);
  nproc = ts_client_process_count(world);
  /* One directory for the job: the ranks of one mpirun share its process as parent. */
  char root[256], p[300];
  snprintf(root, sizeof root, "/tmp/tessel_mpi_ckpt_%d_np%d", (int)getppid(), nproc);
  CHECK(ts_client_check_same(world, "the checkpoint root", root) == 0, "ranks disagree on the root: %s", ts_last_error());

  const ck_layout *layouts[3] = {&CK_LAYOUTS[2], &L_DATA4, &L_REPL4};
  ts_client *local3 = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 3, .process_local = true});
  for (int a = 0; a < 3; a++) {
    snprintf(p, sizeof p, "%s/from-%d", root, a);
    save_layout(world, p, layouts[a], (uint64_t)(a + 1), 10 + a);
    ts_ckpt *ck = ts_ckpt_open(p);
    CHECK(ck && ts_ckpt_get_meta(ck)->process_count == nproc && ts_ckpt_get_meta(ck)->step == 10 + a,
          "meta of a %d-process save", nproc);
    /* one block file per process that holds a distinct block (replicated: process 0 only writes data) */
    CHECK(ck && ts_ckpt_num_files(ck) == nproc, "files %d, processes %d", ck ? ts_ckpt_num_files(ck) : -1, nproc);
    CHECK(ck && ts_ckpt_verify(ck) == 0, "verify: %s", ts_last_error());
    ts_ckpt_close(ck);
    for (int b = 0; b < 3; b++) {
      char what[128];
      snprintf(what, sizeof what, "%s -> %s (np %d)", layouts[a]->label, layouts[b]->label, nproc);
      check_load(world, p, layouts[b], (uint64_t)(a + 1), what);
    }
    /* onto one process with 3 devices (model=3): no collective involved */
    check_load(local3, p, &CK_LAYOUTS[4], (uint64_t)(a + 1), "onto one process, model=3");
  }
  /* A checkpoint saved by process 0 alone (a process-local client, fsdp=2) loads onto the job. */
  snprintf(p, sizeof p, "%s/single", root);
  if (rank == 0) {
    ts_client *l2 = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 2, .process_local = true});
    save_layout(l2, p, &CK_LAYOUTS[3], 9, 5);
    ts_client_free(l2);
  }
  /* Barrier: the others wait until process 0's save is complete. */
  CHECK(ts_client_check_same(world, "single-process save done", "done") == 0, "barrier: %s", ts_last_error());
  for (int b = 0; b < 3; b++) check_load(world, p, layouts[b], 9, "single-process save onto the job");

  /* The background saver across processes: polled (collective) until every
   * process's file is written and process 0 committed; the buffers change
   * meanwhile; the checkpoint holds the snapshot. */
  {
    ts_buffer *b[CK_N] = {0};
    ts_ckpt_entry e[CK_N];
    CHECK(ck_make_buffers(world, &CK_LAYOUTS[2], 4, false, b) == 0, "buffers: %s", ts_last_error());
    ck_entries(b, e);
    ts_ckpt_meta m = ck_meta(20);
    ts_ckpt_saver *s = ts_ckpt_saver_new(world);
    snprintf(p, sizeof p, "%s/async", root);
    CHECK(ts_ckpt_saver_save(s, p, &m, CK_N, e, 0) == 0, "background save (rank %d): %s", rank, ts_last_error());
    for (int i = 0; i < CK_N; i++) { /* the next steps */
      void *v = ck_values(i, 5);
      CHECK(ts_buffer_write(b[i], v, ck_bytes(i)) == 0, "write: %s", ts_last_error());
      free(v);
    }
    int r;
    while ((r = ts_ckpt_saver_poll(s)) == 1) usleep(1000);
    CHECK(r == 0, "poll (rank %d): %s", rank, ts_last_error());
    ts_ckpt_saver_free(s);
    for (int k = 0; k < 3; k++) check_load(world, p, layouts[k], 4, "background save: the snapshot");
    /* a commit that fails on process 0 (on its commit thread): every
     * process's poll returns -1; `latest` still names step 20 */
    ts_ckpt_meta m2 = ck_meta(21);
    s = ts_ckpt_saver_new(world);
    snprintf(fail_dir, sizeof fail_dir, "%s/.tmp-step-00000021", p);
    if (rank == 0) ckpt_test_hook = fail_commit_hook;
    CHECK(ts_ckpt_saver_save(s, p, &m2, CK_N, e, 0) == 0, "background save 21 (rank %d): %s", rank, ts_last_error());
    while ((r = ts_ckpt_saver_poll(s)) == 1) usleep(1000);
    CHECK(r == -1 && strstr(ts_last_error(), "step 21") &&
              (rank == 0 || strstr(ts_last_error(), "another process")),
          "a failed commit (rank %d): poll %d: %s", rank, r, ts_last_error());
    ckpt_test_hook = NULL;
    ts_ckpt_saver_free(s);
    for (int k = 0; k < 3; k++) check_load(world, p, layouts[k], 4, "after the failed commit: step 20");
    ck_free_buffers(b);
  }

  ts_client_free(local3);
  CHECK(ts_client_check_same(world, "all loaded", "done") == 0, "barrier: %s", ts_last_error());
  if (rank == 0 && ts_test_failed == 0) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", root);
  }
  ts_client_free(world);
  return ts_test_finish();
}
