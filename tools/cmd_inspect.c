/* cmd_inspect.c — `tessel inspect`: what tessel would run for a training
 * step, without running it. For a model, batch and device mesh it builds the
 * same training graph as `tessel train` (forward, loss, gradients, optimizer
 * update), compiles it and prints
 *   1. the global graph,
 *   2. the sharding of every node after propagation,
 *   3. every collective the partitioner inserted (kind, mesh axes, bytes,
 *      the node that caused it),
 *   4. the per-device program (device 0; the others differ only in offsets
 *      and groups) with its memory plan,
 *   5. per device: the peak bytes of the temporary arena and the constants.
 * The graph and its shardings are exactly those of `tessel train` with the
 * same flags (model_graph.c, train_mesh.c); --spec overrides an input's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "devfile.h"
#include "model_graph.h"  /* the same training graph as tessel train */
#include "train_mesh.h"
#include "util/error.h" /* set_error: errors of the --spec helper */   /* the same shardings as tessel train --mesh */
#include "tessel/tessel.h"

#define CMD "inspect"
#define MAX_SPECS 32

/* Indexed like MODEL_GRAPH_* (model_graph.h). */
static const char *const model_names[] = {"mlp", "cnn", "resnet20", "resnet18", "resnet50", "gpt", NULL};
static const char *const optim_names[] = {"sgd", "adamw", NULL};
static const char *const amp_names[] = {"none", "bf16", "f16", NULL};
static const char *const layout_names[] = {"nchw", "nhwc", NULL}; /* indexed by ts_layout */

typedef struct {
  int model, optimizer, amp;
  int layout; /* --layout: ts_layout (the resnets' activations); -1 until given */
  int64_t batch;
  ts_gpt_config gpt; /* --model gpt: --layers --d-model --heads --seq --vocab [--sequence-parallel] */
  const char *mesh, *axis_names;
  const char *specs[MAX_SPECS]; /* "input=spec" */
  int n_specs;
  bool no_graph, no_program;
  bool auto_shard, json;       /* --auto-shard, --json */
  bool analytic;               /* --analytic: the solver's global-graph model only */
  double time_limit, memory_limit; /* --time-limit S, --memory-limit BYTES */
  const char *device;              /* --device FILE: the prediction's costs */
  const char *processes_arg;       /* --processes N (NULL: 1) */
  int processes;                   /* its value, checked against the mesh */
} inspect_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: tessel inspect [flags]\n"
          "\n"
          "Shows the compiled training step of 'tessel train' without running it: the global\n"
          "graph, the shardings after propagation, the collectives with their bytes and cause,\n"
          "the per-device program and memory plan (peak bytes per device).\n"
          "\n"
          "flags (defaults in brackets):\n"
          "  --model mlp|cnn|resnet20|resnet18|resnet50  (mlp, cnn, resnet20: 1x28x28; resnet18: 3x32x32;\n"
          "                           resnet50: 3x224x224, 1000 classes) [mlp]\n"
          "  --batch B                training batch size [mlp 128, cnn 64, resnet20 128, resnet18 32, resnet50 8,\n"
          "                           gpt 16]\n"
          "  --model gpt --layers N --d-model D --heads H --seq T --vocab V\n"
          "                           the GPT of tessel train --model gpt [6, 256, 4, 128, 256]; on a\n"
          "                           mesh axis 'model' Megatron-split (heads, MLP, vocabulary)\n"
          "  --sequence-parallel      gpt: norms and residuals split on the sequence over 'model'\n"
          "  --optimizer sgd|adamw    [adamw]\n"
          "  --mesh AXIS=N,...        device mesh as in tessel train, e.g. data=4,model=2, with\n"
          "                           the same shardings: the batch on 'data', the MLP\n"
          "                           Megatron-split on 'model', weights sharded on 'fsdp'\n"
          "                           [1 device]\n"
          "  --mesh SHAPE             or a shape (4, 2,2) with --axis-names data,model\n"
          "  --axis-names NAMES       mesh axis names for --mesh SHAPE: data, model, fsdp as in\n"
          "                           tessel train, or any name that --spec uses [by index,\n"
          "                           with --spec]\n"
          "  --spec INPUT=SPEC        mark graph input INPUT (x, y, or a parameter such as\n"
          "                           fc1.weight) with partition spec SPEC, e.g. None,model;\n"
          "                           repeatable; overrides the batch default for x and y\n"
          "  --layout nchw|nhwc       the resnets' activations as tessel train --layout [nhwc]\n"
          "  --amp none|bf16|f16      mixed precision as tessel train --amp: adds a table of the\n"
          "                           compiled ops by the dtype they run in (converts included) [none]\n"
          "  --auto-shard             choose every sharding (but --spec's) with the cost model and\n"
          "                           ILP (GLPK) and explain the choice: each input's sharding, the\n"
          "                           predicted compute, communication and peak memory per device,\n"
          "                           the runner-up of the largest tensors; any axis names\n"
          "  --time-limit S           the solver's time limit; past it the greedy plan [10]\n"
          "  --memory-limit BYTES     per-device peak the plan must fit [none]\n"
          "  --device FILE            the solver's and the prediction's device description or\n"
          "                           calibration file [the calibration cache when it is this\n"
          "                           machine's, else the defaults; tessel plan --help]\n"
          "  --processes N            the mesh's devices spread over N processes of this host\n"
          "                           (mpirun -n N; process-major, N divides the devices): the\n"
          "                           collectives over axes between them priced with the\n"
          "                           calibration's allreduce.procsN.* (tessel plan --calibrate\n"
          "                           under mpirun -n N) when it has them [1]\n"
          "  --analytic               predict with the solver's model of the global graph (the\n"
          "                           same costs) instead of device 0's compiled program\n"
          "  --json                   print only the prediction and the inputs' shardings as JSON:\n"
          "                           {\"predicted\":{\"step_ms\":..,\"comm_bytes_per_device\":..,\n"
          "                           \"peak_bytes_per_device\":..},\"ops\":{OP:{\"count\":..,\"ms\":..},..},\n"
          "                           \"shardings\":{NAME:SPEC,..}} (ops: device 0's kernels per\n"
          "                           op name, as a --trace names them; not with --analytic)\n"
          "                           (for the hand layout of --mesh without --auto-shard)\n"
          "  --no-graph               leave out the global graph\n"
          "  --no-program             leave out the per-device program\n"
          "  -h, --help               this text\n");
}

static int parse_args(int argc, char **argv, inspect_opts *o) {
  *o = (inspect_opts){.model = 0, .optimizer = 1, .layout = -1,
                      .gpt = {.layers = 6, .d_model = 256, .heads = 4, .seq = 128, .vocab = 256}};
  for (int i = 1; i < argc; i++) {
    const char *v = NULL;
    int r;
    int64_t n = 0;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    if (strcmp(argv[i], "--no-graph") == 0) {
      o->no_graph = true;
      continue;
    }
    if (strcmp(argv[i], "--auto-shard") == 0 || strcmp(argv[i], "--json") == 0) {
      *(argv[i][2] == 'a' ? &o->auto_shard : &o->json) = true;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--time-limit", &v)) != 0) {
      if (r < 0 || cli_parse_double(CMD, "--time-limit", v, 1e-6, 3600, "seconds", &o->time_limit) < 0) return -1;
      continue;
    }
    if (strcmp(argv[i], "--analytic") == 0) {
      o->analytic = true;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--device", &v)) != 0) {
      if (r < 0) return -1;
      o->device = v;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--memory-limit", &v)) != 0) {
      if (r < 0 || cli_parse_double(CMD, "--memory-limit", v, 1, 1e18, "bytes per device", &o->memory_limit) < 0)
        return -1;
      continue;
    }
    if (strcmp(argv[i], "--no-program") == 0) {
      o->no_program = true;
      continue;
    }
    if (strcmp(argv[i], "--sequence-parallel") == 0) {
      o->gpt.sequence_parallel = true;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--model", &v)) != 0) {
      if (r < 0 || cli_parse_choice(CMD, "--model", v, "model", model_names, &o->model) < 0) return -1;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--amp", &v)) != 0) {
      if (r < 0 || cli_parse_choice(CMD, "--amp", v, "precision", amp_names, &o->amp) < 0) return -1;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--layout", &v)) != 0) {
      if (r < 0 || cli_parse_choice(CMD, "--layout", v, "layout", layout_names, &o->layout) < 0) return -1;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--optimizer", &v)) != 0) {
      if (r < 0 || cli_parse_choice(CMD, "--optimizer", v, "optimizer", optim_names, &o->optimizer) < 0) return -1;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--batch", &v)) != 0) {
      if (r < 0 || cli_parse_int(CMD, "--batch", v, 1, INT32_MAX, "a positive integer", &n) < 0) return -1;
      o->batch = n;
      continue;
    }
    {
      const char *gf[] = {"--layers", "--d-model", "--heads", "--seq", "--vocab"};
      int64_t *gd[] = {&o->gpt.layers, &o->gpt.d_model, &o->gpt.heads, &o->gpt.seq, &o->gpt.vocab};
      int hit = 0;
      for (int k = 0; k < 5 && !hit; k++)
        if ((hit = cli_flag(CMD, argc, argv, &i, gf[k], &v)) != 0) {
          if (hit < 0 || cli_parse_int(CMD, gf[k], v, 1, 1 << 24, "an integer in [1, 16777216]", &n) < 0) return -1;
          *gd[k] = n;
        }
      if (hit) continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--mesh", &v)) != 0) {
      if (r < 0) return -1;
      o->mesh = v;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--processes", &v)) != 0) {
      if (r < 0) return -1;
      o->processes_arg = v;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--axis-names", &v)) != 0) {
      if (r < 0) return -1;
      o->axis_names = v;
      continue;
    }
    if ((r = cli_flag(CMD, argc, argv, &i, "--spec", &v)) != 0) {
      if (r < 0) return -1;
      if (!strchr(v, '=') || o->n_specs == MAX_SPECS) {
        cli_error(CMD, "--spec: '%s' is not INPUT=SPEC (or more than %d specs)", v, MAX_SPECS);
        return -1;
      }
      o->specs[o->n_specs++] = v;
      continue;
    }
    cli_error(CMD, "unknown %s '%s' (see 'tessel inspect --help')", argv[i][0] == '-' ? "flag" : "argument",
              argv[i]);
    return -1;
  }
  if ((o->layout = model_graph_layout(o->model, model_names[o->model], o->layout)) < 0) { /* as tessel train */
    cli_error(CMD, "%s", ts_last_error());
    return -1;
  }
  static const int64_t batch[] = {128, 64, 128, 32, 8, 16}; /* tessel train's defaults */
  if (o->batch == 0) o->batch = batch[o->model];
  if (o->model == MODEL_GRAPH_GPT && !o->gpt.sequence_parallel && ts_gpt_config_check(&o->gpt) < 0) {
    cli_error(CMD, "--model gpt: %s", ts_last_error());
    return -1;
  }
  return 0;
}

/* Marks input `name` of g with `spec` on m. */
static int mark(ts_graph *g, const ts_mesh *m, const char *name, const char *spec_text) {
  ts_tensor t = ts_graph_find_input(g, name);
  if (t == TS_NONE) return set_error("--spec: the graph has no input '%s'", name);
  ts_partition_spec spec;
  if (ts_partition_spec_parse(m, spec_text, &spec) < 0) return -1;
  ts_sharding *s = ts_sharding_new(m, &spec, ts_tensor_rank(g, t));
  if (!s) return -1;
  ts_clear_sharding(g, t);
  int rc = ts_mark_sharding(g, t, s);
  ts_sharding_free(s);
  return rc;
}

/* SPEC in --spec's syntax: "data+model,None" ("" for rank 0). */
static void print_spec(const ts_graph *g, ts_tensor t) {
  const ts_sharding *sh = ts_tensor_sharding(g, t);
  const ts_partition_spec *sp = sh ? ts_sharding_spec(sh) : NULL;
  const ts_mesh *m = sh ? ts_sharding_mesh(sh) : NULL;
  putchar('"');
  for (int d = 0; d < ts_tensor_rank(g, t); d++) {
    if (d) putchar(',');
    if (!sp || sp->naxes[d] == 0) fputs("None", stdout);
    for (int k = 0; sp && k < sp->naxes[d]; k++) {
      const char *nm = ts_mesh_axis_name(m, sp->axes[d][k]);
      if (nm) printf(k ? "+%s" : "%s", nm);
      else printf(k ? "+%d" : "%d", sp->axes[d][k]);
    }
  }
  putchar('"');
}

static void print_json(const ts_graph *g, const ts_auto_shard_info *in, bool solved, const char *costs) {
  printf("{\"predicted\":{\"step_ms\":%.6g,\"compute_ms\":%.6g,\"comm_ms\":%.6g,\"comm_bytes_per_device\":%.0f,"
         "\"peak_bytes_per_device\":%.0f,\"arena_bytes\":%.0f,\"input_bytes\":%.0f},\"costs\":\"%s\"",
         1e3 * in->step_s, 1e3 * in->compute_s, 1e3 * in->comm_s, in->comm_bytes_per_device,
         in->peak_bytes_per_device, in->arena_bytes, in->input_bytes, costs);
  if (in->n_ops > 0) { /* the compiled program's kernels per op name (trace names) */
    printf(",\"ops\":{");
    for (int i = 0; i < in->n_ops; i++)
      printf("%s\"%s\":{\"count\":%d,\"ms\":%.6g}", i ? "," : "", in->ops[i].name, in->ops[i].count,
             1e3 * in->ops[i].s);
    printf("}");
  }
  if (solved)
    printf(",\"solver\":{\"method\":\"%s\",\"optimal\":%s,\"solve_s\":%.4f,\"variables\":%d,\"columns\":%d,"
           "\"objective_ms\":%.6g}", in->greedy ? "greedy" : "ilp", in->optimal ? "true" : "false", in->solve_s,
           in->nodes, in->variables, 1e3 * in->objective_s);
  printf(",\"shardings\":{");
  for (int i = 0; i < ts_graph_num_inputs(g); i++) {
    ts_tensor t = ts_graph_input(g, i);
    printf("%s\"%s\":", i ? "," : "", ts_input_name(g, t));
    print_spec(g, t);
  }
  printf("}}\n");
}

/* The prediction per op name (the names a trace gives kernels), most time first. */
static void print_ops(const ts_auto_shard_info *in) {
  int order[TS_PREDICT_MAX_OPS];
  for (int i = 0; i < in->n_ops; i++) {
    int j = i;
    for (; j > 0 && in->ops[order[j - 1]].s < in->ops[i].s; j--) order[j] = order[j - 1];
    order[j] = i;
  }
  printf("compute by op (kernels per step, ms):");
  for (int i = 0; i < in->n_ops; i++)
    printf(" %s %d %.3f%s", in->ops[order[i]].name, in->ops[order[i]].count, 1e3 * in->ops[order[i]].s,
           i + 1 < in->n_ops ? "," : "\n");
}

static void section(const char *title) { printf("\n== %s ==\n", title); }

static void print_text(char *t) {
  if (t) fputs(t, stdout);
  else printf("(not available: %s)\n", ts_last_error());
  free(t);
}

/* --amp: the compiled program's ops counted by (op, result dtype), read from
 * its text form ("%12 = conv2d(...) ... : bf16[8,16,28,28]"); the operand
 * dtypes of the contractions follow from their converts. */
/* The dtype of %id from the lines seen so far ("" when unknown). */
static const char *dt_of(char (*dts)[8], int n, long id) { return id >= 0 && id < n ? dts[id] : ""; }

/* Ops by result dtype; a node whose first operand has another float dtype
 * (autocast's bf16 filter gradient written in f32) shows as "bf16>f32". */
static void amp_table(const ts_executable *e) {
  char *t = ts_executable_to_string(e);
  if (!t) {
    printf("(not available: %s)\n", ts_last_error());
    return;
  }
  enum { MAXROWS = 128 };
  struct { char op[32], dt[16]; int n; } rows[MAXROWS];
  int nr = 0, nd = 0;
  char (*dts)[8] = NULL;
  for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] != '%') continue; /* fused programs' instructions are indented */
    const char *eq = strstr(line, " = "), *colon = strrchr(line, ':');
    if (!eq || !colon) continue;
    char op[32] = "", dt[16] = "";
    long id = strtol(line + 1, NULL, 10), a = -1;
    sscanf(eq + 3, "%31[a-z_0-9]", op);
    sscanf(colon + 1, " %7[a-z0-9]", dt);
    if (id >= nd && id < (1L << 24)) {
      char (*grown)[8] = realloc(dts, (size_t)(id + 1) * 2 * sizeof *dts);
      if (grown) {
        memset(grown + nd, 0, (size_t)((id + 1) * 2 - nd) * sizeof *grown);
        dts = grown, nd = (int)((id + 1) * 2);
      }
    }
    if (id >= 0 && id < nd) snprintf(dts[id], sizeof dts[id], "%s", dt);
    const char *paren = strchr(eq, '(');
    if (paren && paren[1] == '%') a = strtol(paren + 2, NULL, 10);
    const char *adt = dt_of(dts, nd, a);
    if (!strncmp(op, "conv2d", 6) && adt[0] && strcmp(adt, dt)) {
      char both[16];
      snprintf(both, sizeof both, "%s>%s", adt, dt);
      memcpy(dt, both, sizeof dt);
    }
    if (!strcmp(op, "input") || !strcmp(op, "constant")) continue;
    int k = 0;
    while (k < nr && (strcmp(rows[k].op, op) || strcmp(rows[k].dt, dt))) k++;
    if (k == nr && nr < MAXROWS) {
      snprintf(rows[nr].op, sizeof rows[nr].op, "%s", op);
      snprintf(rows[nr].dt, sizeof rows[nr].dt, "%s", dt);
      rows[nr++].n = 0;
    }
    if (k < nr) rows[k].n++;
  }
  free(dts);
  free(t);
  printf("%-20s %-8s %6s\n", "op", "dtype", "nodes");
  for (int k = 0; k < nr; k++) printf("%-20s %-8s %6d\n", rows[k].op, rows[k].dt, rows[k].n);
}

/* The collectives grouped: how many of each (kind, mesh axes, bytes). */
static void print_collective_summary(const ts_executable *e, const ts_mesh *m) {
  int nc = ts_executable_num_collectives(e), *seen = calloc((size_t)nc + 1, sizeof *seen);
  if (!seen) return;
  printf("%6s  %-16s %-18s %6s %12s\n", "count", "kind", "mesh axes", "group", "bytes each");
  for (int i = 0; i < nc; i++) {
    ts_collective_info a, b;
    if (seen[i] || ts_executable_collective(e, i, &a) < 0) continue;
    int count = 0;
    for (int j = i; j < nc; j++)
      if (!seen[j] && ts_executable_collective(e, j, &b) == 0 && b.kind == a.kind && b.mesh_axes == a.mesh_axes &&
          b.bytes == a.bytes)
        seen[j] = 1, count++;
    char axes[128] = "";
    size_t len = 0;
    for (int k = 0; m && k < ts_mesh_rank(m) && len < sizeof axes; k++)
      if (a.mesh_axes & (1u << k)) {
        const char *nm = ts_mesh_axis_name(m, k);
        len += (size_t)snprintf(axes + len, sizeof axes - len, "%s%s", len ? "+" : "", nm ? nm : "?");
      }
    printf("%6d  %-16s %-18s %6d %12zu\n", count, ts_collective_kind_name(a.kind), axes, a.group_size, a.bytes);
  }
  free(seen);
}

/* Bytes of the parameters and their optimizer state (every input but the
 * batch and the step scalars) that device 0 holds, and on one device. */
static void print_param_bytes(const ts_executable *e, const ts_graph *g) {
  size_t local = 0, whole = 0, replicated = 0;
  for (int i = 0; i < ts_graph_num_inputs(g); i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    static const char *const io[] = {"x", "y", "lr", "step", "seed"};
    bool skip = false;
    for (int k = 0; k < 5; k++) skip |= strcmp(name, io[k]) == 0;
    if (skip) continue;
    int rank = ts_tensor_rank(g, t);
    size_t es = ts_dtype_size(ts_tensor_dtype(g, t)), n = (size_t)ts_tensor_numel(g, t) * es;
    const ts_sharding *s = ts_executable_input_sharding(e, i);
    int64_t ls[TS_MAX_RANK];
    size_t l = n;
    if (s && ts_sharding_shard_shape(s, ts_tensor_shape(g, t), ls) == 0) {
      l = es;
      for (int d = 0; d < rank; d++) l *= (size_t)ls[d];
    }
    whole += n;
    local += l;
    if (l == n) replicated += n;
  }
  printf("per device %zu (1 device: %zu; %zu of them in tensors every device holds whole)\n", local, whole,
         replicated);
}

static int inspect(const inspect_opts *o, ts_mesh *mesh) {
  int64_t ndev = mesh ? ts_mesh_num_devices(mesh) : 1;
  ts_client_options copts = {.num_threads = 1, .num_devices = (int)ndev};
  ts_client *c = ts_client_new(&copts);
  ts_params *p = ts_params_new(0);
  bool natural = o->model == MODEL_GRAPH_RESNET18 || o->model == MODEL_GRAPH_RESNET50; /* resnet18/50: their natural input, like --dataset synthetic */
  int hw = o->model == MODEL_GRAPH_RESNET50 ? 224 : natural ? 32 : 28;
  model_graph_spec gs = {.model = o->model, .batch = o->batch, .c = natural ? 3 : 1, .h = hw, .w = hw,
                         .classes = o->model == MODEL_GRAPH_RESNET50 ? 1000 : 10,
                         .optim = {.kind = o->optimizer == 0 ? TS_OPTIM_SGD : TS_OPTIM_ADAMW, .momentum = 0.9,
                                   .weight_decay = o->optimizer == 0 ? 0.0 : 0.01},
                         .amp = o->amp == 1 ? TS_BF16 : o->amp == 2 ? TS_F16 : TS_F32,
                         .layout = (ts_layout)o->layout};
  bool gpt = o->model == MODEL_GRAPH_GPT, megatron = o->model == MODEL_GRAPH_MLP || gpt;
  if (gpt) /* tessel train --model gpt's step, on the mesh (checked there: heads, vocab, seq over 'model') */
    gs.gpt = o->gpt, gs.gpt.mesh = mesh,
    gs.optim = (ts_optim_config){.kind = TS_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1,
                                 .clip_norm = 1.0, .decay_matrices_only = true};
  ts_graph *g = c && p ? model_train_graph(&gs, p) : NULL;
  ts_executable *e = NULL;
  int rc = -1;
  if (!g) goto done;
  double need = 0;
  if (mesh && train_mesh_check_memory(mesh, (int)ndev, ts_params_trainable_numel(p), o->optimizer == 0 ? 1 : 2,
                                      megatron, &need) < 0)
    goto done;
  if (mesh) {
    if (!o->auto_shard && train_mesh_mark(g, mesh, megatron) < 0) goto done;
    for (int i = 0; i < o->n_specs; i++) {
      char name[256];
      const char *eq = strchr(o->specs[i], '=');
      snprintf(name, sizeof name, "%.*s", (int)(eq - o->specs[i]), o->specs[i]);
      if (mark(g, mesh, name, eq + 1) < 0) goto done;
    }
  }
  /* the cost model's prediction: of the solver's plan (--auto-shard), else of the hand layout */
  char *explain = NULL;
  ts_auto_shard_info info = {0};
  ts_mesh *one = NULL;
  const ts_mesh *pm = mesh;
  if (!pm) {
    int64_t n1 = 1;
    pm = one = ts_mesh_new(1, &n1, NULL, 0, NULL);
  }
  /* the solver and the prediction use one set of costs: --device, else the
   * calibration cache when it is this machine's (as tessel train --auto-shard
   * does, so this is the plan train runs), else the defaults; the prediction
   * is of device 0's compiled program (--analytic: the solver's own model) */
  device_desc dd;
  char note[1400];
  int prc = pm ? 0 : -1;
  if (o->device) {
    device_default(&dd);
    snprintf(note, sizeof note, "device file %s", o->device);
    if (device_read(CMD, o->device, &dd) < 0) prc = -1;
  } else {
    device_auto(&dd, note, sizeof note);
  }
  ts_auto_shard_options ao = {.mesh = pm, .time_limit_s = o->time_limit, .memory_limit_bytes = o->memory_limit};
  dd.processes = o->processes;
  if (pm) device_options(&dd, pm, &ao, NULL);
  if (prc == 0)
    prc = o->auto_shard ? ts_auto_shard(g, &ao, &info, o->json ? NULL : &explain) : ts_shard_predict(g, &ao, &info);
  if (prc == 0 && !o->analytic) {
    ts_auto_shard_info solver = info;
    prc = ts_predict_program(g, &ao, &(ts_compile_options){.autocast = gs.amp}, &info);
    info.greedy = solver.greedy, info.optimal = solver.optimal, info.solve_s = solver.solve_s;
    info.nodes = solver.nodes, info.variables = solver.variables, info.objective_s = solver.objective_s;
  }
  ts_mesh_free(one);
  if (prc < 0) {
    free(explain);
    goto done;
  }
  if (o->json) {
    char costs[1500];
    snprintf(costs, sizeof costs, "%s%s", note, o->analytic ? " (analytic)" : "");
    print_json(g, &info, o->auto_shard, costs);
    rc = 0;
    goto done;
  }
  ts_compile_options opts = {.mesh = mesh, .autocast = gs.amp};
  if (!(e = ts_compile(c, g, &opts))) {
    free(explain);
    goto done;
  }

  printf("tessel inspect: %s training step (%s), batch %lld, %lld device%s", model_names[o->model],
         gpt ? "adamw" : optim_names[o->optimizer], (long long)o->batch, (long long)ndev, ndev == 1 ? "" : "s");
  if (gpt && o->gpt.sequence_parallel) printf(", sequence parallel");
  if (model_graph_is_resnet(o->model))
    printf(", layout %s", layout_names[o->layout]);
  if (mesh) printf(", mesh %s%s%s", o->mesh, o->axis_names ? " " : "", o->axis_names ? o->axis_names : "");
  printf("\nglobal graph: %d nodes, %d inputs, %d outputs; %lld trainable parameters\n", ts_graph_num_nodes(g),
         ts_graph_num_inputs(g), ts_graph_num_outputs(g), (long long)ts_params_trainable_numel(p));
  section(o->auto_shard ? "auto-sharding" : "predicted by the cost model (this layout)");
  if (explain) fputs(explain, stdout);
  if (o->analytic) printf("the solver's model of the global graph (costs: %s):\n", note);
  else printf("device 0's compiled program (costs: %s):\n", note);
  printf("per device: step %.3f ms = compute %.3f ms + exposed communication %.3f ms (%.0f bytes sent), peak %.0f "
         "bytes (memory plan: %.0f bytes of temporaries + %.0f bytes of inputs)\n",
         1e3 * info.step_s, 1e3 * info.compute_s, 1e3 * info.comm_s, info.comm_bytes_per_device,
         info.peak_bytes_per_device, info.arena_bytes, info.input_bytes);
  if (!o->analytic) {
    printf("compute by kernel class (%d kernels):", info.kernels);
    for (int k = 0; k < TS_KERNEL_CLASSES; k++) /* the class's name: its calibration key less "kernel." */
      if (info.class_s[k] > 0) printf(" %s %.3f ms", dev_kernel_keys[k] + strlen("kernel."), 1e3 * info.class_s[k]);
    printf("\n");
    print_ops(&info);
  }
  free(explain);
  if (!o->no_graph) {
    section("global graph");
    print_text(ts_graph_to_string(g));
  }
  section("shardings after propagation");
  if (mesh) print_text(ts_executable_shardings_to_string(e));
  else printf("(one device: every tensor is whole on device 0)\n");
  int nc = ts_executable_num_collectives(e);
  size_t coll_bytes = 0;
  for (int i = 0; i < nc; i++) {
    ts_collective_info ci;
    if (ts_executable_collective(e, i, &ci) == 0) coll_bytes += ci.bytes;
  }
  char title[128];
  snprintf(title, sizeof title, "collectives per step: %d, %zu bytes per device", nc, coll_bytes);
  section(title);
  print_text(ts_executable_collectives_to_string(e));
  section("collectives by kind, mesh axes and bytes");
  print_collective_summary(e, mesh);
  if (!o->no_program) {
    section(mesh ? "program of device 0 (with its memory plan)"
                 : "program (with its memory plan)");
    print_text(ts_executable_to_string(e));
  }
  if (o->amp) {
    section(o->amp == 2 ? "mixed precision f16: ops by dtype (f16 is stored/rounded as f16 and computed in f32; "
                          "a convert f32->f32 node is a fused f16 rounding)"
                        : "mixed precision bf16: ops by dtype");
    amp_table(e);
  }
  section("parameters + optimizer state per device (bytes)");
  print_param_bytes(e, g);
  section("memory per device (bytes)");
  printf("%-8s %14s %14s %8s\n", "device", "peak arena", "constants", "nodes");
  for (int d = 0; d < ts_executable_num_devices(e); d++) {
    ts_device_program_info x;
    if (ts_executable_device_program(e, d, &x) < 0) goto done;
    printf("%-8d %14zu %14zu %8d\n", d, x.arena_bytes, x.const_bytes, x.nodes);
  }
  rc = 0;
done:
  if (rc < 0) cli_error(CMD, "%s", ts_last_error());
  ts_executable_free(e);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
  return rc;
}

int ts_cmd_inspect(int argc, char **argv) {
  inspect_opts o;
  int r = parse_args(argc, argv, &o);
  if (r == 1) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (r < 0) return CLI_EXIT_USAGE;
  ts_mesh *mesh = NULL;
  if (o.mesh && strchr(o.mesh, '=') && o.axis_names) {
    cli_error(CMD, "--axis-names %s: --mesh %s names its axes already; --axis-names goes with --mesh SHAPE "
                   "(e.g. --mesh 2,2 --axis-names data,model)", o.axis_names, o.mesh);
    return CLI_EXIT_USAGE;
  }
  if (o.mesh && (!(mesh = strchr(o.mesh, '=') ? ts_mesh_from_text(o.mesh)
                                               : ts_mesh_parse(o.mesh, o.axis_names, NULL)) ||
                 train_mesh_check_axes(CMD, mesh, o.model == 0 || o.model == MODEL_GRAPH_GPT, o.n_specs > 0 || o.auto_shard) < 0)) {
    cli_error(CMD, "--mesh: %s%s", ts_last_error(),
              mesh && !o.axis_names && !strchr(o.mesh, '=') ? " (name the axes with --axis-names, or place "
                                                             "tensors on them with --spec)" : "");
    ts_mesh_free(mesh);
    return CLI_EXIT_USAGE;
  }
  if (mesh && ts_mesh_num_devices(mesh) > TS_MAX_DEVICES) { /* the SHAPE form: tessel train's limit */
    cli_error(CMD, "--mesh %s: %lld devices; at most %d in all (TS_MAX_DEVICES)", o.mesh,
              (long long)ts_mesh_num_devices(mesh), TS_MAX_DEVICES);
    ts_mesh_free(mesh);
    return CLI_EXIT_USAGE;
  }
  if (!o.mesh && o.n_specs) {
    cli_error(CMD, "--spec needs --mesh");
    return CLI_EXIT_USAGE;
  }
  if (device_parse_processes(CMD, o.processes_arg, mesh ? ts_mesh_num_devices(mesh) : 1, &o.processes) < 0) {
    ts_mesh_free(mesh);
    return CLI_EXIT_USAGE;
  }
  int rc = inspect(&o, mesh);
  ts_mesh_free(mesh);
  return rc == 0 ? CLI_EXIT_OK : CLI_EXIT_FAIL;
}
