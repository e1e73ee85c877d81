/* tessel/spmd.h — device meshes, partition specs and shardings (the SPMD
 * annotations of PyTorch/XLA's Mesh and mark_sharding).
 *
 * A mesh arranges N devices in an n-d grid with optional axis names; a
 * partition spec says, for each tensor dim, which mesh axes split it (none:
 * replicated; several: split over their product, major to minor); a sharding
 * is the spec resolved on a mesh into XLA's tile assignment, printable as the
 * OpSharding text PyTorch/XLA shows (`{devices=[2,1,2]0,1,2,3
 * last_tile_dim_replicate}`). Mesh axes a spec does not use replicate the
 * tensor (partial replication). */
#ifndef TESSEL_SPMD_H
#define TESSEL_SPMD_H

#include "tessel/core.h"
#include "tessel/graph.h" /* ts_graph, ts_tensor, ts_reduce_kind */

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

#define TS_MESH_MAX_RANK 8
#define TS_MESH_MAX_NAME 32 /* bytes of an axis name, with its terminating NUL */

/* ---- meshes ---- */

typedef struct ts_mesh ts_mesh;

/* A mesh of shape (shape[0], ..., shape[rank-1]), rank 1..8, every size >= 1.
 * axis_names: rank unique non-empty names (no ',', '+', spaces, not "None"),
 * or NULL for an unnamed mesh (axes referenced by index only). device_ids:
 * ndevices ids laid out row-major over the mesh, a permutation of 0..N-1
 * where N = product of shape; NULL means 0..N-1 (ndevices is then ignored). */
ts_mesh *ts_mesh_new(int rank, const int64_t *shape, const char *const *axis_names,
                     int64_t ndevices, const int *device_ids);
/* Meshes from ts_mesh_new, ts_mesh_parse and ts_mesh_from_text are the
 * caller's (ts_mesh_free). Nothing keeps a pointer to a mesh passed to it
 * (shardings copy it; ts_compile and ts_loader_new read it during the call),
 * so it may be freed at any time. Names and ids returned by the queries
 * below are borrowed from the mesh. */
/* The same from CLI text: shape "2,4", names "data,model" or NULL, device ids
 * "0,1,2,3,4,5,6,7" or NULL. Errors name the text that is wrong. */
ts_mesh *ts_mesh_parse(const char *shape, const char *axis_names, const char *device_ids);
void ts_mesh_free(ts_mesh *m);
/* The CLI's one-string form "data=4,model=2" (named axes with sizes, major
 * first); errors name the part that is wrong. */
ts_mesh *ts_mesh_from_text(const char *text);

int ts_mesh_rank(const ts_mesh *m);
/* Size of mesh axis `axis` (0 if out of range). */
int64_t ts_mesh_axis_size(const ts_mesh *m, int axis);
/* Number of devices N (the product of the shape). */
int64_t ts_mesh_num_devices(const ts_mesh *m);
/* Name of axis `axis`, or NULL for an unnamed mesh or a bad index. */
const char *ts_mesh_axis_name(const ts_mesh *m, int axis);
/* Index of the axis called `name`; -1 (error set) if there is none. */
int ts_mesh_axis_index(const ts_mesh *m, const char *name);
/* The N device ids in row-major mesh order (the logical mesh, flattened). */
const int *ts_mesh_device_ids(const ts_mesh *m);

/* ---- partition specs ---- */

/* One entry per tensor dim: naxes[d] mesh axis indices (0 = replicated, "None"),
 * major to minor. A plain value; check it against a mesh with ts_sharding_new. */
typedef struct {
  int rank;                                   /* number of entries (tensor rank) */
  int naxes[TS_MAX_RANK];                     /* per entry: how many mesh axes */
  int axes[TS_MAX_RANK][TS_MESH_MAX_RANK];    /* per entry: mesh axis indices */
} ts_partition_spec;

/* A spec of `rank` replicated entries (rank 0..TS_MAX_RANK); returns 0 or -1. */
int ts_partition_spec_init(ts_partition_spec *spec, int rank);
/* Appends mesh axis `mesh_axis` to entry `dim` (a second call makes a tuple:
 * the dim is split over both axes, the first one major). */
int ts_partition_spec_add_axis(ts_partition_spec *spec, int dim, int mesh_axis);
/* Parses "data+model,None,1": comma-separated entries, each `None` or mesh
 * axes (names of m, or indices) joined by '+'; "" is the rank-0 spec. Unknown
 * names, bad indices and an axis used twice are errors. */
int ts_partition_spec_parse(const ts_mesh *m, const char *text, ts_partition_spec *out);

/* ---- shardings ---- */

typedef struct ts_sharding ts_sharding;

/* The sharding of a rank-`rank` tensor given by `spec` on mesh `m` (copied: the
 * sharding does not keep m); the caller's: ts_sharding_free. Fails when spec has a different number of entries
 * ("partition spec has 3 entries but the tensor is rank 2"), names an axis the
 * mesh lacks, or uses an axis twice. Rank 0 and 1-device meshes: replicated. */
ts_sharding *ts_sharding_new(const ts_mesh *m, const ts_partition_spec *spec, int rank);
void ts_sharding_free(ts_sharding *s);

/* XLA's OpSharding text as torch_xla._XLAC._get_xla_sharding_spec prints it:
 * "{replicated}", "{devices=[2,2]0,2,1,3}" or "{devices=[2,1,2]0,1,2,3
 * last_tile_dim_replicate}". malloc'd; free() it. NULL on allocation failure. */
char *ts_sharding_to_string(const ts_sharding *s);

/* Tensor rank; true when every device holds the whole tensor. */
int ts_sharding_rank(const ts_sharding *s);
bool ts_sharding_is_replicated(const ts_sharding *s);
/* Number of blocks tensor dim `dim` is cut into (1 if not split). */
int64_t ts_sharding_num_tiles(const ts_sharding *s, int dim);
/* Devices holding each block (N / number of blocks; N when replicated). */
int64_t ts_sharding_replication(const ts_sharding *s);
int64_t ts_sharding_num_devices(const ts_sharding *s);
/* The tile assignment: N device ids, row-major over (tiles of dim 0, ...,
 * tiles of dim rank-1, replicas), each replica group sorted ascending. */
const int *ts_sharding_tile_devices(const ts_sharding *s);
/* The spec it was made from, and the mesh (a copy owned by the sharding):
 * borrowed, like ts_sharding_tile_devices, until the sharding is freed. */
const ts_partition_spec *ts_sharding_spec(const ts_sharding *s);
const ts_mesh *ts_sharding_mesh(const ts_sharding *s);
/* Same tile assignment and replication (the OpSharding texts are equal). */
bool ts_sharding_equal(const ts_sharding *a, const ts_sharding *b);

/* Block of the tensor `shape` (rank dims) that device `device` holds: per dim
 * [start, limit). Blocks have ceil(dim / tiles) elements, the last ones
 * shorter or empty (padded on the right); start is clamped to dim. */
int ts_sharding_shard_range(const ts_sharding *s, const int64_t *shape, int device,
                            int64_t *start, int64_t *limit);
/* The padded per-device block shape: ceil(shape[d] / tiles of d). */
int ts_sharding_shard_shape(const ts_sharding *s, const int64_t *shape, int64_t *out);
/* Block coordinates of `device` (rank values) and its replica number within its
 * group (0..replication-1); -1 (error set) if the device is not in the mesh. */
int ts_sharding_device_tile(const ts_sharding *s, int device, int64_t *tile, int64_t *replica);

/* A text picture of which device holds which block of a tensor of `shape`:
 * a grid of boxes labelled with device lists for rank <= 2, one line per
 * device with its index ranges for rank > 2. malloc'd; free() it. */
char *ts_sharding_visualize(const ts_sharding *s, const int64_t *shape);

/* ---- annotations (PyTorch/XLA's xs.mark_sharding) ----
 * Records that tensor t of g must have sharding s (copied) in every program
 * compiled from g; propagation never changes it. Marking a tensor that
 * already has a different sharding is an error until ts_clear_sharding;
 * marking it with an equal one is a no-op. The sharding's rank must be t's. */
struct ts_graph;
int ts_mark_sharding(struct ts_graph *g, int32_t t, const ts_sharding *s);
int ts_clear_sharding(struct ts_graph *g, int32_t t);
/* The annotation of t (borrowed from g: valid until it is cleared, replaced
 * or g is freed), or NULL. */
const ts_sharding *ts_tensor_sharding(const struct ts_graph *g, int32_t t);

/* ---- replica programs (classic data parallel, DDP) ----
 * A graph compiled with ts_compile_options.replicas is one replica's
 * program: every device of the client runs it whole on its own buffers (no
 * sharding; an input buffer holds each device's own copy: with one device per
 * process, the process's replica). ts_replica_all_reduce is the only thing
 * that joins the replicas: x reduced (sum / max / min / mean) over every
 * device, the same result on each, in a fixed order (deterministic). Using
 * it in a program compiled without `replicas` is a compile error. */
int32_t ts_replica_all_reduce(struct ts_graph *g, int32_t x, ts_reduce_kind kind);

/* ---- manual regions (JAX's shard_map) ----
 * Inside a manual region the program sees each device's block of its inputs
 * and calls the collectives itself over chosen mesh axes; the partitioner
 * leaves it as written. ts_shard_map appends, for every input in[i], its
 * local block under in_sh[i] (dims must divide evenly), calls body with the
 * local tensors (every node body builds is per-device), and turns each
 * local result local_out[k] back into a global tensor laid out as
 * out_sh[k] (global dims = local dims x blocks), returned in out[k]. The
 * shardings must share one mesh. Manual regions are not differentiable
 * (ts_grad reports the op). Returns 0 or -1. */
typedef int (*ts_shard_map_fn)(struct ts_graph *g, const int32_t *local_in, int32_t *local_out, void *user);
int ts_shard_map(struct ts_graph *g, int n_in, const int32_t *in, const ts_sharding *const *in_sh, int n_out,
                 const ts_sharding *const *out_sh, ts_shard_map_fn body, void *user, int32_t *out);
/* Collectives inside a manual region, over the mesh axes axes[0..n_axes)
 * (major first) of mesh m: sum (or max/min/mean) of x over the group; the
 * concatenation of the group's x along dim; the group's sum of x, of which
 * each member keeps its block of dim (dim divisible by the group size). */
int32_t ts_manual_all_reduce(struct ts_graph *g, int32_t x, ts_reduce_kind kind, const ts_mesh *m, int n_axes,
                             const int *axes);
int32_t ts_manual_all_gather(struct ts_graph *g, int32_t x, int dim, const ts_mesh *m, int n_axes, const int *axes);
int32_t ts_manual_reduce_scatter(struct ts_graph *g, int32_t x, int dim, const ts_mesh *m, int n_axes,
                                 const int *axes);

/* A copy of s (the caller's: ts_sharding_free). */
ts_sharding *ts_sharding_clone(const ts_sharding *s);

/* ---- auto-sharding (PyTorch/XLA's XLA_AUTO_SPMD; XLA's auto_sharding pass) ----
 * Chooses the shardings of a whole training step on a mesh: per node a list
 * of strategies (dot_general: batch / row / column / contracting splits on
 * each mesh axis and pairs, the contracting ones with an all-reduce;
 * elementwise ops follow their operand; convolutions: batch / output
 * channel; reductions; gather: rows or vocabulary), resharding costs on the
 * edges (all-gather / all-to-all bytes, an alpha-beta model per mesh axis),
 * compute cost from FLOPs and bytes divided by the devices that split the
 * work, and per-device bytes; an integer linear program over one-hot choices
 * (GLPK's MIP) picks the cheapest plan whose modeled per-device peak fits
 * memory_limit_bytes. Nodes the user marked keep their sharding. The cost
 * model's constants are the options' (defaults documented below; an
 * estimate for one CPU core per virtual device, not a measurement). */
/* Op names ts_auto_shard_info.ops keeps apart. */
#define TS_PREDICT_MAX_OPS 48
/* Kernel classes of the cost model (each its own calibrated throughput). */
typedef enum {
  TS_KERNEL_MATMUL_SMALL,     /* dot_general of < 2^24 FLOPs per device */
  TS_KERNEL_MATMUL,           /* larger dot_general */
  TS_KERNEL_CONV,             /* convolution forward */
  TS_KERNEL_CONV_BWD_DATA,
  TS_KERNEL_CONV_BWD_FILTER,
  TS_KERNEL_ELEMENTWISE,      /* elementwise, fused chains, layout ops: bytes */
  TS_KERNEL_REDUCE,           /* reductions: bytes */
  TS_KERNEL_GATHER,           /* gather / scatter-add: bytes */
  TS_KERNEL_OPTIMIZER,        /* the (fused) parameter update: bytes */
  TS_KERNEL_BROADCAST,        /* elementwise kernels reading a broadcast operand (bias, scale): bytes */
  TS_KERNEL_POOL,             /* pooling and its gradient: bytes */
  TS_KERNEL_ATTENTION,        /* causal attention and its gradient: FLOPs */
  TS_KERNEL_BROADCAST_ROWS,   /* fused kernels broadcasting along the last dim (a row bias): bytes */
  TS_KERNEL_TRANSCENDENTAL,   /* computed per element: exp / erf / tanh / log / GELU (fused or not), RNG: bytes */
  /* the three convolution classes with NHWC activations (the ResNets'): oneDNN
   * runs them on the caller's buffers, no reorders, 1.4-1.6x the NCHW FLOP
   * rate; unset (0), the NCHW class's rate */
  TS_KERNEL_CONV_NHWC,
  TS_KERNEL_CONV_BWD_DATA_NHWC,
  TS_KERNEL_CONV_BWD_FILTER_NHWC,
  TS_KERNEL_CLASSES
} ts_kernel_class;

typedef struct {
  const ts_mesh *mesh;       /* required */
  double time_limit_s;       /* the MIP's time limit (0: 10 s); past it the greedy plan is used (info.greedy) */
  double memory_limit_bytes; /* per-device peak the plan must fit (0: none) */
  bool greedy_only;          /* skip the ILP */
  double flops_per_s;        /* per device (0: 2e10) */
  double bytes_per_s;        /* memory bandwidth per device, elementwise ops (0: 1e10) */
  double link_bytes_per_s;   /* collective bandwidth per device and mesh axis (0: 5e9) */
  double link_latency_s;     /* per collective step (0: 5e-6) */
  /* per mesh axis (major first), overriding the two above where > 0: a
   * device description's links (an axis inside a host vs across hosts) */
  double axis_bytes_per_s[TS_MESH_MAX_RANK];
  double axis_latency_s[TS_MESH_MAX_RANK];
  /* per mesh axis: it spans hosts (the device description's devices_per_host).
   * A collective over such an axis runs in line (blocking) only up to the
   * between-hosts limit (64 KiB, TESSEL_COMM_INLINE_BYTES), as comm/ does;
   * false: within one host (8 MiB) */
  bool axis_between_hosts[TS_MESH_MAX_RANK];
  /* calibrated throughput per kernel class (ts_kernel_class; contractions in
   * FLOP/s, the others in bytes read + written per second), per device, where
   * > 0; else flops_per_s / bytes_per_s. op_overhead_s: a fixed cost per
   * kernel run (0: none). Filled from a calibration or device file by the CLI
   * (tessel plan --calibrate; docs/ARCHITECTURE.md "Calibration"). */
  double kernel_per_s[TS_KERNEL_CLASSES];
  double op_overhead_s;
  /* a fused kernel reading several broadcast operands (a batch norm's mean,
   * scale, shift): seconds per result element per broadcast operand beyond
   * the first (measured: kernel.broadcast.operand_s, a batch norm's
   * (x - m) r g + b and ReLU against a bias add and ReLU of the same shape;
   * 0: none) */
  double broadcast_operand_s;
  /* a dot_general also streams its operands and result (packing them into
   * the GEMM's blocks): one moving more than 256 KiB per device
   * (AS_DOT_STREAM_BYTES) is priced at kernel_per_s[TS_KERNEL_MATMUL] on its
   * FLOPs plus those bytes over this, per device (measured:
   * kernel.matmul.bytes_per_s, a 16-row layer against the large matmul; a
   * data-parallel MLP's per-device batch of 16-64 rows ran 1.5-3x slower per
   * FLOP than the large matmul). 0: none */
  double matmul_bytes_per_s;
  /* a convolution also moves its weight (oneDNN reorders it into the
   * primitive's blocked layout, and the filter gradient back): per kind
   * (0 conv2d, 1 conv2d_bwd_data, 2 conv2d_bwd_filter) the node is priced at
   * its class's FLOP rate plus the weight's bytes (the filter gradient's: its
   * result's) over this, per device (measured: kernel.conv.weight_bytes_per_s
   * and the two gradients', a (4,4,4,512) NHWC 3x3 conv of 512 -> 512
   * channels, its forward, then with each gradient, against the FLOP rates;
   * ResNet-18 at batch 4, 8 devices' per-device batch, ran its 512-channel
   * convs 2.4x slower per FLOP than its 64-channel ones). ts_predict_program
   * adds it; the solver does not (src/autoshard/autoshard.h says why). 0: none */
  double conv_weight_bytes_per_s[3];
  /* a memory-bound kernel (bytes units) moving at most cache_bytes per
   * device finds its operands in the cache: kernel_cached_per_s[class] where
   * > 0 in place of kernel_per_s (measured: kernel.CLASS.cached, the class's
   * probe at an in-cache size; the class probes run out of the cache, and
   * the MLP's 1-3 MB updates, slices and concatenates ran 2x their rates).
   * 0: none */
  double cache_bytes;
  double kernel_cached_per_s[TS_KERNEL_CLASSES];
  double step_overhead_s;    /* a fixed cost per step (starting the devices' programs; 0: none) */
  /* per kernel large enough to run on several threads (a device with more
   * than one: 32768 elements or more), its fork and join in place of
   * op_overhead_s (0: op_overhead_s) */
  double parallel_overhead_s;
  /* a collective's wait for the last device of its group beyond its alpha-beta
   * time, when it follows compute (measured: allreduce.N.busy_s, a collective
   * between kernels against back to back; devices sharing cores arrive late);
   * ts_predict_program adds it to every collective (0: none) */
  double collective_wait_s;
  /* devices sharing cores meet later the more each computes between two
   * collectives: a blocking collective (in line on the device thread) waits
   * at least collective_wait_long_s * min(1, c / collective_wait_long_after_s),
   * c the device's compute since its previous collective (measured:
   * allreduce.N.busy_long_s, the wait between 512^3 matmuls, and their time per
   * collective with N devices, allreduce.N.busy_long_after_s; 8 devices on 2
   * cores: 0.29-0.31 ms after 0.16 ms of one device's compute alone,
   * 0.46-0.55 after 0.55, 0.56-0.70 after 1.3, bench/collective_wait.c).
   * ts_predict_program only; the solver charges collective_wait_s. 0: none */
  double collective_wait_long_s;
  double collective_wait_long_after_s;
  /* a collective started asynchronously (run by the device's collective
   * worker beside its kernels): the worker's time for it beyond alpha-beta,
   * in place of collective_wait_s for those (measured: allreduce.N.async_s,
   * a chain of tiny matmuls with an asynchronous 1-element all-reduce after
   * each against without, so the worker running them one after another is
   * what the chain waits for; devices sharing the cores: every worker of the
   * group must be scheduled, a round trip per collective). 0: collective_wait_s.
   * ts_predict_program (and the solver) run one of at most 8 MiB (64 KiB
   * over an axis_between_hosts; TESSEL_COMM_INLINE_BYTES) in line, blocking,
   * when the worker is idle, as the runtime does. */
  double collective_async_s;
  /* Repeated blocks (transformer layers, ResNet blocks): a node of the same
   * op, dtypes, operand and result shapes and attributes as an earlier one
   * shares its variable (an input: when its first user does, at the same
   * operand), so the solver chooses one block and every copy takes that
   * choice. true: solve every node on its own (slower; for comparison). */
  bool untie_repeated;
  /* Processes of one host (tessel inspect/plan --processes; tools/devfile.c):
   * per mesh axis, whether it spans processes (the mesh's devices numbered
   * process-major, as under mpirun). A collective over such an axis waits
   * process_wait_s for the group's last process in place of
   * collective_wait_s / collective_async_s (measured: allreduce.procsP.busy_s,
   * P processes under mpirun running a chain of matmuls with a 1-element
   * all-reduce after each, against without), scaled by the device's compute
   * since its previous collective over process_wait_after_s (the probe's
   * compute per collective) when that is less: processes taking turns on the
   * cores fall behind each other by about the compute between two meetings.
   * The step's first collective over processes waits process_step_wait_s
   * instead when > 0 (measured: allreduce.procsP.step_wait_s, runs of one
   * matmul and a 1-element all-reduce against the matmul alone: the
   * processes drift apart between two runs). 0: no process axis, today's
   * prediction. */
  bool axis_between_processes[TS_MESH_MAX_RANK];
  double process_wait_s;
  double process_wait_after_s;
  double process_step_wait_s;
  /* over such an axis, a collective moving at most cache_bytes per device
   * at this bandwidth in place of axis_bytes_per_s (its buffers are in the
   * cache: allreduce.procsP.cached_bytes_per_s, 1 MiB per process). 0: none */
  double process_cached_bytes_per_s;
  /* each device's share of a core when the host's processes take turns on
   * its cores (cores / devices of the host, at most 1; 0: not known). Below
   * 1, a synchronized step's turns make it ceil(1/share) times a device's
   * compute alone, not the 1/share its compute is priced at: the step's
   * first collective over processes waits that excess, (ceil(1/share) share
   * - 1) times the device's compute since its previous one (the step
   * wrapped around), at most process_step_wait_s (the probe's measured
   * wait). Set by tools/devfile.c from the calibration's cores. */
  double process_core_share;
} ts_auto_shard_options;

typedef struct {
  double step_s;                /* predicted step time: compute + communication (no overlap) */
  double compute_s, comm_s;     /* per device */
  double comm_bytes_per_device; /* bytes each device sends per step */
  double peak_bytes_per_device; /* modeled peak: inputs + live activations (full liveness sweep) */
  double objective_s;           /* the solver's objective (what the ILP minimized) */
  double solve_s;               /* wall time of the solve */
  bool greedy;                  /* the greedy plan was used (time limit, or greedy_only) */
  bool optimal;                 /* GLPK proved the plan optimal */
  int nodes, variables, edges;  /* the ILP's size after graph shrinking */
  double arena_bytes;           /* ts_predict_program: the memory plan's temporaries (0 otherwise) */
  double input_bytes;           /* ts_predict_program: per-device inputs (parameters, state, batch) */
  double class_s[TS_KERNEL_CLASSES]; /* ts_predict_program: compute seconds per kernel class (overheads included) */
  int kernels;                  /* ts_predict_program: kernels device 0 runs per step (collectives apart) */
  /* ts_predict_program: compute seconds (overheads included) and kernels per
   * op name, the name a trace (ts_trace_*) gives the kernel ("dot_general",
   * "fused", "layer_norm", ...: static strings), in order of first use; names
   * past TS_PREDICT_MAX_OPS are summed in the last entry, named "other" */
  struct { const char *name; double s; int count; } ops[TS_PREDICT_MAX_OPS];
  int n_ops;
} ts_auto_shard_info;

/* Marks g's nodes (not constants) with the chosen shardings (in place;
 * user marks stay) and fills info (may be NULL). explain (may be NULL) gets
 * a malloc'd text: each parameter's sharding, the prediction, and for the
 * largest tensors the runner-up's cost. A memory limit nothing can meet is
 * an error giving the smallest achievable modeled peak. Returns 0 or -1. */
int ts_auto_shard(struct ts_graph *g, const ts_auto_shard_options *o, ts_auto_shard_info *info, char **explain);
/* The same prediction for the shardings g already has (propagated from its
 * annotations, as ts_compile would; per node the strategy the partitioner
 * applies to those layouts): info filled, g unchanged. */
int ts_shard_predict(const struct ts_graph *g, const ts_auto_shard_options *o, ts_auto_shard_info *info);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
