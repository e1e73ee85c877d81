/* client.c — the client: picks the thread budget (options, then
 * $TESSEL_NUM_THREADS, then all cores) and owns the devices. */
#include <omp.h>
#include <stdlib.h>

#include "runtime/rt.h"

ts_client *ts_client_new(const ts_client_options *opts) {
  int n = opts ? opts->num_threads : 0;
  if (n < 0) {
    ts_set_error("client: num_threads is %d (use 0 for the default)", n);
    return NULL;
  }
  if (n == 0) {
    const char *env = getenv("TESSEL_NUM_THREADS");
    if (env && *env) {
      char *end;
      long v = strtol(env, &end, 10);
      if (*end || v < 1 || v > 4096) {
        ts_set_error("client: TESSEL_NUM_THREADS='%s' is not a thread count >= 1", env);
        return NULL;
      }
      n = (int)v;
    }
  }
  int cores = omp_get_num_procs();
  if (n == 0) n = cores;
  if (n > cores) n = cores; /* never more threads than cores */
  if (n < 1) n = 1;
  ts_client *c = calloc(1, sizeof *c);
  if (!c) {
    ts_set_error("client: out of memory");
    return NULL;
  }
  c->num_threads = n;
  if (ts_cpu_device_init(&c->dev, 0) < 0) {
    free(c);
    return NULL;
  }
  ts_kernels_set_num_threads(n);
  return c;
}

void ts_client_free(ts_client *c) {
  if (!c) return;
  if (c->dev.destroy) c->dev.destroy(c->dev.ctx);
  free(c);
}

int ts_client_num_threads(const ts_client *c) { return c ? c->num_threads : 0; }

const char *ts_client_platform(const ts_client *c) { return c ? c->dev.platform : "none"; }
