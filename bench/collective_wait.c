/* collective_wait.c — benchmark: how long a blocking collective between
 * kernels waits for the last device of its group, against the compute each
 * device does between two of them (issue 16: devices sharing the cores meet
 * later the more each computes in between; the calibration's
 * allreduce.N.busy_s and busy_long_s are two points of this curve).
 *
 *   bench_collective_wait [D (8)] [SIZE ...] (256 384 512 768)
 *
 * Per SIZE: the busy probes' chain (tools/calprobe.c cal_matmul_chain: 20
 * matmuls of SIZE^3, a 1-element all-reduce after each that the next one
 * reads) on D devices of one process against the chain without them, 3 times
 * (cal_busy_collective: each the median of 3 pairs). Prints each device's
 * compute per collective alone (the chain without them on 1 device, 1
 * thread, / 20), the chain's time per collective on D devices (the
 * calibration's busy_long_after_s for 512) and the wait per collective. */
#include <stdio.h>
#include <stdlib.h>

#include "calprobe.h"

int main(int argc, char **argv) {
  int D = argc > 1 ? atoi(argv[1]) : 8;
  static const int64_t def[] = {256, 384, 512, 768};
  int ns = argc > 2 ? argc - 2 : 4;
  if (D < 2 || D > 64) {
    fprintf(stderr, "usage: %s [D (2..64, 8)] [SIZE ...]\n", argv[0]);
    return 2;
  }
  ts_client *c = ts_client_new(&(ts_client_options){.num_devices = D});
  ts_client *c1 = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  if (!c || !c1) {
    fprintf(stderr, "collective_wait: %s\n", ts_last_error());
    return 1;
  }
  printf("%d devices; per collective: compute of one device alone (1 thread), the chain's time on %d devices, "
         "the wait (3 measurements, ms)\n", D, D);
  int rc = 0;
  for (int i = 0; i < ns && rc == 0; i++) {
    int64_t n = argc > 2 ? atoll(argv[2 + i]) : def[i];
    if (n < 2 || n > 8192) {
      fprintf(stderr, "collective_wait: size %lld outside 2..8192\n", (long long)n);
      rc = 2;
      break;
    }
    ts_graph *g = cal_matmul_chain(CHAIN_NONE, n);
    double one = g ? cal_graph_stat(c1, g, false, 5, true) : -1;
    ts_graph_free(g);
    double per[3], w[3];
    for (int r = 0; r < 3 && rc == 0; r++)
      if (one < 0 || (w[r] = cal_busy_collective(c, CHAIN_BLOCKING, n, &per[r])) < 0) rc = 1;
    if (rc) {
      fprintf(stderr, "collective_wait: size %lld: %s\n", (long long)n, ts_last_error());
      break;
    }
    printf("size %4lld: alone %7.3f | on %d devices %7.3f %7.3f %7.3f | wait %.3f %.3f %.3f\n", (long long)n,
           one * 1e3 / 20, D, per[0] * 1e3, per[1] * 1e3, per[2] * 1e3, w[0] * 1e3, w[1] * 1e3, w[2] * 1e3);
  }
  ts_client_free(c);
  ts_client_free(c1);
  return rc;
}
