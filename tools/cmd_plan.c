
/* cmd_plan.c — `tessel plan`: a pod-scale what-if without the pod. Builds the
 * training step of a model for a mesh of any size (up to 4096 devices here,
 * TS_MAX_DEVICES), marks the hand layout of `tessel train --mesh` (or lets
 * the auto-sharding solver choose, --auto-shard) and prints the cost model's
 * prediction per device: compute, communication (bytes and time), step time
 * and peak memory, against a device description (--device FILE). Nothing is
 * allocated per device and nothing runs. */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "model_graph.h"
#include "train_mesh.h"
#include "tessel/tessel.h"
#include "util/clock.h" /* util_now_s */

#define CMD "plan"

static const char *const model_names[] = {"mlp", "cnn", "resnet20", "resnet18", "resnet50", "gpt", NULL};

/* A device description (docs: devices/README.md). */
typedef struct {
  char name[128];
  double flops_f32, flops_bf16, bytes_per_s, memory_bytes;
  double host_bytes_per_s, host_latency_s;   /* links between devices of one host */
  double net_bytes_per_s, net_latency_s;     /* links between hosts */
  int devices_per_host;
} device_desc;

/* The defaults: the cost model's own (tessel/spmd.h), one CPU host. */
static void device_default(device_desc *d) {
  *d = (device_desc){.flops_f32 = 2e10, .flops_bf16 = 2e10, .bytes_per_s = 1e10, .memory_bytes = 8e9,
                     .host_bytes_per_s = 5e9, .host_latency_s = 5e-6, .net_bytes_per_s = 1.25e9,
                     .net_latency_s = 2e-5, .devices_per_host = 4096};
  snprintf(d->name, sizeof d->name, "the cost model's defaults (an estimate for a CPU core, not calibrated)");
}

/* "key = value" lines, '#' comments; unknown keys are errors naming them. */
static int device_read(const char *path, device_desc *d) {
  FILE *f = fopen(path, "r");
  if (!f) {
    cli_error(CMD, "--device %s: cannot open it", path);
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
          cli_error(CMD, "--device %s:%d: not 'key = value': %s", path, ln, line);
          rc = -1;
          break;
        }
      continue;
    }
    for (size_t k = strlen(val); k > 0 && (val[k - 1] == ' ' || val[k - 1] == '\t' || val[k - 1] == '\r'); k--)
      val[k - 1] = '\0';
    if (strcmp(key, "name") == 0) {
      snprintf(d->name, sizeof d->name, "%s", val);
      continue;
    }
    char *end;
    double x = strtod(val, &end);
    if (*end || !(x > 0)) {
      cli_error(CMD, "--device %s:%d: %s = '%s' is not a positive number", path, ln, key, val);
      rc = -1;
      break;
    }
    struct { const char *k; double *v; } keys[] = {
        {"flops_per_s.f32", &d->flops_f32},       {"flops_per_s.bf16", &d->flops_bf16},
        {"memory_bytes_per_s", &d->bytes_per_s},   {"memory_bytes", &d->memory_bytes},
        {"host_link_bytes_per_s", &d->host_bytes_per_s}, {"host_link_latency_s", &d->host_latency_s},
        {"net_link_bytes_per_s", &d->net_bytes_per_s},   {"net_link_latency_s", &d->net_latency_s}};
    bool found = false;
    for (size_t k = 0; k < sizeof keys / sizeof *keys && !found; k++)
      if (strcmp(key, keys[k].k) == 0) *keys[k].v = x, found = true;
    if (!found && strcmp(key, "devices_per_host") == 0) d->devices_per_host = (int)x, found = true;
    if (!found) {
      cli_error(CMD, "--device %s:%d: unknown key '%s' (valid: name, flops_per_s.f32, flops_per_s.bf16, "
                     "memory_bytes_per_s, memory_bytes, host_link_bytes_per_s, host_link_latency_s, "
                     "net_link_bytes_per_s, net_link_latency_s, devices_per_host)", path, ln, key);
      rc = -1;
    }
  }
  fclose(f);
  return rc;
}


/* ---- --calibrate FILE: a device description measured here ---- */

/* The least time of `reps` runs of g (inputs zero-filled f32) on client c. */
static double time_graph(ts_client *c, ts_graph *g, bool replicas, int reps) {
  ts_executable *e = ts_compile(c, g, &(ts_compile_options){.replicas = replicas});
  if (!e) return -1;
  int n_in = ts_graph_num_inputs(g), n_out = ts_graph_num_outputs(g);
  ts_buffer *in[4] = {0}, *out[4] = {0};
  double best = -1;
  for (int i = 0; i < n_in && i < 4; i++) {
    ts_tensor t = ts_graph_input(g, i);
    int r = ts_tensor_rank(g, t);
    const int64_t *sh = ts_tensor_shape(g, t);
    int64_t ne = 1;
    for (int d = 0; d < r; d++) ne *= sh[d];
    in[i] = ts_buffer_new(c, TS_F32, r, sh);
    float *z = calloc((size_t)ne, sizeof *z);
    if (!in[i] || !z || ts_buffer_write(in[i], z, (size_t)ne * sizeof *z) < 0) {
      free(z);
      goto done;
    }
    free(z);
  }
  for (int k = 0; k < reps + 2; k++) {
    double t0 = util_now_s();
    if (ts_execute(e, in, out) < 0) goto done;
    double t = util_now_s() - t0;
    for (int o = 0; o < n_out && o < 4; o++) ts_buffer_free(out[o]), out[o] = NULL;
    if (k >= 2 && (best < 0 || t < best)) best = t; /* two warm-up runs */
  }
done:
  for (int i = 0; i < 4; i++) ts_buffer_free(in[i]);
  ts_executable_free(e);
  return best;
}

static int calibrate(const char *path) {
  const int64_t n = 1024, big = 4 << 20;
  double tm = -1, te = -1, ts = -1, tb = -1;
  ts_client *c1 = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  ts_graph *g = ts_graph_new();
  if (c1 && g) {
    int64_t sh[2] = {n, n};
    ts_graph_add_output(g, ts_matmul(g, ts_input(g, "a", TS_F32, 2, sh), ts_input(g, "b", TS_F32, 2, sh)));
    tm = time_graph(c1, g, false, 5);
  }
  ts_graph_free(g);
  g = ts_graph_new();
  if (c1 && g) {
    ts_graph_add_output(g, ts_add(g, ts_input(g, "a", TS_F32, 1, &big), ts_input(g, "b", TS_F32, 1, &big)));
    te = time_graph(c1, g, false, 5);
  }
  ts_graph_free(g);
  ts_client_free(c1);
  /* in-process all-reduce between 2 devices: a 1-element one (latency) and a 16 MiB one */
  ts_client *c2 = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 2});
  for (int k = 0; k < 2 && c2; k++) {
    int64_t len = k == 0 ? 1 : big;
    g = ts_graph_new();
    if (!g) break;
    ts_graph_add_output(g, ts_replica_all_reduce(g, ts_input(g, "x", TS_F32, 1, &len), TS_REDUCE_SUM));
    *(k == 0 ? &ts : &tb) = time_graph(c2, g, true, 10);
    ts_graph_free(g);
  }
  ts_client_free(c2);
  if (tm <= 0 || te <= 0 || ts <= 0 || tb <= 0) {
    cli_error(CMD, "--calibrate: a measurement failed: %s", ts_last_error());
    return -1;
  }
  /* the cost model's all-reduce on 2 devices: 2 * log2(2) latencies + 2 * bytes * (1/2) / bandwidth */
  double alpha = ts / 2, bw = (double)big * 4 / fmax(tb - ts, 1e-9);
  FILE *f = fopen(path, "w");
  if (!f) {
    cli_error(CMD, "--calibrate %s: cannot write it", path);
    return -1;
  }
  long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
  fprintf(f, "# tessel device description measured by `tessel plan --calibrate` (one virtual CPU device =\n"
             "# one core; best of several runs; a busy machine gives low numbers: rerun when quiet)\n"
             "name = CPU virtual device (calibrated here)\n"
             "flops_per_s.f32 = %.4g   # 1024^3 f32 matmul on one core\n"
             "flops_per_s.bf16 = %.4g\n"
             "memory_bytes_per_s = %.4g   # f32 add of 4 Mi elements (3 x 16 MiB moved)\n"
             "memory_bytes = %.4g\n"
             "host_link_bytes_per_s = %.4g   # in-process all-reduce, 2 devices, 16 MiB\n"
             "host_link_latency_s = %.4g   # in-process all-reduce of 1 element, / 2 steps\n"
             "net_link_bytes_per_s = 1.25e9   # not measured: 10 Gb/s Ethernet\n"
             "net_link_latency_s = 2e-5   # not measured\n"
             "devices_per_host = %ld\n",
          2.0 * (double)(n * n * n) / tm, 2.0 * (double)(n * n * n) / tm, 3.0 * (double)big * 4 / te,
          (double)pages * (double)psz, bw, alpha, sysconf(_SC_NPROCESSORS_ONLN));
  fclose(f);
  printf("calibrated: matmul %.3g FLOP/s, memory %.3g B/s, all-reduce latency %.3g s, bandwidth %.3g B/s -> %s\n",
         2.0 * (double)(n * n * n) / tm, 3.0 * (double)big * 4 / te, alpha, bw, path);
  return 0;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessel plan --mesh AXIS=N,... [flags]\n"
          "\n"
          "Predicts a training step on a mesh of any size (up to 4096 devices) without running\n"
          "it: per device compute, communication, step time and peak memory, by the cost model\n"
          "of auto-sharding, for the hand layout of 'tessel train --mesh' (the batch on 'data',\n"
          "the MLP Megatron-split on 'model', weights on 'fsdp') or the solver's (--auto-shard).\n"
          "\n"
          "flags (defaults in brackets):\n"
          "  --model mlp|cnn|resnet20|resnet18|resnet50|gpt  [mlp] (gpt: 6 layers, d_model 256, seq 128)\n"
          "  --batch B                global batch [8 x devices]\n"
          "  --optimizer sgd|adamw    [adamw]\n"
          "  --mesh AXIS=N,...        the mesh, e.g. data=64,model=8 (required)\n"
          "  --auto-shard             the solver chooses the shardings (any axis names)\n"
          "  --time-limit S           the solver's time limit [10]\n"
          "  --device FILE            device description (devices/*.txt: FLOP/s per dtype, memory,\n"
          "                           link bandwidth and latency inside a host and between\n"
          "                           hosts, devices per host) [the cost model's defaults]\n"
          "  --json                   one JSON object instead of text\n"
          "  --calibrate FILE         measure this machine (matmul, memory bandwidth, in-process\n"
          "                           all-reduce latency and bandwidth) into a device file; no plan\n"
          "  -h, --help               this text\n");
}

int ts_cmd_plan(int argc, char **argv) {
  int model = 0, optimizer = 1;
  int64_t batch = 0;
  const char *mesh_text = NULL, *device = NULL;
  bool auto_shard = false, json = false;
  double time_limit = 0;
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    int r;
    int64_t n = 0;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      usage(stdout);
      return CLI_EXIT_OK;
    }
    if (strcmp(argv[i], "--auto-shard") == 0 || strcmp(argv[i], "--json") == 0) {
      *(argv[i][2] == 'a' ? &auto_shard : &json) = true;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--model", &v)) != 0) {
      if (r < 0 || cli_parse_choice(CMD, "--model", v, "model", model_names, &model) < 0) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--optimizer", &v)) != 0) {
      static const char *const optims[] = {"sgd", "adamw", NULL};
      if (r < 0 || cli_parse_choice(CMD, "--optimizer", v, "optimizer", optims, &optimizer) < 0) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--batch", &v)) != 0) {
      if (r < 0 || cli_parse_int(CMD, "--batch", v, 1, INT32_MAX, "a positive integer", &n) < 0) return CLI_EXIT_USAGE;
      batch = n;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--time-limit", &v)) != 0) {
      if (r < 0 || cli_parse_double(CMD, "--time-limit", v, 1e-6, 3600, "seconds", &time_limit) < 0)
        return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--mesh", &v)) != 0) {
      if (r < 0) return CLI_EXIT_USAGE;
      mesh_text = v;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--calibrate", &v)) != 0) {
      if (r < 0) return CLI_EXIT_USAGE;
      return calibrate(v) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return CLI_EXIT_USAGE;
      device = v;
      continue;
    }
    cli_error(CMD, "unknown %s '%s' (see 'tessel plan --help')", argv[i][0] == '-' ? "flag" : "argument", argv[i]);
    return CLI_EXIT_USAGE;
  }
  if (!mesh_text) {
    cli_error(CMD, "--mesh is required (e.g. --mesh data=64,model=8)");
    return CLI_EXIT_USAGE;
  }
  device_desc dd;
  device_default(&dd);
  if (device && device_read(device, &dd) < 0) return CLI_EXIT_USAGE;
  ts_mesh *m = ts_mesh_from_text(mesh_text);
  if (!m || train_mesh_check_axes(CMD, m, model == 0 || model == MODEL_GRAPH_GPT, auto_shard) < 0) {
    cli_error(CMD, "--mesh %s: %s", mesh_text, ts_last_error());
    ts_mesh_free(m);
    return CLI_EXIT_USAGE;
  }
  int64_t ndev = ts_mesh_num_devices(m);
  if (batch == 0) batch = 8 * ndev;
  bool natural = model == MODEL_GRAPH_RESNET18 || model == MODEL_GRAPH_RESNET50;
  int hw = model == MODEL_GRAPH_RESNET50 ? 224 : natural ? 32 : 28;
  model_graph_spec gs = {.model = model, .batch = batch, .c = natural ? 3 : 1, .h = hw, .w = hw,
                         .classes = model == MODEL_GRAPH_RESNET50 ? 1000 : 10,
                         .optim = {.kind = optimizer == 0 ? TS_OPTIM_SGD : TS_OPTIM_ADAMW, .momentum = 0.9,
                                   .weight_decay = optimizer == 0 ? 0.0 : 0.01}};
  if (model == MODEL_GRAPH_GPT) /* tessel train --model gpt's defaults: 6 layers, d_model 256, 4 heads, seq 128, vocab 256 */
    gs.gpt = (ts_gpt_config){.layers = 6, .d_model = 256, .heads = 4, .seq = 128, .vocab = 256, .mesh = auto_shard ? NULL : m},
    gs.optim = (ts_optim_config){.kind = TS_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1,
                                 .clip_norm = 1.0, .decay_matrices_only = true};
  ts_params *p = ts_params_new(0);
  ts_graph *g = p ? model_train_graph(&gs, p) : NULL;
  int rc = -1;
  ts_auto_shard_info info = {0};
  ts_auto_shard_options ao = {.mesh = m, .time_limit_s = time_limit, .flops_per_s = dd.flops_f32,
                              .bytes_per_s = dd.bytes_per_s};
  /* an axis's links: inside a host when it and the axes minor to it span at most a host's devices */
  int64_t span = 1;
  bool in_host[TS_MESH_MAX_RANK] = {0};
  for (int a = ts_mesh_rank(m) - 1; a >= 0; a--) {
    span *= ts_mesh_axis_size(m, a);
    bool inside = in_host[a] = span <= dd.devices_per_host;
    ao.axis_bytes_per_s[a] = inside ? dd.host_bytes_per_s : dd.net_bytes_per_s;
    ao.axis_latency_s[a] = inside ? dd.host_latency_s : dd.net_latency_s;
  }
  if (!g) goto done;
  if (!auto_shard && train_mesh_mark(g, m, model == 0) < 0) goto done;
  if ((auto_shard ? ts_auto_shard(g, &ao, &info, NULL) : ts_shard_predict(g, &ao, &info)) < 0) goto done;
  bool fits = info.peak_bytes_per_device <= dd.memory_bytes;
  if (json) {
    printf("{\"model\":\"%s\",\"batch\":%lld,\"mesh\":\"%s\",\"devices\":%lld,\"layout\":\"%s\",\"device\":\"%s\","
           "\"predicted\":{\"step_ms\":%.6g,\"compute_ms\":%.6g,\"comm_ms\":%.6g,\"comm_bytes_per_device\":%.0f,"
           "\"peak_bytes_per_device\":%.0f,\"fits\":%s}",
           model_names[model], (long long)batch, mesh_text, (long long)ndev, auto_shard ? "auto" : "hand", dd.name,
           1e3 * info.step_s, 1e3 * info.compute_s, 1e3 * info.comm_s, info.comm_bytes_per_device,
           info.peak_bytes_per_device, fits ? "true" : "false");
    if (auto_shard)
      printf(",\"solver\":{\"method\":\"%s\",\"optimal\":%s,\"solve_s\":%.4f}", info.greedy ? "greedy" : "ilp",
             info.optimal ? "true" : "false", info.solve_s);
    printf("}\n");
  } else {
    printf("tessel plan: %s training step, batch %lld, mesh %s (%lld devices), %s layout\n", model_names[model],
           (long long)batch, mesh_text, (long long)ndev, auto_shard ? "auto-sharded" : "hand");
    printf("device: %s\n", dd.name);
    for (int a = 0; a < ts_mesh_rank(m); a++)
      printf("  axis %s (%lld): %s links, %.3g GB/s, %.3g us\n", ts_mesh_axis_name(m, a),
             (long long)ts_mesh_axis_size(m, a),
             in_host[a] ? "in-host" : "between-host",
             ao.axis_bytes_per_s[a] / 1e9, ao.axis_latency_s[a] * 1e6);
    if (auto_shard)
      printf("solver: %s in %.3f s\n", info.greedy ? "greedy plan (time limit)" : info.optimal ? "ILP optimal" : "ILP feasible",
             info.solve_s);
    printf("predicted per device and step: %.3f ms = compute %.3f ms + communication %.3f ms (%.0f bytes sent, no "
           "overlap)\n", 1e3 * info.step_s, 1e3 * info.compute_s, 1e3 * info.comm_s, info.comm_bytes_per_device);
    printf("peak memory per device: %.1f MiB of %.1f MiB: %s\n", info.peak_bytes_per_device / 1048576.0,
           dd.memory_bytes / 1048576.0, fits ? "fits" : "DOES NOT FIT");
  }
  rc = 0;
done:
  if (rc < 0) cli_error(CMD, "%s", ts_last_error());
  ts_graph_free(g);
  ts_params_free(p);
  ts_mesh_free(m);
  return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
