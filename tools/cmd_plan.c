
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
#include "devfile.h"
#include "model_graph.h"
#include "train_mesh.h"
#include "tessel/tessel.h"
#include "util/clock.h" /* util_now_s */

#define CMD "plan"

static const char *const model_names[] = {"mlp", "cnn", "resnet20", "resnet18", "resnet50", "gpt", NULL};

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
          "  --layers N               the GPT's transformer blocks [6]\n"
          "  --optimizer sgd|adamw    [adamw]\n"
          "  --layout nchw|nhwc       the resnets' activations, as tessel train --layout [nhwc]\n"
          "  --mesh AXIS=N,...        the mesh, e.g. data=64,model=8 (required)\n"
          "  --auto-shard             the solver chooses the shardings (any axis names)\n"
          "  --time-limit S           the solver's time limit [10]\n"
          "  --untie                  solve every repeated block (transformer layer) on its own\n"
          "                           instead of once for all its copies (slower; to compare)\n"
          "  --device FILE            device description (devices/*.txt: FLOP/s per dtype, memory,\n"
          "                           link bandwidth and latency inside a host and between\n"
          "                           hosts, devices per host; or a calibration file)\n"
          "                           [the calibration cache when it is this machine's, else the\n"
          "                           cost model's defaults]\n"
          "  --processes N            the mesh's devices spread over N processes of this host\n"
          "                           (mpirun -n N, process-major; N divides the devices): the\n"
          "                           collectives between them priced with the calibration's\n"
          "                           allreduce.procsN.* when it has them [1]\n"
          "  --json                   one JSON object instead of text\n"
          "  --analytic               the cost model on the global graph only (the solver's view),\n"
          "                           not device 0's compiled program\n"
          "  --calibrate [FILE]       measure this machine (a few seconds: per-kernel-class\n"
          "                           throughput of one core, per-kernel overhead, in-process\n"
          "                           all-reduce alpha/beta on 2, 4, 8 devices) into FILE [the\n"
          "                           cache: $TESSEL_CALIBRATION, else $XDG_CACHE_HOME/tessel/\n"
          "                           calibration.txt, else ~/.cache/tessel/calibration.txt]; no plan\n"
          "  --rounds N               --calibrate: time the kernel classes in at least N\n"
          "                           interleaved rounds, more (up to 9) until two agree within\n"
          "                           10%%; each class the least confirmed round (1-9) [3].\n"
          "                           Launched by mpirun -n P (P >= 2, one device each): the\n"
          "                           links between the P processes alone (allreduce.procsP.*:\n"
          "                           latency_s, bytes_per_s, cached_bytes_per_s (1 MiB, in\n"
          "                           the cache), busy_s, busy_after_s, step_wait_s;\n"
          "                           step_overhead.procsP_s), merged into FILE by process 0\n"
          "  -h, --help               this text\n");
}

int ts_cmd_plan(int argc, char **argv) {
  int model = 0, optimizer = 1, layout = -1; /* layout: ts_layout; -1 until --layout */
  int64_t batch = 0;
  const char *mesh_text = NULL, *device = NULL, *processes_arg = NULL;
  bool auto_shard = false, json = false, analytic = false;
  int layers = 6;
  bool untie = false;
  double time_limit = 0;
  bool calibrating = false;
  const char *cal_path = NULL;
  int rounds = 0;
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
    if ((r = cli_flag(CMD, argc, argv, &i, "--layout", &v)) != 0) {
      static const char *const layouts[] = {"nchw", "nhwc", NULL}; /* indexed by ts_layout */
      if (r < 0 || cli_parse_choice(CMD, "--layout", v, "layout", layouts, &layout) < 0) return CLI_EXIT_USAGE;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--batch", &v)) != 0) {
      if (r < 0 || cli_parse_int(CMD, "--batch", v, 1, INT32_MAX, "a positive integer", &n) < 0) return CLI_EXIT_USAGE;
      batch = n;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--layers", &v)) != 0) {
      if (r < 0 || cli_parse_int(CMD, "--layers", v, 1, 1024, "a positive integer", &n) < 0) return CLI_EXIT_USAGE;
      layers = (int)n;
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
    if (strcmp(argv[i], "--calibrate") == 0) {
      calibrating = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') cal_path = argv[++i];
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--rounds", &v)) != 0) {
      if (r < 0 || cli_parse_int(CMD, "--rounds", v, 1, CAL_MAX_ROUNDS, "1 to 9", &n) < 0) return CLI_EXIT_USAGE;
      rounds = (int)n;
      continue;
    }
    if (strcmp(argv[i], "--analytic") == 0 || strcmp(argv[i], "--untie") == 0) {
      *(argv[i][2] == 'a' ? &analytic : &untie) = true;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return CLI_EXIT_USAGE;
      device = v;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--processes", &v)) != 0) {
      if (r < 0) return CLI_EXIT_USAGE;
      processes_arg = v;
      continue;
    }
    cli_error(CMD, "unknown %s '%s' (see 'tessel plan --help')", argv[i][0] == '-' ? "flag" : "argument", argv[i]);
    return CLI_EXIT_USAGE;
  }
  if (calibrating || rounds) {
    char buf[1024];
    const char *path = cal_path ? cal_path : calibration_path(buf, sizeof buf);
    if (!calibrating || !path) {
      cli_error(CMD, calibrating ? "--calibrate: no FILE and no cache path (TESSEL_CALIBRATION=none, or no HOME)"
                                 : "--rounds: only with --calibrate");
      return CLI_EXIT_USAGE;
    }
    return calibrate(CMD, path, rounds ? rounds : CAL_DEFAULT_ROUNDS) == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
  }
  if (!mesh_text) {
    cli_error(CMD, "--mesh is required (e.g. --mesh data=64,model=8)");
    return CLI_EXIT_USAGE;
  }
  if ((layout = model_graph_layout(model, model_names[model], layout)) < 0) { /* as tessel train / inspect */
    cli_error(CMD, "%s", ts_last_error());
    return CLI_EXIT_USAGE;
  }
  device_desc dd;
  char note[1400];
  if (device) {
    device_default(&dd);
    if (device_read(CMD, device, &dd) < 0) return CLI_EXIT_USAGE;
    snprintf(note, sizeof note, "device file %s", device);
  } else {
    device_auto(&dd, note, sizeof note);
  }
  ts_mesh *m = ts_mesh_from_text(mesh_text);
  if (!m || train_mesh_check_axes(CMD, m, model == 0 || model == MODEL_GRAPH_GPT, auto_shard) < 0) {
    cli_error(CMD, "--mesh %s: %s", mesh_text, ts_last_error());
    ts_mesh_free(m);
    return CLI_EXIT_USAGE;
  }
  int64_t ndev = ts_mesh_num_devices(m);
  if (device_parse_processes(CMD, processes_arg, ndev, &dd.processes) < 0) {
    ts_mesh_free(m);
    return CLI_EXIT_USAGE;
  }
  if (batch == 0) batch = 8 * ndev;
  bool natural = model == MODEL_GRAPH_RESNET18 || model == MODEL_GRAPH_RESNET50;
  int hw = model == MODEL_GRAPH_RESNET50 ? 224 : natural ? 32 : 28;
  model_graph_spec gs = {.model = model, .batch = batch, .c = natural ? 3 : 1, .h = hw, .w = hw,
                         .classes = model == MODEL_GRAPH_RESNET50 ? 1000 : 10,
                         .optim = {.kind = optimizer == 0 ? TS_OPTIM_SGD : TS_OPTIM_ADAMW, .momentum = 0.9,
                                   .weight_decay = optimizer == 0 ? 0.0 : 0.01},
                         .layout = (ts_layout)layout};
  if (model == MODEL_GRAPH_GPT) /* tessel train --model gpt's defaults: 6 layers, d_model 256, 4 heads, seq 128, vocab 256 */
    gs.gpt = (ts_gpt_config){.layers = layers, .d_model = 256, .heads = 4, .seq = 128, .vocab = 256, .mesh = auto_shard ? NULL : m},
    gs.optim = (ts_optim_config){.kind = TS_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1,
                                 .clip_norm = 1.0, .decay_matrices_only = true};
  ts_params *p = ts_params_new(0);
  ts_graph *g = p ? model_train_graph(&gs, p) : NULL;
  int rc = -1;
  ts_auto_shard_info info = {0};
  ts_auto_shard_options ao = {.mesh = m, .time_limit_s = time_limit, .untie_repeated = untie};
  bool in_host[TS_MESH_MAX_RANK] = {0};
  device_options(&dd, m, &ao, in_host);
  if (!g) goto done;
  if (!auto_shard && train_mesh_mark(g, m, model == 0) < 0) goto done;
  if ((auto_shard ? ts_auto_shard(g, &ao, &info, NULL) : ts_shard_predict(g, &ao, &info)) < 0) goto done;
  /* device 0's compiled program (partitioned, optimized, memory-planned; no device memory) */
  ts_auto_shard_info solver = info;
  if (!analytic && ts_predict_program(g, &ao, NULL, &info) < 0) goto done;
  info.greedy = solver.greedy, info.optimal = solver.optimal, info.solve_s = solver.solve_s;
  bool fits = info.peak_bytes_per_device <= dd.memory_bytes;
  if (json) {
    printf("{\"model\":\"%s\",\"batch\":%lld,\"mesh\":\"%s\",\"devices\":%lld,\"layout\":\"%s\",\"device\":\"%s\","
           "\"predicted\":{\"step_ms\":%.6g,\"compute_ms\":%.6g,\"comm_ms\":%.6g,\"comm_bytes_per_device\":%.0f,"
           "\"peak_bytes_per_device\":%.0f,\"arena_bytes\":%.0f,\"input_bytes\":%.0f,\"fits\":%s,\"from\":\"%s\"},"
           "\"costs\":\"%s\"",
           model_names[model], (long long)batch, mesh_text, (long long)ndev, auto_shard ? "auto" : "hand", dd.name,
           1e3 * info.step_s, 1e3 * info.compute_s, 1e3 * info.comm_s, info.comm_bytes_per_device,
           info.peak_bytes_per_device, info.arena_bytes, info.input_bytes, fits ? "true" : "false",
           analytic ? "analytic" : "program", note);
    if (auto_shard)
      printf(",\"solver\":{\"method\":\"%s\",\"optimal\":%s,\"solve_s\":%.4f}", info.greedy ? "greedy" : "ilp",
             info.optimal ? "true" : "false", info.solve_s);
    printf("}\n");
  } else {
    printf("tessel plan: %s training step, batch %lld, mesh %s (%lld devices), %s layout\n", model_names[model],
           (long long)batch, mesh_text, (long long)ndev, auto_shard ? "auto-sharded" : "hand");
    printf("device: %s\ncosts: %s\n", dd.name, note);
    for (int a = 0; a < ts_mesh_rank(m); a++)
      printf("  axis %s (%lld): %s links, %.3g GB/s, %.3g us\n", ts_mesh_axis_name(m, a),
             (long long)ts_mesh_axis_size(m, a),
             in_host[a] ? "in-host" : "between-host",
             ao.axis_bytes_per_s[a] / 1e9, ao.axis_latency_s[a] * 1e6);
    if (auto_shard)
      printf("solver: %s in %.3f s\n", info.greedy ? "greedy plan (time limit)" : info.optimal ? "ILP optimal" : "ILP feasible",
             info.solve_s);
    printf("predicted per device and step (%s): %.3f ms = compute %.3f ms + communication %.3f ms (%.0f bytes "
           "sent; %s)\n", analytic ? "global graph, analytic" : "device 0's compiled program", 1e3 * info.step_s,
           1e3 * info.compute_s, 1e3 * info.comm_s, info.comm_bytes_per_device,
           analytic ? "no overlap" : "exposed: asynchronous all-reduces overlap the compute");
    if (!analytic)
      printf("memory plan of device 0: %.1f MiB of temporaries + %.1f MiB of inputs\n", info.arena_bytes / 1048576.0,
             info.input_bytes / 1048576.0);
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
