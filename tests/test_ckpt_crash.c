/* test_ckpt_crash.c — a crash at any stage of a save leaves the previous
 * checkpoint and `latest` whole. For each stage of ts_ckpt_save (chunk:
 * mid-pipeline, files, index, rename, latest, prune) a child process (this program, re-executed)
 * saves step 2 over a root holding step 1 with the library's testing hook
 * (ckpt_test_hook, src/ckpt/ckpt_internal.h) set to kill it (SIGKILL) right
 * after that stage; then the root must open, verify
 * and hold exactly step 1's values (crash before `latest` moved) or step
 * 2's (after), and a following save must succeed and clear the debris. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h" /* ckpt_test_hook */
#include "ckpt_common.h"

static const char *crash_stage; /* the child's: where the hook kills it */

static void crash_hook(const char *stage) {
  if (crash_stage && strcmp(stage, crash_stage) == 0) {
    fprintf(stderr, "test_ckpt_crash child: killed after stage '%s'\n", stage);
    fflush(stderr);
    raise(SIGKILL);
  }
}

/* Child: save version/step `step` of the data=2 layout to root (keep 1),
 * killed after stage `crash` ("-": never). */
static int child(const char *root, int step, const char *crash) {
  crash_stage = strcmp(crash, "-") ? crash : NULL;
  ckpt_test_hook = crash_hook;
  ckpt_save_chunk = 4096; /* "chunk": killed after the first page of the file, mid-pipeline */
  ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 2});
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  if (!c || ck_make_buffers(c, &CK_LAYOUTS[1], (uint64_t)step, false, b) < 0) return 3;
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(step);
  int rc = ts_ckpt_save(c, root, &m, CK_N, e, 1);
  if (rc != 0) fprintf(stderr, "child: save failed: %s\n", ts_last_error());
  ck_free_buffers(b);
  ts_client_free(c);
  return rc == 0 ? 0 : 4;
}

/* Runs the child; returns its wait status. */
static int run_child(const char *root, int step, const char *crash) {
  pid_t pid = fork();
  if (pid == 0) {
    char s[16];
    snprintf(s, sizeof s, "%d", step);
    execl("/proc/self/exe", "test_ckpt_crash", "child", root, s, crash ? crash : "-", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

/* 0 if root (or its step dir) opens, verifies and holds version v at step v. */
static int holds(const char *path, int v) {
  ts_ckpt *ck = ts_ckpt_open(path);
  int rc = ck && ts_ckpt_verify(ck) == 0 && ts_ckpt_get_meta(ck)->step == v ? 0 : -1;
  for (int i = 0; rc == 0 && i < CK_N; i++) {
    size_t n = ck_bytes(i);
    void *got = malloc(n + 1), *want = ck_values(i, (uint64_t)v);
    rc = ts_ckpt_read_host(ck, CK_TENSORS[i].name, got, n) == 0 && memcmp(got, want, n) == 0 ? 0 : -1;
    free(got);
    free(want);
  }
  ts_ckpt_close(ck);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "child") == 0) return child(argv[2], atoi(argv[3]), argv[4]);
  ts_test_init("test_ckpt_crash", 1);
  char tmp[256];
  snprintf(tmp, sizeof tmp, "/tmp/tessel_test_ckpt_crash_%d", (int)getpid());
  mkdir(tmp, 0755);
  static const char *const stages[] = {"chunk", "files", "index", "rename", "latest", "prune"};
  for (int k = 0; k < 6; k++) {
    const char *stage = stages[k];
    bool moved = k >= 4; /* `latest` points at step 2 once its stage is done */
    char root[400], p[500];
    snprintf(root, sizeof root, "%s/%s", tmp, stage);
    int st = run_child(root, 1, NULL);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: first save exited with status %d", stage, st);
    st = run_child(root, 2, stage);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: the child was not killed at the stage (status %d)", stage,
          st);
    CHECK(holds(root, moved ? 2 : 1) == 0, "%s: latest does not hold step %d whole: %s", stage, moved ? 2 : 1,
          ts_last_error());
    snprintf(p, sizeof p, "%s/step-00000001", root);
    if (k < 5) CHECK(holds(p, 1) == 0, "%s: step 1 is not whole after the crash: %s", stage, ts_last_error());
    if (k >= 3) {
      snprintf(p, sizeof p, "%s/step-00000002", root);
      CHECK(holds(p, 2) == 0, "%s: renamed step 2 is not whole: %s", stage, ts_last_error());
    }
    /* the next save succeeds over whatever the crash left */
    st = run_child(root, 3, NULL);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: save after the crash exited with status %d", stage, st);
    CHECK(holds(root, 3) == 0, "%s: step 3 after the crash: %s", stage, ts_last_error());
    snprintf(p, sizeof p, "%s/.tmp-step-00000002", root);
    struct stat sb;
    CHECK(stat(p, &sb) != 0, "%s: the next save removes a crashed save's temporary directory", stage);
  }
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (ts_test_failed == 0 && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp);
  return ts_test_finish();
}
