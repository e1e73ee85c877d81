/* train_mesh.c — shardings for `tessel train --mesh data=4,model=2`: data
 * parallel on "data", the Megatron MLP layout on "model". */
#include "train_mesh.h"

#include <string.h>

/* True when name is param or param + "." + optimizer-state suffix. */
static bool is_param(const char *name, const char *param) {
  size_t n = strlen(param);
  return strncmp(name, param, n) == 0 && (name[n] == '\0' || name[n] == '.');
}

static int mark(ts_graph *g, const ts_mesh *m, ts_tensor t, int dim, int axis) {
  int rank = ts_tensor_rank(g, t);
  ts_partition_spec s;
  if (ts_partition_spec_init(&s, rank) < 0) return -1;
  if (axis >= 0 && dim < rank && ts_partition_spec_add_axis(&s, dim, axis) < 0) return -1;
  ts_sharding *sh = ts_sharding_new(m, &s, rank);
  if (!sh) return -1;
  ts_clear_sharding(g, t);
  int rc = ts_mark_sharding(g, t, sh);
  ts_sharding_free(sh);
  return rc;
}

int train_mesh_mark(ts_graph *g, const ts_mesh *m, bool megatron) {
  int data = -1, model = -1;
  for (int a = 0; a < ts_mesh_rank(m); a++) {
    const char *n = ts_mesh_axis_name(m, a);
    if (n && strcmp(n, "data") == 0) data = a;
    if (n && strcmp(n, "model") == 0) model = a;
  }
  if (!megatron) model = -1;
  for (int i = 0; i < ts_graph_num_inputs(g); i++) {
    ts_tensor t = ts_graph_input(g, i);
    const char *name = ts_input_name(g, t);
    int dim = 0, axis = -1;
    if (strcmp(name, "x") == 0 || strcmp(name, "y") == 0) {
      axis = data; /* batch */
    } else if (model >= 0 && (is_param(name, "fc1.weight") || is_param(name, "fc1.bias"))) {
      axis = model; /* column-parallel: output features */
    } else if (model >= 0 && is_param(name, "fc2.weight")) {
      axis = model; /* row-parallel: input features */
      dim = 1;
    }
    if (mark(g, m, t, dim, axis) < 0) return -1;
  }
  return 0;
}
