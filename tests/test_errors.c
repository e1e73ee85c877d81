/* test_errors.c — the error policy: every failure leaves a message and a
 * status code (ts_last_error_code). Checks the code of an invalid argument,
 * an I/O error (a missing dataset directory, an unwritable metrics file), an
 * allocation failure (a buffer of 2^62 bytes), a collective timeout, that a
 * caller adding context keeps the callee's code, and that a code set on a
 * worker thread reaches the thread that reports it (the loader). That src/
 * never exits or aborts is tests/no_exit.sh. */
#include <pthread.h>
#include <string.h>

#include "comm/comm.h"  /* ts_comm: the timeout */
#include "harness.h"
#include "tessel/tessel.h"
#include "util/error.h" /* set_error_code, set_error_context, error_oom */

/* The out-of-memory check asks for 2^62 bytes: under AddressSanitizer that
 * must fail like malloc does (NULL), not end the test with a report. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static void test_codes_and_context(void) {
  ts_clear_error();
  CHECK(ts_last_error_code() == TS_OK && ts_last_error()[0] == '\0', "cleared: code %d", (int)ts_last_error_code());
  CHECK(set_error("bad %d", 1) == -1 && ts_last_error_code() == TS_ERR_INVALID_ARGUMENT, "set_error: %s",
        ts_status_name(ts_last_error_code()));
  CHECK(error_oom("growing x", 48) == -1 && ts_last_error_code() == TS_ERR_OUT_OF_MEMORY &&
            strcmp(ts_last_error(), "growing x: out of memory (48 bytes)") == 0,
        "error_oom: %s", ts_last_error());
  /* a caller adding context keeps the cause's code */
  CHECK(set_error_context("compile: device %d", 3) == -1 && ts_last_error_code() == TS_ERR_OUT_OF_MEMORY &&
            strcmp(ts_last_error(), "compile: device 3: growing x: out of memory (48 bytes)") == 0,
        "context: %s (%s)", ts_last_error(), ts_status_name(ts_last_error_code()));
  set_error_code(TS_ERR_IO, "f: cannot open");
  set_error_context("loader");
  CHECK(ts_last_error_code() == TS_ERR_IO && strcmp(ts_last_error(), "loader: f: cannot open") == 0, "%s",
        ts_last_error());
  /* context on no error at all: a callee failed without saying why */
  ts_clear_error();
  set_error_context("step %d", 7);
  CHECK(ts_last_error_code() == TS_ERR_INTERNAL && strstr(ts_last_error(), "step 7: "), "%s", ts_last_error());
  /* a long message is cut, never overflows */
  char big[2000];
  memset(big, 'a', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  set_error_code(TS_ERR_MISMATCH, "%s", big);
  set_error_context("ctx");
  CHECK(strlen(ts_last_error()) < 1024 && strncmp(ts_last_error(), "ctx: aaa", 8) == 0 &&
            ts_last_error_code() == TS_ERR_MISMATCH,
        "long message: %zu chars", strlen(ts_last_error()));
  const char *names[] = {"ok", "invalid_argument", "out_of_memory", "io", "timeout", "mismatch", "internal"};
  for (int i = 0; i < TS_STATUS_COUNT; i++)
    CHECK(strcmp(ts_status_name((ts_status)i), names[i]) == 0, "status %d is named %s", i,
          ts_status_name((ts_status)i));
  CHECK(strcmp(ts_status_name((ts_status)99), "unknown") == 0, "status 99");
}

static void test_invalid_argument(void) {
  ts_dtype dt;
  ts_clear_error();
  CHECK(ts_dtype_parse("float", &dt) == -1 && ts_last_error_code() == TS_ERR_INVALID_ARGUMENT, "%s (%s)",
        ts_last_error(), ts_status_name(ts_last_error_code()));
  ts_graph *g = ts_graph_new();
  ts_clear_error();
  ts_tensor x = ts_input(g, "x", TS_F32, 2, (int64_t[]){2, 3});
  ts_tensor y = ts_input(g, "y", TS_F32, 2, (int64_t[]){4, 5});
  CHECK(ts_add(g, x, y) == TS_NONE && ts_last_error_code() == TS_ERR_INVALID_ARGUMENT, "add of [2,3] and [4,5]: %s",
        ts_last_error());
  CHECK(ts_graph_num_nodes(g) == 2, "a failed builder appends nothing: %d nodes", ts_graph_num_nodes(g));
  ts_graph_free(g);
}

static void test_io(void) {
  ts_dataset d = {0};
  ts_clear_error();
  CHECK(ts_mnist_load("/nonexistent/tessel-test-dir", "train", &d) == -1 && ts_last_error_code() == TS_ERR_IO &&
            strstr(ts_last_error(), "/nonexistent/tessel-test-dir"),
        "missing dataset dir: %s (%s)", ts_last_error(), ts_status_name(ts_last_error_code()));
  ts_clear_error();
  CHECK(ts_cifar10_load("/nonexistent/tessel-test-dir", "train", &d) == -1 && ts_last_error_code() == TS_ERR_IO,
        "missing CIFAR-10 dir: %s (%s)", ts_last_error(), ts_status_name(ts_last_error_code()));
  ts_clear_error();
  CHECK(ts_mnist_load("/nonexistent", "nope", NULL) == -1 && ts_last_error_code() == TS_ERR_INVALID_ARGUMENT,
        "NULL out: %s (%s)", ts_last_error(), ts_status_name(ts_last_error_code()));
  ts_clear_error();
  CHECK(ts_metrics_write_json("/nonexistent/tessel-test-dir/m.json") == -1 && ts_last_error_code() == TS_ERR_IO,
        "unwritable metrics file: %s (%s)", ts_last_error(), ts_status_name(ts_last_error_code()));
}

static void test_out_of_memory(void) {
  ts_client *c = ts_client_new(NULL);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return;
  /* 2^60 f32 elements = 2^62 bytes: no machine has it, and the size fits size_t */
  int64_t shape[3] = {1 << 20, 1 << 20, 1 << 20};
  ts_clear_error();
  ts_buffer *b = ts_buffer_new(c, TS_F32, 3, shape);
  CHECK(b == NULL && ts_last_error_code() == TS_ERR_OUT_OF_MEMORY, "2^62-byte buffer: %s (%s)", ts_last_error(),
        ts_status_name(ts_last_error_code()));
  ts_buffer_free(b);
  /* the client is still usable */
  float v[2] = {1, 2}, back[2] = {0};
  ts_buffer *ok = ts_buffer_from_host(c, TS_F32, 1, (int64_t[]){2}, v);
  CHECK(ok && ts_buffer_read(ok, back, sizeof back) == 0 && back[1] == 2.0f, "%s", ts_last_error());
  ts_buffer_free(ok);
  ts_client_free(c);
}

/* Devices 0 and 1 all-reduce over {0, 1, 2}; device 2 never comes. */
typedef struct {
  ts_comm *c;
  int dev, rc;
  ts_status code;
} timeout_arg;

static void *timeout_thread(void *p) {
  timeout_arg *a = p;
  int group[3] = {0, 1, 2};
  float buf[4] = {0};
  a->rc = comm_all_reduce(a->c, a->dev, group, 3, TS_F32, TS_REDUCE_SUM, buf, buf, 4);
  a->code = ts_last_error_code(); /* per thread: read it here */
  return NULL;
}

static void test_timeout(void) {
  ts_comm *c = comm_new(3);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return;
  comm_set_timeout_ms(c, 100);
  pthread_t t[2];
  timeout_arg a[2];
  for (int d = 0; d < 2; d++) {
    a[d] = (timeout_arg){.c = c, .dev = d};
    pthread_create(&t[d], NULL, timeout_thread, &a[d]);
  }
  for (int d = 0; d < 2; d++) pthread_join(t[d], NULL);
  for (int d = 0; d < 2; d++)
    CHECK(a[d].rc == -1 && a[d].code == TS_ERR_TIMEOUT, "device %d: rc %d, code %s", d, a[d].rc,
          ts_status_name(a[d].code));
  comm_free(c);
}

/* A source whose sample 5 cannot be read (an I/O failure on a worker thread). */
static int failing_get(const ts_source *s, int64_t i, uint8_t *pixels, int32_t *label) {
  (void)s;
  if (i == 5) return set_error_code(TS_ERR_IO, "disk: sample %lld unreadable", (long long)i);
  memset(pixels, 0, 4);
  *label = 0;
  return 0;
}

static void test_code_crosses_threads(void) {
  ts_source src = {.name = "failing", .n = 8, .c = 1, .h = 2, .w = 2, .num_classes = 2, .get = failing_get};
  ts_loader *l = ts_loader_new(&src, &(ts_loader_options){.batch = 8, .no_shuffle = true});
  CHECK(l != NULL, "%s", ts_last_error());
  if (!l) return;
  ts_clear_error();
  CHECK(ts_loader_next(l) == NULL && ts_last_error_code() == TS_ERR_IO && strstr(ts_last_error(), "unreadable"),
        "loader: %s (%s)", ts_last_error(), ts_status_name(ts_last_error_code()));
  ts_loader_free(l);
}

int main(void) {
  ts_test_init("test_errors", 1);
  test_codes_and_context();
  test_invalid_argument();
  test_io();
  test_out_of_memory();
  test_timeout();
  test_code_crosses_threads();
  return ts_test_finish();
}
