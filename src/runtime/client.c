/* client.c — the client: picks the thread budget (options, then
 * $TESSEL_NUM_THREADS, then all cores) and the number of virtual devices
 * (options, then $TESSEL_CPU_DEVICES, then 1), creates the devices and, for
 * more than one, the communicator their threads share. */
#include <omp.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "runtime/rt.h"

static int env_count(const char *name, int max, int *out) {
  const char *env = getenv(name);
  if (!env || !*env) return 0;
  char *end;
  long v = strtol(env, &end, 10);
  if (*end || v < 1 || v > max) return ts_set_error("client: %s='%s' is not a count in [1, %d]", name, env, max);
  *out = (int)v;
  return 0;
}

ts_client *ts_client_new(const ts_client_options *opts) {
  int n = opts ? opts->num_threads : 0;
  int ndev = opts ? opts->num_devices : 0;
  if (n < 0) {
    ts_set_error("client: num_threads is %d (use 0 for the default)", n);
    return NULL;
  }
  if (ndev < 0 || ndev > 4096) {
    ts_set_error("client: num_devices is %d (use 0 for the default, at most 4096)", ndev);
    return NULL;
  }
  if (n == 0 && env_count("TESSEL_NUM_THREADS", 4096, &n) < 0) return NULL;
  if (ndev == 0 && env_count("TESSEL_CPU_DEVICES", 4096, &ndev) < 0) return NULL;
  if (ndev == 0) ndev = 1;
  int cores = omp_get_num_procs();
  if (n == 0) n = cores;
  if (n > cores) n = cores; /* never more threads than cores */
  if (n < 1) n = 1;
  ts_client *c = calloc(1, sizeof *c);
  if (!c || !(c->devs = calloc((size_t)ndev, sizeof *c->devs))) {
    free(c);
    ts_set_error("client: out of memory");
    return NULL;
  }
  c->num_threads = n;
  c->num_devices = ndev;
  c->threads_per_device = n / ndev > 1 ? n / ndev : 1;
  for (int i = 0; i < ndev; i++)
    if (ts_cpu_device_init(&c->devs[i], i) < 0) {
      ts_client_free(c);
      return NULL;
    }
  c->dev = c->devs[0];
  if (ndev > 1 && !(c->comm = ts_comm_new(ndev))) {
    ts_client_free(c);
    return NULL;
  }
  /* a device that failed (a kernel error) never reaches the next collective:
   * its peers give up after two minutes with an error instead of hanging */
  if (c->comm) ts_comm_set_timeout_ms(c->comm, 120000);
  ts_kernels_set_num_threads(c->threads_per_device);
  return c;
}

void ts_client_free(ts_client *c) {
  if (!c) return;
  if (c->comm) ts_comm_free(c->comm);
  for (int i = 0; c->devs && i < c->num_devices; i++)
    if (c->devs[i].destroy) c->devs[i].destroy(c->devs[i].ctx);
  free(c->devs);
  free(c);
}

int ts_client_num_threads(const ts_client *c) { return c ? c->num_threads : 0; }
int ts_client_num_devices(const ts_client *c) { return c ? c->num_devices : 0; }
int ts_client_threads_per_device(const ts_client *c) { return c ? c->threads_per_device : 0; }

const char *ts_client_platform(const ts_client *c) { return c ? c->dev.platform : "none"; }
