/* train_mesh.c — shardings for `tessel train --mesh data=4,model=2`: data
 * parallel on "data", the Megatron MLP layout on "model", FSDP (parameters
 * and optimizer state sharded, gathered where used) on "fsdp". */
#include "train_mesh.h"

#include <math.h>   // INFINITY
#include <stdio.h>
#include <string.h>
#include <sys/resource.h> // getrlimit: ulimit -v
#include <unistd.h>       // sysconf

#include "util/error.h" // set_error

/* True when name is param or param + "." + optimizer-state suffix. */
static bool is_param(const char *name, const char *param) {
  size_t n = strlen(param);
  return strncmp(name, param, n) == 0 && (name[n] == '\0' || name[n] == '.');
}

/* The GPT's Megatron layout (names as nanoGPT's, optimizer state alike):
 * the dim of parameter `name` split over "model", or -1. c_attn (3, C, C)
 * and mlp.c_fc (4C, C) column-parallel (by heads / output features), both
 * c_proj row-parallel (input features), wte on the vocabulary (the embedding
 * lookup and the tied head's logits); norms, other biases and wpe whole. */
static int gpt_model_dim(const char *name) {
  static const struct {
    const char *suffix;
    int dim;
  } rules[] = {{".attn.c_attn.weight", 1}, {".attn.c_attn.bias", 1}, {".attn.c_proj.weight", 1},
               {".mlp.c_fc.weight", 0},    {".mlp.c_fc.bias", 0},    {".mlp.c_proj.weight", 1}};
  if (is_param(name, "transformer.wte.weight")) return 0;
  if (strncmp(name, "transformer.h.", 14) != 0) return -1;
  const char *rest = strchr(name + 14, '.'); /* after the block number */
  for (size_t k = 0; rest && k < sizeof rules / sizeof *rules; k++)
    if (is_param(rest, rules[k].suffix)) return rules[k].dim;
  return -1;
}

static int axis_named(const ts_mesh *m, const char *name) {
  for (int a = 0; a < ts_mesh_rank(m); a++) {
    const char *n = ts_mesh_axis_name(m, a);
    if (n && strcmp(n, name) == 0) return a;
  }
  return -1;
}

/* Marks t with dims[k] split over axes[k] (k < n; axis < 0 = none). */
static int mark(ts_graph *g, const ts_mesh *m, ts_tensor t, int n, const int *dims, const int *axes) {
  int rank = ts_tensor_rank(g, t);
  ts_partition_spec s;
  if (ts_partition_spec_init(&s, rank) < 0) return -1;
  for (int k = 0; k < n; k++)
    if (axes[k] >= 0 && dims[k] < rank && ts_partition_spec_add_axis(&s, dims[k], axes[k]) < 0) return -1;
  ts_sharding *sh = ts_sharding_new(m, &s, rank);
  if (!sh) return -1;
  ts_clear_sharding(g, t);
  int rc = ts_mark_sharding(g, t, sh);
  ts_sharding_free(sh);
  return rc;
}

/* An optimizer state input (AdamW's exp_avg / exp_avg_sq, SGD's
 * momentum_buffer: "<param>.<suffix>", src/nn/optim.c) of a weight (rank >= 2:
 * biases weigh too little to be worth two collectives). */
static bool is_update_state(ts_graph *g, ts_tensor t, const char *name) {
  static const char *const suffix[] = {".exp_avg", ".exp_avg_sq", ".momentum_buffer"};
  size_t n = strlen(name);
  for (int k = 0; k < 3; k++) {
    size_t s = strlen(suffix[k]);
    if (n > s && strcmp(name + n - s, suffix[k]) == 0) return ts_tensor_rank(g, t) >= 2;
  }
  return false;
}

/* The dim of an optimizer state the "data" axis splits: the first that
 * divides evenly; -1 when none does or the axis has one device. */
static int state_dim(ts_graph *g, const ts_mesh *m, ts_tensor t, int data) {
  int64_t k = data >= 0 ? ts_mesh_axis_size(m, data) : 1;
  for (int d = 0; k > 1 && d < ts_tensor_rank(g, t); d++)
    if (ts_tensor_shape(g, t)[d] % k == 0) return d;
  return -1;
}

static int mark_inputs(ts_graph *g, const ts_mesh *m, bool megatron, bool shard_update) {
  int data = axis_named(m, "data"), model = megatron ? axis_named(m, "model") : -1, fsdp = axis_named(m, "fsdp");
  for (int i = 0; i < ts_graph_num_inputs(g); i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    int dims[2] = {0, 0}, axes[2] = {-1, -1}, n = 0;
    if (strcmp(name, "x") == 0 || strcmp(name, "y") == 0) {
      dims[0] = dims[1] = 0; /* batch: over data, then fsdp (major first) */
      axes[n++] = data;
      axes[n++] = fsdp;
    } else if (ts_tensor_rank(g, t) > 0) {
      int used = -1; /* the dim the model axis splits */
      if (model >= 0 && (is_param(name, "fc1.weight") || is_param(name, "fc1.bias"))) {
        used = 0; /* column-parallel: output features */
      } else if (model >= 0 && is_param(name, "fc2.weight")) {
        used = 1; /* row-parallel: input features */
      } else if (model >= 0) {
        used = gpt_model_dim(name);
      }
      if (used >= 0) dims[n] = used, axes[n++] = model;
      /* FSDP: the first other dim that divides evenly over the fsdp axis;
       * biases (rank 1) stay whole: gathering them costs more than they weigh,
       * and a split bias would pull the activations onto its layout */
      for (int d = 0; fsdp >= 0 && ts_tensor_rank(g, t) > 1 && d < ts_tensor_rank(g, t); d++)
        if (d != used && ts_tensor_shape(g, t)[d] % ts_mesh_axis_size(m, fsdp) == 0) {
          dims[n] = d, axes[n++] = fsdp;
          break;
        }
    }
    if (shard_update && n == 0 && is_update_state(g, t, name)) { /* weight-update sharding on "data" (ZeRO-1) */
      int d = state_dim(g, m, t, data);
      if (d >= 0) dims[n] = d, axes[n++] = data;
    }
    if (mark(g, m, t, n, dims, axes) < 0) return -1;
  }
  return 0;
}

int train_mesh_mark(ts_graph *g, const ts_mesh *m, bool megatron) { return mark_inputs(g, m, megatron, true); }

int train_mesh_mark_replicated_update(ts_graph *g, const ts_mesh *m, bool megatron) {
  return mark_inputs(g, m, megatron, false);
}

int train_mesh_check_axes(const char *cmd, const ts_mesh *m, bool megatron, bool placed) {
  static const char *const known[] = {"data", "model", "fsdp"};
  for (int a = 0; a < ts_mesh_rank(m); a++) {
    const char *n = ts_mesh_axis_name(m, a);
    bool ok = false;
    for (int k = 0; k < 3 && n; k++) ok = ok || strcmp(n, known[k]) == 0;
    if (!ok && !placed && !n)
      return set_error("mesh axis %d has no name; tessel shards over axes named 'data' (the batch), 'model' "
                          "(the MLP's fc1/fc2 Megatron split) and 'fsdp' (weights and optimizer state)", a);
    if (!ok && !placed)
      return set_error("mesh axis '%s' is not one tessel shards over: 'data' (the batch), 'model' (the MLP's "
                          "fc1/fc2 Megatron split) and 'fsdp' (weights and optimizer state); names are "
                          "case-sensitive, and any other axis would only replicate the model", n);
    if (ok && !megatron && strcmp(n, "model") == 0 && ts_mesh_axis_size(m, a) > 1)
      fprintf(stderr, "tessel %s: note: the CNN has no model-parallel layout; its %lld devices on axis 'model' "
                      "hold replicas\n", cmd, (long long)ts_mesh_axis_size(m, a));
  }
  return 0;
}

bool train_mesh_check_batch(const char *cmd, const ts_mesh *m, int64_t batch) {
  int64_t split = 1;
  char axes[64] = "";
  for (int a = 0; a < ts_mesh_rank(m); a++) {
    const char *n = ts_mesh_axis_name(m, a);
    if (!n || (strcmp(n, "data") != 0 && strcmp(n, "fsdp") != 0) || ts_mesh_axis_size(m, a) < 2) continue;
    split *= ts_mesh_axis_size(m, a);
    snprintf(axes + strlen(axes), sizeof axes - strlen(axes), "%s%s=%lld", *axes ? "," : "", n,
             (long long)ts_mesh_axis_size(m, a));
  }
  if (batch <= 0 || batch % split == 0) return true;
  fprintf(stderr, "tessel %s: warning: the batch of %lld does not divide over the %lld devices of %s: the partitioner "
                  "gathers the unevenly split batch back (padded to %lld rows), so every device computes every row "
                  "and nothing runs data parallel; choose a batch that %lld divides\n",
          cmd, (long long)batch, (long long)split, axes, (long long)((batch + split - 1) / split * split),
          (long long)split);
  return false;
}

/* The first number in file after `key` (NAN when absent). */
static double read_number(const char *file, const char *key) {
  FILE *f = fopen(file, "r");
  if (!f) return NAN;
  char line[256];
  double v = NAN;
  size_t n = strlen(key);
  while (isnan(v) && fgets(line, sizeof line, f))
    if (strncmp(line, key, n) == 0 && sscanf(line + n, "%lf", &v) != 1) v = NAN;
  fclose(f);
  return v;
}

/* Bytes this process may still allocate: the least of the machine's
 * available memory, the cgroup's limit and the address-space limit; *what
 * names the binding one. */
static double available_bytes(const char **what) {
  double best = INFINITY, v;
  *what = "unknown";
  if (!isnan(v = read_number("/proc/meminfo", "MemAvailable:"))) best = v * 1024, *what = "MemAvailable in /proc/meminfo";
  double max = read_number("/sys/fs/cgroup/memory.max", ""), cur = read_number("/sys/fs/cgroup/memory.current", "");
  if (!isnan(max) && !isnan(cur) && max - cur < best) best = max - cur, *what = "the cgroup's memory.max";
  struct rlimit rl;
  double vm = read_number("/proc/self/statm", "") * (double)sysconf(_SC_PAGESIZE); /* pages of address space in use */
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && !isnan(vm) && (double)rl.rlim_cur - vm < best)
    best = (double)rl.rlim_cur - vm, *what = "the address-space limit (ulimit -v)";
  return best < 0 ? 0 : best;
}

int train_mesh_check_memory(const ts_mesh *m, int local_devices, int64_t params, int states, bool megatron,
                            double *estimate) {
  int model = megatron ? axis_named(m, "model") : -1, fsdp = axis_named(m, "fsdp");
  double shards = (model >= 0 ? (double)ts_mesh_axis_size(m, model) : 1) * (fsdp >= 0 ? (double)ts_mesh_axis_size(m, fsdp) : 1);
  /* weight-update sharding splits the optimizer state over "data" too (biases aside: still a lower bound) */
  int data = axis_named(m, "data");
  double zero1 = data >= 0 ? (double)ts_mesh_axis_size(m, data) : 1;
  double state = (double)params * 4 * (2 + states / zero1) / shards; /* f32 parameters, gradients, optimizer states */
  double per_device = state + 6.0 * 1024 * 1024;
  *estimate = per_device * local_devices;
  const char *what;
  double avail = available_bytes(&what);
  if (*estimate <= avail) return 0;
  const double gib = 1024.0 * 1024 * 1024, mib = 1024.0 * 1024;
  return set_error("%d virtual devices need at least %.1f GiB here (%.1f MiB each: %lld parameters with their "
                      "gradients and %d optimizer state%s%s, plus 6 MiB of programs and activations) but %.1f GiB "
                      "is available (%s); use a smaller mesh",
                      local_devices, *estimate / gib, per_device / mib, (long long)params, states,
                      states == 1 ? "" : "s", shards > 1 ? ", sharded" : " on every device", avail / gib, what);
}
