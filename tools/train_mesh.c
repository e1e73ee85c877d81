/* train_mesh.c — shardings for `tessel train --mesh data=4,model=2`: data
 * parallel on "data", the Megatron MLP layout on "model", FSDP (parameters
 * and optimizer state sharded, gathered where used) on "fsdp". */
#include "train_mesh.h"

#include <string.h>

/* True when name is param or param + "." + optimizer-state suffix. */
static bool is_param(const char *name, const char *param) {
  size_t n = strlen(param);
  return strncmp(name, param, n) == 0 && (name[n] == '\0' || name[n] == '.');
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

int train_mesh_mark(ts_graph *g, const ts_mesh *m, bool megatron) {
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
    if (mark(g, m, t, n, dims, axes) < 0) return -1;
  }
  return 0;
}
