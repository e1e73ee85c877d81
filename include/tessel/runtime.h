/* tessel/runtime.h — clients, device buffers, compiling and executing.
 *
 * The pipeline: a ts_graph is compiled once (simplify, CSE, DCE, elementwise
 * fusion, memory plan) into a ts_executable, which is executed every step
 * with device buffers. Buffers are owned by the caller; an executable never
 * keeps a buffer passed to it. Output aliasing (ts_graph_alias_output) makes
 * an execute update an input buffer in place.
 *
 * Lifetimes: executables and buffers refer to their client: free them (and
 * any ts_params set that made buffers on it) before ts_client_free. A client
 * and everything made from it are used from one thread at a time; the client
 * runs its devices on threads of its own inside ts_execute. */
#ifndef TESSEL_RUNTIME_H
#define TESSEL_RUNTIME_H

#include "tessel/graph.h"
#include "tessel/spmd.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

typedef struct ts_client ts_client;
typedef struct ts_buffer ts_buffer;
typedef struct ts_executable ts_executable;

/* The most devices a client has, in one process or over all processes of a
 * job (options, $TESSEL_CPU_DEVICES, meshes of tessel train and inspect):
 * each CPU device is a thread with its own copy of every replicated tensor. */
#define TS_MAX_DEVICES 4096
/* The most compute threads a client may be asked for (options,
 * $TESSEL_NUM_THREADS, --threads); more than the cores are capped to them. */
#define TS_MAX_THREADS 4096

typedef struct {
  /* Compute threads used by kernels; 0 = TESSEL_NUM_THREADS if set, else all
   * cores; at most TS_MAX_THREADS. Never more threads than cores are
   * started across tessel and oneDNN together (a larger count is capped). */
  int num_threads;
  /* Virtual CPU devices in this process, each run by its own thread
   * (SPMD programs over a mesh of them); 0 = $TESSEL_CPU_DEVICES if set,
   * else 1; at most TS_MAX_DEVICES. Each device's kernels use max(1, num_threads / num_devices)
   * threads, so N devices together never oversubscribe the cores. */
  int num_devices;
  /* Several processes (MPI): the devices of all processes together, shared
   * out as evenly as possible (the first processes take one more); 0 = each
   * process has num_devices. Set at most one of the two. */
  int total_devices;
  /* Milliseconds a device waits in a collective (or a process exchange)
   * before giving up with an error that names the missing devices or
   * processes; 0 = $TESSEL_COLLECTIVE_TIMEOUT (seconds) if set, else 120 s in
   * one process and 20 s over several; -1 = wait forever. */
  int collective_timeout_ms;
  /* A client of this process alone even under an MPI launcher (e.g. work
   * one rank does by itself); its devices are numbered from 0. */
  bool process_local;
  /* Pin each local device's thread (and the kernel and collective threads
   * it starts) to cores of its own: device i of this process gets
   * threads-per-device cores of the process's CPU set (sched_getaffinity),
   * after those of the processes before it (mpirun --bind-to none: every
   * rank sees the whole set). Device 0 runs on the caller's thread, pinned
   * only during each execute. Fails (ts_client_new returns NULL, error set)
   * when the set has fewer CPUs than devices x threads per device. */
  bool bind_cores;
} ts_client_options;

/* opts may be NULL (defaults). Owned: ts_client_free, last (see above).
 * Under an MPI launcher collective: every process creates its client. */
ts_client *ts_client_new(const ts_client_options *opts);
void ts_client_free(ts_client *c);
int ts_client_num_threads(const ts_client *c);
const char *ts_client_platform(const ts_client *c); /* "cpu" (a static string) */
/* Number of devices (ids 0..N-1) and the compute threads each one uses. */
int ts_client_num_devices(const ts_client *c);
int ts_client_threads_per_device(const ts_client *c);
/* With bind_cores: the CPUs local device `device` is pinned to, as a list
 * ("2,3") into buf (n bytes); returns 1, or 0 when it is not bound. */
int ts_client_device_cpus(const ts_client *c, int device, char *buf, size_t n);

/* ---- several processes (one per host, launched by mpirun or srun) ----
 * Under an MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the
 * environment; TESSEL_MPI=0/1 overrides) ts_client_new joins the job: the
 * processes exchange their device counts and number all devices globally,
 * process-major (process p's local device i comes after every device of
 * processes < p). Device ids everywhere (meshes, shardings, shard calls) are
 * these global ids; a process runs and holds memory for its own devices
 * only. Every process must then make the same calls in the same order:
 * compile the same programs (ts_compile checks the program hash across
 * processes and fails on every process, naming the ranks and hashes, if they
 * differ), execute them, and read sharded buffers whose blocks live in other
 * processes (ts_buffer_read is then collective). Without a launcher the
 * client is one process, as before: the same binary works both ways. */
int ts_client_process_index(const ts_client *c); /* this process's rank (0 alone) */
int ts_client_process_count(const ts_client *c); /* 1 alone */
int ts_client_num_local_devices(const ts_client *c);
int ts_client_first_local_device(const ts_client *c); /* global id of local device 0 */
bool ts_client_is_local_device(const ts_client *c, int device);
/* Collective: 0 if every process passed the same text (a configuration),
 * else -1 on every process with an error quoting rank 0's text and the first
 * differing rank's. Always 0 in one process. */
int ts_client_check_same(ts_client *c, const char *what, const char *text);
/* Collective: *max = the largest `value` any process passed, on every
 * process (one process: value). Every process calls it at the same point,
 * e.g. to agree on a flag: tessel train stops every rank at the same step
 * when any of them was interrupted. */
int ts_client_max(ts_client *c, int64_t value, int64_t *max);
/* The non-blocking form of ts_client_max, to agree without waiting: start
 * returns at once (the 8-byte messages go out behind whatever the processes
 * are exchanging, e.g. a step's collectives still in flight), finish waits
 * for every process's value and sets *max, then frees req (also on error).
 * Collective: every process starts its requests in the same order (finishing
 * may come any time later, after other collectives and executes); the client
 * must outlive req. One process: immediate (*max = value). tessel train
 * starts one after step k and finishes it after step k+1, so no step waits
 * for the agreement on a stop. */
typedef struct ts_client_max_req ts_client_max_req;
int ts_client_max_start(ts_client *c, int64_t value, ts_client_max_req **req);
int ts_client_max_finish(ts_client_max_req *req, int64_t *max);
/* Ends every process of the job with exit code `code` (MPI_Abort): after an
 * error in one process the others would wait in their next collective until
 * it times out. When the abort has not ended this process within 5 s (the
 * launcher cannot reach every host: a partition), it exits by itself with
 * `code`, saying so on stderr. Alone: exit(code). Never returns. */
void ts_client_abort(ts_client *c, int code);

/* ---- buffers (device memory; on the CPU backend, aligned host memory) ----
 * Every buffer returned here is the caller's: ts_buffer_free it before its
 * client. Queries (shape, sharding) return pointers into the buffer. */
/* Zero-filled buffer. */
ts_buffer *ts_buffer_new(ts_client *c, ts_dtype dt, int rank, const int64_t *shape);
/* Buffer holding a copy of data (numel * dtype size bytes, row-major). */
ts_buffer *ts_buffer_from_host(ts_client *c, ts_dtype dt, int rank, const int64_t *shape, const void *data);
/* Copies host data in / out; bytes must equal the buffer's size. */
int ts_buffer_write(ts_buffer *b, const void *src, size_t bytes);
int ts_buffer_read(const ts_buffer *b, void *dst, size_t bytes);
void ts_buffer_free(ts_buffer *b);
ts_dtype ts_buffer_dtype(const ts_buffer *b);
int ts_buffer_rank(const ts_buffer *b);
const int64_t *ts_buffer_shape(const ts_buffer *b);
size_t ts_buffer_bytes(const ts_buffer *b);

/* ---- sharded buffers (several devices) ----
 * A buffer has a global dtype and shape; on a client with N devices it is
 * stored as one block per device as its sharding says (NULL = replicated:
 * every device holds the whole tensor). Blocks of an uneven dim have the
 * padded size ceil(dim / tiles) (ts_sharding_shard_shape); the padding is
 * never part of a value. ts_buffer_read / ts_buffer_write move the whole
 * global tensor (uploading sends each device only its block; reading gathers).
 * Several processes: a write uploads only this process's blocks (every
 * process passes the global tensor); a read is local when this process holds
 * every part of the tensor (a replicated buffer always), else it is
 * collective: every process must read that buffer, in the same order. */
/* A buffer with sharding s (copied; NULL = replicated) holding data (the
 * global tensor, row-major). s's mesh must have the client's device count. */
ts_buffer *ts_buffer_from_host_sharded(ts_client *c, ts_dtype dt, int rank, const int64_t *shape, const void *data,
                                       const ts_sharding *s);
/* The buffer's sharding (borrowed: valid until the buffer is freed or
 * resharded), or NULL when it is replicated. */
const ts_sharding *ts_buffer_sharding(const ts_buffer *b);
/* Global index range [start, limit) per dim of the block device `device` holds. */
int ts_buffer_shard_range(const ts_buffer *b, int device, int64_t *start, int64_t *limit);
/* Copies device `device`'s block (its range only, without padding; bytes =
 * its numel * dtype size) to dst. */
int ts_buffer_read_shard(const ts_buffer *b, int device, void *dst, size_t bytes);
/* Writes device `device`'s block (its range, without padding; bytes = its
 * numel * dtype size) from src, leaving the other blocks as they are (the
 * per-device upload of a data loader). Every device holding the same range
 * (replication) must be written for the buffer to be consistent. Several
 * processes: device must be local, and a write of a block held by devices
 * of other processes is the caller's to repeat there. */
int ts_buffer_write_shard(ts_buffer *b, int device, const void *src, size_t bytes);
/* Re-lays the buffer out with sharding s (copied; NULL = replicated); the
 * value is unchanged. Collective when its read is (blocks in other processes). */
int ts_buffer_reshard(ts_buffer *b, const ts_sharding *s);

/* ---- holds: a buffer's contents kept, without a copy, while it changes ----
 * (a checkpoint's writer reads the state of step N while step N+1 runs)
 * ts_buffer_hold_new keeps the current contents of b's blocks readable until
 * ts_buffer_hold_release, while b stays in use:
 * - a ts_execute that would update b in place (b passed as a donated input)
 *   computes the new values into other memory and moves b there, leaving the
 *   held memory as it was. The memory left behind becomes b's spare once
 *   released, and the next such move reuses it: one extra copy of b's memory
 *   for the rest of b's life, no allocation in steady state;
 * - ts_buffer_write, ts_buffer_write_shard and ts_buffer_reshard of b wait
 *   for the release;
 * - ts_buffer_free(b) is allowed: the held memory is freed at the release.
 * One hold per buffer at a time. ts_buffer_hold_new on the thread using b;
 * read and release from any thread. */
typedef struct ts_buffer_hold ts_buffer_hold;
ts_buffer_hold *ts_buffer_hold_new(ts_buffer *b);
/* As ts_buffer_read_shard, from the held contents (device must be local). */
int ts_buffer_hold_read_shard(const ts_buffer_hold *h, int device, void *dst, size_t bytes);
/* Bytes [offset, offset + bytes) of what ts_buffer_hold_read_shard would
 * give (the block's row-major contents): a large block read a piece at a
 * time (a checkpoint's pipelined save). */
int ts_buffer_hold_read_range(const ts_buffer_hold *h, int device, size_t offset, void *dst, size_t bytes);
/* The same bytes [offset, offset + bytes), visited instead of copied: fn(ctx,
 * p, n) is called on consecutive pieces of them, in order (p: read-only
 * host memory, valid during the call). On CPU devices p is the held memory
 * itself (no intermediate copy: a checkpoint's writer copies and hashes
 * each byte in one pass); a padded block comes a row of its last dim at a
 * time. fn returns 0 to go on; a nonzero return stops the visit and is
 * returned (fn sets the error). */
typedef int (*ts_hold_visit_fn)(void *ctx, const void *p, size_t n);
int ts_buffer_hold_visit_range(const ts_buffer_hold *h, int device, size_t offset, size_t bytes, ts_hold_visit_fn fn,
                               void *ctx);
void ts_buffer_hold_release(ts_buffer_hold *h);

/* ---- compile ---- */
typedef struct {
  bool no_simplify, no_cse, no_fusion; /* passes are on by default */
  bool verbose;                        /* print pass statistics to stderr */
  /* SPMD: the device mesh the program runs on (NULL: the mesh of the graph's
   * sharding annotations, or, without any, every device replicated). Its
   * device count must equal the client's. */
  const ts_mesh *mesh;
  /* The graph is one replica's program (tessel/spmd.h ts_replica_all_reduce):
   * every device runs it on its own data; no sharding, no mesh. */
  bool replicas;
  /* With replicas, on several devices: the weights' update sharded over the
   * replicas (PyTorch's ZeroRedundancyOptimizer on DDP): replica r updates
   * block r of each weight (rank >= 2, the first dim the replica count
   * divides) with its block of the optimizer state ("<weight>.exp_avg",
   * ".exp_avg_sq", ".momentum_buffer"; their buffers become sharded over the
   * replicas), then the new weight is all-gathered. Bit-identical to every
   * replica updating everything; 1/N of the update's work and state each.
   * Weights under shard_update_min_bytes (0: 512 KiB) stay replicated: their
   * update costs less than an all-gather's latency. */
  bool shard_update;
  size_t shard_update_min_bytes;
  /* All-reduce combining (XLA's AllReduceCombiner, DDP's buckets): the
   * all-reduces of one device group, dtype and reduction in a device's
   * program are packed into buckets of about combine_bytes (0: 1 MiB), one
   * collective call each, started as soon as its last member is ready. A
   * tensor of combine_bytes or more stays alone (packing would only copy it).
   * Bit-identical to uncombined. no_combine turns it off. */
  bool no_combine;
  size_t combine_bytes;
  /* Mixed precision (PyTorch's CPU autocast policy as a compiler pass):
   * TS_BF16 or TS_F16 run every f32 dot_general / conv2d (forward and both
   * backward convolutions) in that type, operands converted, f32 accumulation
   * inside the kernel, result converted back to f32; softmax, losses, norms,
   * reductions, the optimizer and collectives stay f32, and so do the weights
   * (each weight is converted once per step). TS_F16 is stored and rounded as
   * f16 and computed in f32 (no f16 arithmetic on AVX-512 CPUs without
   * AVX512_FP16); pair it with a loss scaler (tessel/nn.h ts_loss_scaler).
   * TS_F32 (0): off. Other dtypes are an error. */
  ts_dtype autocast;
  /* Auto-sharding (tessel/spmd.h ts_auto_shard): every sharding the graph
   * does not mark is chosen by the cost model and ILP, on `mesh` (else the
   * shape in TESSEL_AUTO_SPMD_MESH, else every device on one axis), then
   * propagated and partitioned as usual. TESSEL_AUTO_SPMD=1 turns it on for
   * every compile that is not a replica program. */
  bool auto_shard;
  double auto_shard_time_limit_s;   /* 0: 10 s; past it, the greedy plan */
  double auto_shard_memory_limit;   /* per-device bytes the plan must fit; 0: none */
  /* The solver's cost-model constants (kernel rates, overhead, links: a
   * calibration's, e.g. tessel train reads the cache); its mesh, time and
   * memory limits are ignored (the fields above). NULL: the defaults. */
  const ts_auto_shard_options *auto_shard_costs;
} ts_compile_options;

/* The prediction from device 0's compiled program: g's shardings propagated,
 * device 0's program partitioned and optimized by ts_compile's passes (copts:
 * autocast, fusion flags; may be NULL) and memory-planned, without a client
 * or any device memory, so for any mesh size (every device's program has the
 * same shape). step_s: the program's kernels by class (o's throughput, one
 * op_overhead_s each) and its collectives by the alpha-beta model of their
 * mesh axis, all-reduces the compiler runs asynchronously overlapped with the
 * compute up to their first user; arena_bytes: the memory plan's peak of
 * temporaries (what ts_executable_device_program reports); input_bytes: the
 * per-device inputs; peak_bytes_per_device: inputs + arena + outputs. */
int ts_predict_program(const struct ts_graph *g, const ts_auto_shard_options *o, const ts_compile_options *copts,
                       ts_auto_shard_info *info);

/* Compiles g (which is not modified and may be freed afterwards). opts may be
 * NULL; it and opts->mesh are only read during the call. The executable is
 * the caller's: ts_executable_free before the client. On a client of several
 * processes collective: every process compiles the same program (checked). */
ts_executable *ts_compile(ts_client *c, const ts_graph *g, const ts_compile_options *opts);
void ts_executable_free(ts_executable *e);
int ts_executable_num_inputs(const ts_executable *e);
int ts_executable_num_outputs(const ts_executable *e);
/* Peak bytes of the executable's temporary arena (memory plan), excluding
 * inputs and outputs. */
size_t ts_executable_peak_bytes(const ts_executable *e);
/* Text form of the optimized program with its memory plan (malloc'd). */
char *ts_executable_to_string(const ts_executable *e);

/* ---- SPMD: shardings and collectives of a compiled program ----
 * On a client with several devices (or a graph with sharding annotations)
 * ts_compile propagates shardings to every node (tessel/spmd.h
 * ts_mark_sharding), partitions the program into one program per device and
 * inserts the collectives. */
/* Number of devices the program runs on (1 without SPMD). */
int ts_executable_num_devices(const ts_executable *e);
/* Device `device`'s program (0 <= device < ts_executable_num_devices): the
 * bytes of its memory plan and its node count. */
typedef struct {
  size_t arena_bytes; /* peak of the temporaries (excluding inputs and outputs) */
  size_t const_bytes; /* the constant pool */
  int nodes;          /* nodes of its optimized (partitioned) program */
} ts_device_program_info;
int ts_executable_device_program(const ts_executable *e, int device, ts_device_program_info *out);
/* The sharding chosen for node `node` of the compiled graph (NULL with an
 * error for a bad id; replicated shardings are returned as such). This and
 * the two below are borrowed from e: valid until ts_executable_free. */
const ts_sharding *ts_executable_sharding(const ts_executable *e, ts_tensor node);
/* Shardings of the program's inputs and outputs (executes reshard buffers
 * that differ; outputs are returned with these). */
const ts_sharding *ts_executable_input_sharding(const ts_executable *e, int input);
const ts_sharding *ts_executable_output_sharding(const ts_executable *e, int output);
/* One line per node: "%12 dot_general f32[128,512] {devices=[2,1,2]...}". malloc'd. */
char *ts_executable_shardings_to_string(const ts_executable *e);

typedef enum {
  TS_COLLECTIVE_ALL_REDUCE,
  TS_COLLECTIVE_ALL_GATHER,
  TS_COLLECTIVE_REDUCE_SCATTER,
  TS_COLLECTIVE_ALL_TO_ALL,
  TS_COLLECTIVE_PERMUTE,
} ts_collective_kind;

/* A collective the partitioner inserted (the same on every device). */
typedef struct {
  ts_collective_kind kind;
  uint32_t mesh_axes;   /* bit a: over mesh axis a */
  int group_size;       /* devices per group */
  size_t bytes;         /* per device: bytes of the operand (all-gather:
                         * of its result, the gathered tensor) */
  ts_tensor cause;      /* node of the compiled graph it was inserted for */
  const char *cause_op; /* that node's op name */
} ts_collective_info;

int ts_executable_num_collectives(const ts_executable *e);
int ts_executable_collective(const ts_executable *e, int i, ts_collective_info *out);
/* One line per collective: kind, mesh axes, bytes, cause. malloc'd. */
char *ts_executable_collectives_to_string(const ts_executable *e);
const char *ts_collective_kind_name(ts_collective_kind k);

/* Runs the program. inputs: one buffer per graph input, in input order, with
 * the input's dtype and shape. outputs: one slot per graph output. For an
 * aliased output the slot is set to its input buffer (updated in place; the
 * same buffer, not a second one to free). For others, a non-NULL slot of the
 * right dtype/shape is written into; a NULL slot receives a new buffer the
 * caller frees (before the client). Collective for a program whose devices
 * span processes: every process executes it, in the same order. Executables
 * of one client run one at a time (one thread calls ts_execute). */
int ts_execute(ts_executable *e, ts_buffer *const *inputs, ts_buffer **outputs);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
