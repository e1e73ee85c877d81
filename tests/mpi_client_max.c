/* mpi_client_max.c — the non-blocking ts_client_max (ts_client_max_start,
 * ts_client_max_finish) under mpirun -n 2 and -n 3:
 * - several rounds, a different process passing the largest value in each:
 *   every process gets that value;
 * - one step behind, as tessel train agrees on a stop: round r starts before
 *   round r-1 finishes, with a blocking ts_client_max and a late process
 *   (it sleeps) in between: each request gets its own round's maximum;
 * - two requests finished in the opposite order of their starts;
 * - a process-local client: immediate; NULL arguments: clear errors. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { ROUNDS = 9 };

/* Round r's value on process me of P: the largest (1000 + r) on process r % P. */
static int64_t value_of(int r, int me, int P) { return me == r % P ? 1000 + r : r - me; }

int main(void) {
  ts_test_init("mpi_client_max", 1);
  ts_client_options wo = {.num_threads = 1, .collective_timeout_ms = 20000};
  ts_client *c = ts_client_new(&wo);
  CHECK(c != NULL, "%s", ts_last_error());
  if (!c) return ts_test_finish();
  int P = ts_client_process_count(c), me = ts_client_process_index(c);
  CHECK(P >= 2, "run under mpirun with 2 or more processes (got %d)", P);

  /* start, then finish, round by round */
  for (int r = 0; r < ROUNDS; r++) {
    ts_client_max_req *q = NULL;
    int64_t max = -1;
    CHECK(ts_client_max_start(c, value_of(r, me, P), &q) == 0 && q, "round %d start: %s", r, ts_last_error());
    CHECK(ts_client_max_finish(q, &max) == 0, "round %d finish: %s", r, ts_last_error());
    CHECK(max == 1000 + r, "round %d: max %lld, expected %d", r, (long long)max, 1000 + r);
  }

  /* one round behind, with a blocking agreement and a late process between */
  ts_client_max_req *prev = NULL;
  CHECK(ts_client_max_start(c, value_of(0, me, P), &prev) == 0, "%s", ts_last_error());
  for (int r = 1; r <= ROUNDS; r++) {
    ts_client_max_req *q = NULL;
    if (r < ROUNDS) CHECK(ts_client_max_start(c, value_of(r, me, P), &q) == 0, "%s", ts_last_error());
    if (me == r % P) nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL); /* 20 ms late */
    int64_t blocking = -1, max = -1;
    CHECK(ts_client_max(c, 5000 + 10 * r + me, &blocking) == 0 && blocking == 5000 + 10 * r + P - 1,
          "blocking max in round %d: %lld (%s)", r, (long long)blocking, ts_last_error());
    CHECK(ts_client_max_finish(prev, &max) == 0 && max == 1000 + r - 1, "round %d, finished one behind: %lld (%s)",
          r - 1, (long long)max, ts_last_error());
    prev = q;
  }

  /* two requests in flight, finished in the opposite order */
  {
    ts_client_max_req *a = NULL, *b = NULL;
    int64_t ma = -1, mb = -1;
    CHECK(ts_client_max_start(c, me == 0 ? 70 : 7, &a) == 0, "%s", ts_last_error());
    CHECK(ts_client_max_start(c, me == P - 1 ? 80 : 8, &b) == 0, "%s", ts_last_error());
    CHECK(ts_client_max_finish(b, &mb) == 0 && mb == 80, "second: %lld (%s)", (long long)mb, ts_last_error());
    CHECK(ts_client_max_finish(a, &ma) == 0 && ma == 70, "first: %lld (%s)", (long long)ma, ts_last_error());
  }

  /* bad arguments: clear errors, nothing posted */
  {
    ts_client_max_req *q = (ts_client_max_req *)&q;
    int64_t max = 0;
    CHECK(ts_client_max_start(NULL, 1, &q) < 0 && q == NULL && strstr(ts_last_error(), "client_max_start"),
          "NULL client: %s", ts_last_error());
    CHECK(ts_client_max_start(c, 1, NULL) < 0 && strstr(ts_last_error(), "NULL"), "NULL req: %s", ts_last_error());
    CHECK(ts_client_max_finish(NULL, &max) < 0 && strstr(ts_last_error(), "client_max_finish"), "NULL: %s",
          ts_last_error());
    /* NULL max: an error, but the request is still completed (collectively) and freed */
    CHECK(ts_client_max_start(c, me, &q) == 0, "%s", ts_last_error());
    CHECK(ts_client_max_finish(q, NULL) < 0 && strstr(ts_last_error(), "max is NULL"), "NULL max: %s",
          ts_last_error());
  }

  /* a process-local client: immediate, this process's value */
  {
    ts_client_options lo = {.num_threads = 1, .process_local = true};
    ts_client *l = ts_client_new(&lo);
    CHECK(l && ts_client_process_count(l) == 1, "%s", ts_last_error());
    ts_client_max_req *q = NULL;
    int64_t max = -1;
    CHECK(l && ts_client_max_start(l, 40 + me, &q) == 0 && ts_client_max_finish(q, &max) == 0 && max == 40 + me,
          "local: %lld (%s)", (long long)max, ts_last_error());
    ts_client_free(l);
  }
  /* the last agreement: nothing is pending when the clients go */
  int64_t done = -1;
  CHECK(ts_client_max(c, me, &done) == 0 && done == P - 1, "%s", ts_last_error());
  ts_client_free(c);
  return ts_test_finish();
}
