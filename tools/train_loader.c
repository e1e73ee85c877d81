/* train_loader.c — `tessel train`'s training loader: --loader-workers
 * threads, and per-host loading (--load): under mpirun each process reads,
 * decodes and augments only the rows of the global batch its own devices
 * hold (TS_LOAD_MINIBATCH), instead of the whole batch (TS_LOAD_GLOBAL).
 * The global batch sequence is the same either way (the loader's order
 * depends only on (seed, epoch)); only who prepares which rows changes.
 *
 * SPMD: the loader cuts the blocks of the step program's own input
 * shardings of x and y, and the input buffers are laid out with them, so
 * each process uploads exactly its devices' blocks. DDP: one device per
 * process; the loader sees a "data" mesh of the processes with the batch
 * split over it, which gives process p rows [p*B/P, (p+1)*B/P): its
 * replica's share. */
#include <stdio.h>
#include <string.h>

#include "args.h" // cli_error
#include "train_run.h"

/* Index of the graph input bound to buffer b in pr (-1 if none). */
static int input_index(const program *pr, const ts_buffer *b) {
  for (int i = 0; i < pr->io.n_in; i++)
    if (pr->io.in[i] == b) return i;
  return -1;
}

/* The loader's mesh and x/y shardings for per-host loading into lo. */
static int local_shardings(train_run *r, ts_loader_options *lo, ts_input_sharding in[2]) {
  if (r->ddp) {
    const char *axis = "data";
    int64_t n = r->nproc;
    ts_partition_spec sx, sy;
    int xr = train_opts_tokens(&r->o) ? 2 : 4; /* tokens x (B, T); images x (B, C, H, W) */
    if (!(r->load_mesh = ts_mesh_new(1, &n, &axis, n, NULL)) || ts_partition_spec_init(&sx, xr) < 0 ||
        ts_partition_spec_add_axis(&sx, 0, 0) < 0 || ts_partition_spec_init(&sy, 1) < 0 ||
        ts_partition_spec_add_axis(&sy, 0, 0) < 0 || !(r->load_sh[0] = ts_sharding_new(r->load_mesh, &sx, xr)) ||
        !(r->load_sh[1] = ts_sharding_new(r->load_mesh, &sy, 1)))
      return -1;
    lo->mesh = r->load_mesh;
    in[0] = (ts_input_sharding){"x", r->load_sh[0]};
    in[1] = (ts_input_sharding){"y", r->load_sh[1]};
  } else {
    program *pr = &r->step_pr;
    int ix = input_index(pr, pr->io.x), iy = input_index(pr, pr->io.y);
    const ts_sharding *sx = ix >= 0 ? ts_executable_input_sharding(pr->exe, ix) : NULL;
    const ts_sharding *sy = iy >= 0 ? ts_executable_input_sharding(pr->exe, iy) : NULL;
    if (!sx || !sy) return -1;
    /* the buffers in the program's layout: the loader writes their blocks */
    if (ts_buffer_reshard(pr->io.x, sx) < 0 || ts_buffer_reshard(pr->io.y, sy) < 0) return -1;
    lo->mesh = r->mesh;
    in[0] = (ts_input_sharding){"x", ts_buffer_sharding(pr->io.x)};
    in[1] = (ts_input_sharding){"y", ts_buffer_sharding(pr->io.y)};
  }
  lo->n_inputs = 2;
  lo->inputs = in;
  lo->process_index = r->rank;
  lo->process_count = r->nproc;
  lo->mode = TS_LOAD_MINIBATCH;
  return 0;
}

int train_loader_new(train_run *r) {
  const train_opts *o = &r->o;
  /* a worker fills a whole batch, and only `prefetch` batches are in flight:
   * one more than the workers keeps every worker busy */
  int w = (int)o->loader_workers;
  ts_loader_options lo = {.batch = o->batch, .seed = o->seed, .prefetch = w + 1 > 3 ? w + 1 : 3, .workers = w,
                          .augment = r->train_aug};
  if (!r->train_src && !(r->train_src = ts_source_from_dataset(&r->train, train_dataset_names[o->dataset])))
    return train_lib_error();
  /* one process holds every device: global and local are the same thing */
  bool local = r->nproc > 1 && o->load != LOAD_GLOBAL && (r->ddp || r->mesh);
  ts_input_sharding in[2];
  if (local) {
    ts_loader_options ll = lo;
    if (local_shardings(r, &ll, in) < 0 || !(r->loader = ts_loader_new(r->train_src, &ll))) {
      if (o->load == LOAD_LOCAL) {
        cli_error(CMD, "--load local: %s", ts_last_error());
        return CLI_EXIT_FAIL;
      }
      /* auto: a layout where some process needs the whole batch (every
       * process reaches the same verdict) */
      printf("data: every process prepares the whole batch (per-host loading does not fit this layout: %s)\n",
             ts_last_error());
    }
  }
  if (!r->loader) {
    if (!(r->loader = ts_loader_new(r->train_src, &lo))) return train_lib_error();
  } else if (r->nproc > 1 && local)
    printf("data: per-host loading: each process reads and augments only its devices' rows of a global batch\n");
  return CLI_EXIT_OK;
}
