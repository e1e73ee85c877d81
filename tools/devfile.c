/* devfile.c — device descriptions, the calibration cache and the cost-model
 * options a mesh gets from them (devfile.h; the format is documented in
 * devices/README.md). The measurement that writes a calibration is
 * tools/calibrate.c. */
#include "devfile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "util/config.h" /* TESSEL_CALIBRATION, XDG_CACHE_HOME, HOME, TESSEL_NUM_THREADS */

const char *const dev_kernel_keys[TS_KERNEL_CLASSES] = {
    "kernel.matmul_small", "kernel.matmul", "kernel.conv", "kernel.conv_bwd_data", "kernel.conv_bwd_filter",
    "kernel.elementwise", "kernel.reduce", "kernel.gather", "kernel.optimizer", "kernel.broadcast", "kernel.pool",
    "kernel.attention", "kernel.broadcast_rows", "kernel.transcendental", "kernel.conv_nhwc", "kernel.conv_bwd_data_nhwc",
    "kernel.conv_bwd_filter_nhwc"};
const int dev_ar_devices[DEV_AR_SIZES] = {2, 4, 8};

void device_default(device_desc *d) {
  *d = (device_desc){.flops_f32 = 2e10, .flops_bf16 = 2e10, .bytes_per_s = 1e10, .memory_bytes = 8e9,
                     .host_bytes_per_s = 5e9, .host_latency_s = 5e-6, .net_bytes_per_s = 1.25e9,
                     .net_latency_s = 2e-5, .devices_per_host = 4096};
  snprintf(d->name, sizeof d->name, "the cost model's defaults (an estimate for a CPU core, not calibrated)");
}

/* The processes' keys (allreduce.procsP.*, step_overhead.procsP_s, P in
 * 2..DEV_PROC_MAX) into d; false when key is none of them. */
static bool proc_key(const char *key, double x, device_desc *d) {
  for (int P = 2; P <= DEV_PROC_MAX; P++) {
    char k[64];
    struct { const char *fmt; double *v; } keys[] = {
        {"allreduce.procs%d.bytes_per_s", &d->pr_bw[P]}, {"allreduce.procs%d.latency_s", &d->pr_lat[P]},
        {"allreduce.procs%d.busy_s", &d->pr_busy[P]},    {"allreduce.procs%d.busy_after_s", &d->pr_after[P]},
        {"allreduce.procs%d.step_wait_s", &d->pr_swait[P]}, {"step_overhead.procs%d_s", &d->pr_step[P]},
        {"allreduce.procs%d.cached_bytes_per_s", &d->pr_cbw[P]}};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
      snprintf(k, sizeof k, keys[i].fmt, P);
      if (strcmp(key, k) == 0) {
        *keys[i].v = x;
        return true;
      }
    }
  }
  return false;
}

/* "key = value" lines, '#' comments; unknown keys are errors naming them. */
int device_read(const char *cmd, const char *path, device_desc *d) {
  FILE *f = fopen(path, "r");
  if (!f) {
    cli_error(cmd, "device file %s: cannot open it: %s", path, strerror(errno));
    return -1;
  }
  char line[512];
  int ln = 0, rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    ln++;
    char *h = strchr(line, '#');
    if (h) *h = '\0';
    char key[64], val[256];
    if (sscanf(line, " %63[^= \t] = %255[^\n]", key, val) != 2) {
      for (char *p = line; *p; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
          cli_error(cmd, "device file %s:%d: not 'key = value': %s", path, ln, line);
          rc = -1;
          break;
        }
      continue;
    }
    for (size_t k = strlen(val); k > 0 && (val[k - 1] == ' ' || val[k - 1] == '\t' || val[k - 1] == '\r'); k--)
      val[k - 1] = '\0';
    if (strcmp(key, "name") == 0 || strcmp(key, "calibration.cpu") == 0) {
      snprintf(key[0] == 'n' ? d->name : d->cpu, sizeof d->name, "%s", val);
      continue;
    }
    char *end;
    double x = strtod(val, &end);
    if (*end || !(x > 0)) {
      cli_error(cmd, "device file %s:%d: %s = '%s' is not a positive number", path, ln, key, val);
      rc = -1;
      break;
    }
    struct { const char *k; double *v; } keys[] = {
        {"flops_per_s.f32", &d->flops_f32},       {"flops_per_s.bf16", &d->flops_bf16},
        {"memory_bytes_per_s", &d->bytes_per_s},   {"memory_bytes", &d->memory_bytes},
        {"host_link_bytes_per_s", &d->host_bytes_per_s}, {"host_link_latency_s", &d->host_latency_s},
        {"net_link_bytes_per_s", &d->net_bytes_per_s},   {"net_link_latency_s", &d->net_latency_s},
        {"op_overhead_s", &d->op_overhead_s},      {"parallel_efficiency", &d->parallel_efficiency},
        {"op_overhead.parallel_s", &d->par_overhead_s}, {"kernel.broadcast.operand_s", &d->bcast_operand_s},
        {"kernel.matmul.bytes_per_s", &d->dot_bytes_per_s}, {"cache_bytes", &d->cache_bytes},
        {"kernel.conv.weight_bytes_per_s", &d->conv_wbytes_per_s[0]},
        {"kernel.conv_bwd_data.weight_bytes_per_s", &d->conv_wbytes_per_s[1]},
        {"kernel.conv_bwd_filter.weight_bytes_per_s", &d->conv_wbytes_per_s[2]}};
    bool found = false;
    for (size_t k = 0; k < sizeof keys / sizeof *keys && !found; k++)
      if (strcmp(key, keys[k].k) == 0) *keys[k].v = x, found = true;
    for (int k = 0; k < TS_KERNEL_CLASSES && !found; k++)
      if (strcmp(key, dev_kernel_keys[k]) == 0) d->kernel[k] = x, found = true;
    for (int k = 0; k < TS_KERNEL_CLASSES && !found; k++) { /* kernel.CLASS.cached */
      size_t n = strlen(dev_kernel_keys[k]);
      if (strncmp(key, dev_kernel_keys[k], n) == 0 && strcmp(key + n, ".cached") == 0)
        d->kernel_cached[k] = x, found = true;
    }
    for (int k = 0; k < TS_KERNEL_CLASSES && !found; k++) /* parallel_efficiency.CLASS */
      if (strncmp(key, "parallel_efficiency.", 20) == 0 && strcmp(key + 20, dev_kernel_keys[k] + 7) == 0)
        d->kernel_eff[k] = x, found = true;
    for (int k = 0; k < DEV_AR_SIZES && !found; k++) {
      char b[64], l[64];
      snprintf(b, sizeof b, "allreduce.%d.bytes_per_s", dev_ar_devices[k]);
      snprintf(l, sizeof l, "allreduce.%d.latency_s", dev_ar_devices[k]);
      char so[64], bz[64], se[64], oo[64], as[64], bl[64], ba[64];
      snprintf(as, sizeof as, "allreduce.%d.async_s", dev_ar_devices[k]);
      snprintf(bl, sizeof bl, "allreduce.%d.busy_long_s", dev_ar_devices[k]);
      snprintf(ba, sizeof ba, "allreduce.%d.busy_long_after_s", dev_ar_devices[k]);
      snprintf(so, sizeof so, "step_overhead.%d_s", dev_ar_devices[k]);
      snprintf(oo, sizeof oo, "op_overhead.%d_s", dev_ar_devices[k]);
      snprintf(bz, sizeof bz, "allreduce.%d.busy_s", dev_ar_devices[k]);
      snprintf(se, sizeof se, "shared_efficiency.%d", dev_ar_devices[k]);
      if (strcmp(key, b) == 0) d->ar_bw[k] = x, found = true;
      else if (strcmp(key, l) == 0) d->ar_lat[k] = x, found = true;
      else if (strcmp(key, so) == 0) d->step_over[k] = x, found = true;
      else if (strcmp(key, bz) == 0) d->ar_busy[k] = x, found = true;
      else if (strcmp(key, se) == 0) d->shared_eff[k] = x, found = true;
      else if (strcmp(key, oo) == 0) d->op_over[k] = x, found = true;
      else if (strcmp(key, as) == 0) d->ar_async[k] = x, found = true;
      else if (strcmp(key, bl) == 0) d->ar_long[k] = x, found = true;
      else if (strcmp(key, ba) == 0) d->ar_long_after[k] = x, found = true;
    }
    if (!found) found = proc_key(key, x, d);
    if (!found && strcmp(key, "devices_per_host") == 0) d->devices_per_host = (int)x, found = true;
    if (!found && strcmp(key, "step_overhead.1_s") == 0) d->step1 = x, found = true;
    if (!found && strcmp(key, "calibration.threads") == 0) d->threads = (int)x, found = true;
    if (!found && strcmp(key, "cores") == 0) d->cores = (int)x, d->per_core = true, found = true;
    if (!found) {
      cli_error(cmd, "device file %s:%d: unknown key '%s' (valid: name, flops_per_s.f32, flops_per_s.bf16, "
                     "memory_bytes_per_s, memory_bytes, host_link_bytes_per_s, host_link_latency_s, "
                     "net_link_bytes_per_s, net_link_latency_s, devices_per_host, kernel.CLASS, kernel.CLASS.cached, cache_bytes, kernel.broadcast.operand_s, kernel.matmul.bytes_per_s, kernel.conv{,_bwd_data,_bwd_filter}.weight_bytes_per_s, op_overhead_s, op_overhead.parallel_s, "
                     "parallel_efficiency, parallel_efficiency.CLASS, allreduce.N.bytes_per_s, allreduce.N.latency_s, allreduce.N.busy_s, allreduce.N.busy_long_s, allreduce.N.busy_long_after_s, allreduce.N.async_s, step_overhead.N_s, shared_efficiency.N, op_overhead.N_s, "
                     "allreduce.procsP.bytes_per_s, allreduce.procsP.latency_s, allreduce.procsP.busy_s, allreduce.procsP.busy_after_s, allreduce.procsP.step_wait_s, allreduce.procsP.cached_bytes_per_s, step_overhead.procsP_s (P 2..8), cores, "
                     "calibration.cpu, calibration.threads; devices/README.md)", path, ln, key);
      rc = -1;
    }
  }
  fclose(f);
  for (int k = 0; k < DEV_AR_SIZES && rc == 0; k++) /* the long wait is a pair: a value and its compute */
    if ((d->ar_long[k] > 0) != (d->ar_long_after[k] > 0)) {
      cli_error(cmd, "device file %s: allreduce.%d.busy_long_s and allreduce.%d.busy_long_after_s go together "
                     "(the wait and the compute per collective it was measured after); one is missing",
                path, dev_ar_devices[k], dev_ar_devices[k]);
      rc = -1;
    }
  return rc;
}

const char *calibration_path(char *buf, size_t len) {
  const ts_env_config *e = env_config();
  if (e->calibration) {
    if (strcmp(e->calibration, "none") == 0) return NULL;
    snprintf(buf, len, "%s", e->calibration);
    return buf;
  }
  if (e->xdg_cache_home) snprintf(buf, len, "%s/tessel/calibration.txt", e->xdg_cache_home);
  else if (e->home) snprintf(buf, len, "%s/.cache/tessel/calibration.txt", e->home);
  else return NULL;
  return buf;
}

void calibration_key(char *cpu, size_t len, int *threads) {
  snprintf(cpu, len, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char *c = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && c) {
      c++;
      while (*c == ' ' || *c == '\t') c++;
      c[strcspn(c, "\n")] = '\0';
      snprintf(cpu, len, "%s", c);
      break;
    }
  }
  if (f) fclose(f);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int t = env_config()->num_threads;
  *threads = t > 0 && t < cores ? t : (int)(cores > 0 ? cores : 1);
}

void device_auto(device_desc *d, char *note, size_t len) {
  device_default(d);
  char path[1024];
  if (!calibration_path(path, sizeof path)) {
    snprintf(note, len, "no calibration (TESSEL_CALIBRATION=none)");
    return;
  }
  if (access(path, R_OK) != 0) {
    snprintf(note, len, "no calibration at %s (tessel plan --calibrate writes it)", path);
    return;
  }
  device_desc c;
  device_default(&c);
  if (device_read("calibration", path, &c) < 0) {
    snprintf(note, len, "calibration %s unreadable: the defaults", path);
    return;
  }
  char cpu[128];
  int threads;
  calibration_key(cpu, sizeof cpu, &threads);
  if (strcmp(c.cpu, cpu) != 0 || c.threads != threads) {
    snprintf(note, len, "calibration %s is for '%s', %d threads; this is '%s', %d threads: the defaults (rerun "
                        "tessel plan --calibrate)", path, c.cpu, c.threads, cpu, threads);
    return;
  }
  *d = c;
  snprintf(note, len, "calibration %s", path);
}

/* ---- options for a mesh ---- */

/* The in-process entry (allreduce.N.*, step_overhead.N_s, shared_efficiency.N)
 * for a host of `host` devices: the nearest measured N at or above it, else
 * the largest; -1 when none was measured. */
static int host_entry(const device_desc *d, int64_t host) {
  for (int k = 0; k < DEV_AR_SIZES; k++)
    if (d->ar_bw[k] > 0 && dev_ar_devices[k] >= host) return k;
  for (int k = DEV_AR_SIZES - 1; k >= 0; k--)
    if (d->ar_bw[k] > 0) return k;
  return -1;
}

/* allreduce.N.async_s less the alpha of the probe's all-reduce (2 log2 N
 * steps of allreduce.N.latency_s); 0 when not measured, else at least 1 ns
 * (0 would mean "not measured": collective_wait_s). */
double async_beyond_alpha(const device_desc *d, int q) {
  if (d->ar_async[q] <= 0) return 0;
  double alpha = 2 * log2((double)dev_ar_devices[q]) * (d->ar_lat[q] > 0 ? d->ar_lat[q] : 0);
  return fmax(d->ar_async[q] - alpha, 1e-9);
}

void device_options(const device_desc *d, const ts_mesh *m, ts_auto_shard_options *ao, bool *in_host) {
  int64_t ndev = ts_mesh_num_devices(m);
  int64_t host = ndev < d->devices_per_host ? ndev : d->devices_per_host;
  /* a calibrated CPU: devices of a host share its cores (threads / devices each,
   * at most their share of the cores), kernels measured on one core */
  double share = 1, over = 1, cls_share[TS_KERNEL_CLASSES];
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) cls_share[k] = 1;
  if (d->per_core && d->cores > 0) {
    int threads = d->threads > 0 ? d->threads : d->cores;
    double t_dev = threads / host > 1 ? (double)(threads / host) : 1;
    share = fmin(t_dev, (double)d->cores / (double)host);
    /* above one core, each class at its own measured parallel efficiency */
    for (int k = 0; k < TS_KERNEL_CLASSES; k++) {
      double e = d->kernel_eff[k] > 0 ? d->kernel_eff[k] : d->parallel_efficiency > 0 ? d->parallel_efficiency : 1;
      cls_share[k] = share > 1 ? fmax(1, share * e) : share;
    }
    if (share > 1) share = fmax(1, share * (d->parallel_efficiency > 0 ? d->parallel_efficiency : 1));
    /* at most one core each: the measured speed of devices taking turns on the cores */
    int q = host > 1 ? host_entry(d, host) : -1;
    if (share <= 1 && q >= 0 && d->shared_eff[q] > 0) {
      share *= d->shared_eff[q];
      for (int k = 0; k < TS_KERNEL_CLASSES; k++) cls_share[k] = share;
    }
    over = share < 1 ? 1 / share : 1;
  }
  ao->flops_per_s = (d->kernel[TS_KERNEL_MATMUL] > 0 ? d->kernel[TS_KERNEL_MATMUL] : d->flops_f32) * share;
  ao->bytes_per_s = (d->kernel[TS_KERNEL_ELEMENTWISE] > 0 ? d->kernel[TS_KERNEL_ELEMENTWISE] : d->bytes_per_s) * share;
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) ao->kernel_per_s[k] = d->kernel[k] * cls_share[k];
  /* an NHWC conv class not calibrated (0) takes the NCHW class's rate: autoshard_costs_from */
  ao->broadcast_operand_s = d->bcast_operand_s / cls_share[TS_KERNEL_BROADCAST]; /* work, as the class's rate */
  ao->matmul_bytes_per_s = d->dot_bytes_per_s * cls_share[TS_KERNEL_MATMUL];      /* one core's, as kernel.matmul */
  for (int i = 0; i < 3; i++) /* one core's, as kernel.conv's */
    ao->conv_weight_bytes_per_s[i] = d->conv_wbytes_per_s[i] * cls_share[TS_KERNEL_CONV + i];
  ao->cache_bytes = d->cache_bytes; /* per kernel: the caches are not shared out as the cores are */
  for (int k = 0; k < TS_KERNEL_CLASSES; k++) ao->kernel_cached_per_s[k] = d->kernel_cached[k] * cls_share[k];
  ao->op_overhead_s = d->op_overhead_s * over;
  /* several devices in this process: their kernels' fixed cost as measured with that many
   * (the devices' dispatch and hand-offs on shared cores; 1/share of one device's was half
   * of it: the MLP's 3-8 ms steps of small kernels on 2-8 devices ran 2x the prediction) */
  int qo = host > 1 ? host_entry(d, host) : -1;
  if (qo >= 0 && d->op_over[qo] > 0) ao->op_overhead_s = fmax(ao->op_overhead_s, d->op_over[qo]);
  /* kernels of a device with several threads fork and join them */
  if (d->per_core && d->cores > 0 && d->par_overhead_s > 0) {
    int threads = d->threads > 0 ? d->threads : d->cores;
    if (threads / host > 1) ao->parallel_overhead_s = d->par_overhead_s;
  }
  /* in-host links: the all-reduce measured with the nearest device count at or above the host's */
  int q = host_entry(d, host);
  double hbw = q >= 0 ? d->ar_bw[q] : d->host_bytes_per_s, hlat = q >= 0 ? d->ar_lat[q] : d->host_latency_s;
  ao->step_overhead_s = host <= 1 ? d->step1 : q >= 0 ? d->step_over[q] : 0;
  ao->collective_wait_s = host > 1 && q >= 0 ? d->ar_busy[q] : 0;
  bool lng = host > 1 && q >= 0 && d->ar_long[q] > 0 && d->ar_long_after[q] > 0;
  ao->collective_wait_long_s = lng ? d->ar_long[q] : 0;
  ao->collective_wait_long_after_s = lng ? d->ar_long_after[q] : 0;
  /* the options' asynchronous wait is beyond alpha-beta (as busy_s is), but
   * allreduce.N.async_s is the probe's whole time per collective: less the
   * alpha of its 1-element all-reduce on N devices, which the prediction adds
   * to every collective (charged twice before: MLP 2x2 by hand 1.30x) */
  ao->collective_async_s = host > 1 && q >= 0 ? async_beyond_alpha(d, q) : 0;
  int64_t span = 1;
  for (int a = ts_mesh_rank(m) - 1; a >= 0; a--) {
    span *= ts_mesh_axis_size(m, a);
    bool inside = span <= d->devices_per_host;
    if (in_host) in_host[a] = inside;
    ao->axis_bytes_per_s[a] = inside ? hbw : d->net_bytes_per_s;
    ao->axis_latency_s[a] = inside ? hlat : d->net_latency_s;
    ao->axis_between_hosts[a] = !inside; /* its asynchronous collectives: the between-hosts in-line limit */
  }
  device_process_options(d, m, ao);
}

void device_process_options(const device_desc *d, const ts_mesh *m, ts_auto_shard_options *ao) {
  int P = d->processes;
  int64_t ndev = ts_mesh_num_devices(m);
  /* not measured for P (or one process): today's prediction, every group one process's */
  if (P < 2 || P > DEV_PROC_MAX || ndev % P != 0 || !(d->pr_bw[P] > 0 && d->pr_lat[P] > 0 && d->pr_busy[P] > 0))
    return;
  int64_t span = 1, per_proc = ndev / P; /* devices numbered process-major, as under mpirun */
  for (int a = ts_mesh_rank(m) - 1; a >= 0; a--) {
    span *= ts_mesh_axis_size(m, a);
    if (span <= per_proc || ao->axis_between_hosts[a]) continue; /* in one process, or across hosts */
    ao->axis_between_processes[a] = true;
    ao->axis_bytes_per_s[a] = d->pr_bw[P];
    ao->axis_latency_s[a] = d->pr_lat[P];
  }
  ao->process_wait_s = d->pr_busy[P];
  ao->process_wait_after_s = d->pr_after[P];
  ao->process_step_wait_s = d->pr_swait[P];
  ao->process_cached_bytes_per_s = d->pr_cbw[P];
  /* devices of at most one thread each taking turns on the host's cores */
  if (d->per_core && d->cores > 0) ao->process_core_share = fmin(1, (double)d->cores / (double)ndev);
  if (per_proc == 1 && d->pr_step[P] > 0) ao->step_overhead_s = d->pr_step[P]; /* one device each: no in-process hand-off */
}

int device_parse_processes(const char *cmd, const char *v, int64_t ndev, int *processes) {
  char *end;
  long p = v ? strtol(v, &end, 10) : 1;
  if (v && (end == v || *end || p < 1 || p > TS_MAX_DEVICES)) {
    cli_error(cmd, "--processes '%s': not a count of processes 1..%d", v, TS_MAX_DEVICES);
    return -1;
  }
  if (ndev % p != 0) {
    cli_error(cmd, "--processes %ld: the mesh's %lld devices do not spread evenly over %ld processes", p,
              (long long)ndev, p);
    return -1;
  }
  *processes = (int)p;
  return 0;
}
