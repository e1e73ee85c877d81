/* loader_place.c — where the loader's batch goes: the sharding of each input
 * (x, y, mask), the devices of this process, the block of every input on each
 * of them, and the batch rows this process decodes (all of them in
 * TS_LOAD_GLOBAL, only its devices' span in TS_LOAD_MINIBATCH). */
#include <stdlib.h>
#include <string.h>

#include "loader_internal.h"
#include "util/error.h" /* set_error */

const char *ld_shape_text(const ts_loader *l, int k) {
  if (k == IN_MASK || (k == IN_Y && !l->tokens)) return "(B)";
  return l->tokens ? "(B, T)" : "(B, C, H, W)";
}

static int ld_set_sharding(ts_loader *l, int k, const ts_sharding *sh) {
  ld_input *in = &l->in[k];
  if (in->sh) return set_error("loader: two shardings given for input '%s'", ld_in_names[k]);
  if (ts_sharding_rank(sh) != in->rank)
    return set_error("loader: the sharding for input '%s' has rank %d but %s %s is rank %d", ld_in_names[k],
                        ts_sharding_rank(sh), ld_in_names[k], ld_shape_text(l, k), in->rank);
  if (ts_sharding_num_devices(sh) != ts_mesh_num_devices(l->o.mesh))
    return set_error("loader: the sharding for input '%s' is over %lld devices but the mesh has %lld",
                        ld_in_names[k], (long long)ts_sharding_num_devices(sh),
                        (long long)ts_mesh_num_devices(l->o.mesh));
  in->sh = sh;
  return 0;
}

/* A rank-1 sharding splitting dim 0 like dim 0 of `from`. */
static ts_sharding *ld_batch_sharding(const ts_sharding *from) {
  const ts_partition_spec *fs = ts_sharding_spec(from);
  ts_partition_spec s;
  ts_partition_spec_init(&s, 1);
  for (int a = 0; a < fs->naxes[0]; a++) ts_partition_spec_add_axis(&s, 0, fs->axes[0][a]);
  return ts_sharding_new(ts_sharding_mesh(from), &s, 1);
}

int ld_setup_shardings(ts_loader *l) {
  const ts_loader_options *o = &l->o;
  if (!o->mesh) {
    if (o->n_inputs > 0) return set_error("loader: %d input sharding(s) given but no mesh", o->n_inputs);
    return 0;
  }
  if (o->n_inputs <= 0 || !o->inputs)
    return set_error("loader: a mesh is given but no input shardings (give x and y, or one spec for x)");
  if (o->n_inputs == 1 && !o->inputs[0].name) {
    if (!o->inputs[0].sharding) return set_error("loader: input sharding 0 is NULL");
    if (ld_set_sharding(l, IN_X, o->inputs[0].sharding) < 0) return -1;
    if (l->tokens) l->in[IN_Y].sh = o->inputs[0].sharding; /* y (B, T) is cut like x (B, T) */
    for (int k = l->tokens ? IN_MASK : IN_Y; k <= IN_MASK; k++) {
      if (!(l->in[k].own = ld_batch_sharding(o->inputs[0].sharding))) return -1;
      l->in[k].sh = l->in[k].own;
    }
    return 0;
  }
  for (int i = 0; i < o->n_inputs; i++) {
    const char *nm = o->inputs[i].name;
    int k = -1;
    for (int j = 0; j < N_IN && nm; j++)
      if (strcmp(nm, ld_in_names[j]) == 0) k = j;
    if (k < 0)
      return set_error("loader: input sharding %d is for '%s', which is not one of the loader's inputs "
                          "x, y, mask", i, nm ? nm : "(NULL name)");
    if (!o->inputs[i].sharding) return set_error("loader: the sharding for input '%s' is NULL", nm);
    if (ld_set_sharding(l, k, o->inputs[i].sharding) < 0) return -1;
  }
  for (int k = IN_X; k <= IN_Y; k++)
    if (!l->in[k].sh)
      return set_error("loader: no sharding for input '%s' (the loader's inputs are x %s, y %s and mask (B); "
                          "give x and y, or one spec for x)", ld_in_names[k], ld_shape_text(l, IN_X),
                          ld_shape_text(l, IN_Y));
  if (!l->in[IN_MASK].sh) { /* y's; over tokens, y (B, T)'s batch dim */
    if (!l->tokens) l->in[IN_MASK].sh = l->in[IN_Y].sh;
    else if (!(l->in[IN_MASK].sh = l->in[IN_MASK].own = ld_batch_sharding(l->in[IN_Y].sh))) return -1;
  }
  return 0;
}

/* The devices the runtime gives process p of P when N devices are shared
 * out (ts_client_options.total_devices): as evenly as possible, the first
 * N % P processes taking one more, numbered process-major. */
static void ld_process_devices(int64_t N, int P, int p, int64_t *first, int64_t *count) {
  int64_t q = N / P, r = N % P;
  *first = p * q + (p < r ? p : r);
  *count = q + (p < r ? 1 : 0);
}

/* Batch rows [*lo, *hi) of input `in`'s block on device `dev`. */
static int ld_block_rows(const ld_input *in, int dev, int64_t *lo, int64_t *hi) {
  if (!in->sh) {
    *lo = 0, *hi = in->shape[0];
    return 0;
  }
  int64_t s[TS_MAX_RANK], e[TS_MAX_RANK];
  if (ts_sharding_shard_range(in->sh, in->shape, dev, s, e) < 0) return -1;
  *lo = s[0], *hi = e[0];
  return 0;
}

/* Minibatch mode: the batch divides over the processes and into full blocks,
 * and every process's rows are the span of its devices' batch blocks. The
 * spans of all processes are checked (not only this one's) so that every
 * process reaches the same verdict. */
static int ld_setup_minibatch(ts_loader *l) {
  const ts_loader_options *o = &l->o;
  int P = o->process_count, p = o->process_index;
  int64_t N = o->mesh ? ts_mesh_num_devices(o->mesh) : 1, B = l->B;
  if (B % P != 0)
    return set_error("loader: minibatch mode: the global batch %lld does not divide over %d processes",
                        (long long)B, P);
  for (int k = 0; k < N_IN; k++) {
    const ld_input *in = &l->in[k];
    int64_t T = in->sh ? ts_sharding_num_tiles(in->sh, 0) : 1;
    if (B % T == 0) continue;
    if (N % P != 0)
      return set_error("loader: minibatch mode: the global batch %lld does not divide into the %lld batch "
                          "blocks of input '%s' (every device's block of the batch must be full)",
                          (long long)B, (long long)T, ld_in_names[k]);
    int64_t tiles = 0; /* distinct batch blocks among local devices */
    for (int d = 0; d < l->nlocal; d++) {
      bool seen = false;
      for (int e = 0; e < d && !seen; e++) seen = in->start[e][0] == in->start[d][0];
      tiles += !seen;
    }
    return set_error("loader: minibatch mode: the per-process batch %lld (global %lld over %d processes) "
                        "does not divide by the %lld local devices splitting the batch of input '%s'",
                        (long long)(B / P), (long long)B, P, (long long)tiles, ld_in_names[k]);
  }
  for (int q = 0; q < P; q++) {
    int64_t first, count, lo = B, hi = 0;
    ld_process_devices(N, P, q, &first, &count);
    for (int k = 0; k < N_IN; k++) {
      int64_t klo = B, khi = 0;
      for (int64_t dev = first; dev < first + count; dev++) {
        int64_t s, e;
        if (ld_block_rows(&l->in[k], (int)dev, &s, &e) < 0) return -1;
        if (e <= s) continue;
        klo = s < klo ? s : klo;
        khi = e > khi ? e : khi;
      }
      /* Every process decoding the whole batch is global mode in disguise:
       * most likely a batch dim left unsharded (a replicated mask) or sharded
       * over an axis within the processes. */
      if (P > 1 && klo == 0 && khi == B)
        return set_error("loader: minibatch mode: process %d needs batch rows [0, %lld) of input '%s' (the "
                            "whole batch) for its devices %lld..%lld; shard the batch dim over the devices in "
                            "process order or use TS_LOAD_GLOBAL",
                            q, (long long)B, ld_in_names[k], (long long)first, (long long)(first + count - 1));
      lo = klo < lo ? klo : lo;
      hi = khi > hi ? khi : hi;
    }
    if (P > 1 && lo == 0 && hi == B)
      return set_error("loader: minibatch mode: process %d needs batch rows [0, %lld) of x, y and mask "
                          "together (the whole batch) for its devices %lld..%lld; shard the batch dim of every "
                          "input alike, or use TS_LOAD_GLOBAL",
                          q, (long long)B, (long long)first, (long long)(first + count - 1));
    if (q == p) {
      l->row_start = lo < hi ? lo : 0;
      l->rows = lo < hi ? hi - lo : 0;
    }
  }
  return 0;
}

/* Local devices, the block of every input on each, and this process's rows. */
int ld_setup_placement(ts_loader *l) {
  const ts_loader_options *o = &l->o;
  int P = o->process_count, p = o->process_index;
  int64_t N = o->mesh ? ts_mesh_num_devices(o->mesh) : 1;
  if (P < 1 || p < 0 || p >= P)
    return set_error("loader: process index %d of %d processes is not valid", p, P);
  if (N < P)
    return set_error("loader: the mesh's %lld devices are fewer than the %d processes (every process needs "
                        "at least one)", (long long)N, P);
  int64_t first, count;
  ld_process_devices(N, P, p, &first, &count);
  l->nlocal = (int)count;
  l->local_ids = calloc((size_t)l->nlocal, sizeof *l->local_ids);
  if (!l->local_ids) return set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
  for (int d = 0; d < l->nlocal; d++) l->local_ids[d] = (int)(first + d);

  for (int k = 0; k < N_IN; k++) {
    ld_input *in = &l->in[k];
    in->start = calloc((size_t)l->nlocal, sizeof *in->start);
    in->limit = calloc((size_t)l->nlocal, sizeof *in->limit);
    in->alias = calloc((size_t)l->nlocal, sizeof *in->alias);
    if (!in->start || !in->limit || !in->alias) return set_error_code(TS_ERR_OUT_OF_MEMORY, "loader: out of memory");
    for (int d = 0; d < l->nlocal; d++) {
      if (in->sh) {
        if (ts_sharding_shard_range(in->sh, in->shape, l->local_ids[d], in->start[d], in->limit[d]) < 0)
          return -1;
      } else {
        for (int j = 0; j < in->rank; j++) in->start[d][j] = 0, in->limit[d][j] = in->shape[j];
      }
    }
    if (in->sh) {
      if (ts_sharding_shard_shape(in->sh, in->shape, in->shard_shape) < 0) return -1;
    } else {
      memcpy(in->shard_shape, in->shape, sizeof in->shape);
    }
    in->shard_bytes = (size_t)ts_shape_numel(in->rank, in->shard_shape) * ts_dtype_size(in->dt);
  }

  if (o->mode == TS_LOAD_GLOBAL) {
    l->row_start = 0;
    l->rows = l->B;
  } else if (o->mode == TS_LOAD_MINIBATCH) {
    if (ld_setup_minibatch(l) < 0) return -1;
  } else {
    return set_error("loader: unknown load mode %d", (int)o->mode);
  }
  /* A block that is exactly this process's rows is handed out without a copy. */
  for (int k = 0; k < N_IN; k++) {
    ld_input *in = &l->in[k];
    for (int d = 0; d < l->nlocal; d++) {
      bool whole = in->start[d][0] == l->row_start && in->limit[d][0] == l->row_start + l->rows &&
                   in->shard_shape[0] == l->rows;
      for (int j = 1; j < in->rank; j++)
        whole = whole && in->start[d][j] == 0 && in->limit[d][j] == in->shape[j] &&
                in->shard_shape[j] == in->shape[j];
      in->alias[d] = whole;
    }
  }
  return 0;
}
