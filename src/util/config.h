/* config.h — tessel's environment variables, read once, in one place.
 *
 * Every TESSEL_* variable the library reads is here, with its default and
 * effect (README.md, "Environment variables", is the user's copy of this
 * list). env_config() reads the environment on its first call (thread-safe)
 * and never again, so a run's configuration cannot change under it.
 * Parsing happens here; an invalid value is kept as text (a *_invalid field)
 * and reported where the value is used, naming the variable and the value,
 * so the error reaches the caller that can act on it (ts_client_new fails
 * for a bad TESSEL_NUM_THREADS; importing the library does not). */
#ifndef TS_UTIL_CONFIG_H
#define TS_UTIL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
  /* TESSEL_NUM_THREADS: compute threads of a client whose options give none
   * (tessel's loops and oneDNN share them). A count in [1, TS_MAX_THREADS]
   * (4096; more than the cores is capped to them); unset or empty: all cores. */
  int num_threads;                 /* 0: unset */
  const char *num_threads_invalid; /* the text when it is not such a count (ts_client_new fails) */

  /* TESSEL_CPU_DEVICES: virtual CPU devices of a client whose options give
   * none. A count in [1, TS_MAX_DEVICES] (4096); unset or empty: 1. */
  int cpu_devices;                 /* 0: unset */
  const char *cpu_devices_invalid; /* as above */

  /* TESSEL_COLLECTIVE_TIMEOUT: seconds a collective waits for a missing peer
   * when the client options give no timeout; 0 = wait forever. Seconds in
   * [0, 86400]; unset or empty: 120 s in one process, 20 s over several. */
  int collective_timeout_ms;              /* 0: unset; -1: no timeout (the value 0) */
  const char *collective_timeout_invalid; /* the text when not seconds in [0, 86400] */

  /* TESSEL_TRACE: a file to write a Chrome/Perfetto trace of the whole
   * process to, at exit (tracing starts when the library loads). Unset or
   * empty: no trace (ts_trace_start/--trace still work). */
  const char *trace_path; /* NULL: unset */

  /* TESSEL_METRICS: "0" turns the metrics registry off from the start (one
   * branch per report point). Any other value or unset: on. */
  bool metrics_enabled;

  /* TESSEL_ASYNC_COLLECTIVES: "0" runs every all-reduce, all-gather and
   * reduce-scatter in line on its device thread instead of on a per-device
   * worker overlapping later nodes (for debugging and measuring the
   * overlap). Any other value or unset: on. */
  bool async_collectives;

  /* TESSEL_UPDATE_CHAINS: where the collective worker itself runs a
   * weight's sharded update (ZeRO-1, SPMD data=N) as soon as its gradient's
   * reduce-scatter ends, then starts the new weight's all-gather
   * (plan/plan.h plan_async.chain_of; runtime/cpu_device.c): "1" in
   * programs whose devices span hosts (1); "all" in every program with such
   * a gather, also between the devices of one process (2; tests); unset,
   * "0" or any other value: nowhere (0), the device runs the update where
   * the schedule put it. Off by default: on this 2-core host the 2-host CNN
   * did not gain (the worker's update waits for a core, and the earlier
   * gather slows the small collectives beside it). Same values either way. */
  int update_chains;

  /* TESSEL_COMM_YIELD: "0" turns off the device's yield to its idle
   * collective worker when it starts a collective between hosts
   * (comm/async.c hand_core). Any other value or unset: on. */
  bool comm_yield;

  /* TESSEL_HIER_ALLREDUCE: "1" makes all-reduces over several processes
   * with several devices in each two-level (comm/hier.c: reduce-scatter in
   * the process, all-reduce of 1/k across processes, all-gather): fewer
   * bytes between hosts, but a different summation order than one process
   * (results differ by rounding). Unset or any other value: off. */
  bool hier_allreduce;

  /* TESSEL_COMM_INLINE_BYTES: a collective the compiler marked asynchronous
   * runs in line on its device thread (no worker hand-off, no staging copy)
   * when nothing earlier is in flight and its operand has at most this many
   * bytes; "0": never (always the worker). Unset or invalid: -1, automatic
   * (env_inline_bytes below; comm/comm.c says why). */
  int64_t comm_inline_bytes;

  /* TESSEL_CACHE_DIR: the persistent compile cache's directory (created if
   * missing) unless ts_compile_cache_set_dir chose one. Unset or empty: no
   * persistent cache (the in-memory one always works). */
  const char *cache_dir; /* NULL: unset */

  /* TESSEL_CALIBRATION: the cost model's calibration file that tessel plan /
   * inspect read when present (and plan --calibrate writes without a FILE);
   * "none": use no calibration (the defaults; tests). Unset: the cache,
   * $XDG_CACHE_HOME/tessel/calibration.txt, else ~/.cache/tessel/calibration.txt
   * (xdg_cache_home, home below). */
  const char *calibration; /* NULL: unset */
  const char *xdg_cache_home, *home;

  /* TESSEL_DEBUG_SPMD: set (any value): when a partitioned per-device program
   * fails to compile, print it to stderr (partitioner debugging). Unset: off. */
  bool debug_spmd;

  /* TESSEL_MPI: "0" never joins an MPI job; any other non-empty value always
   * does (an error in a build without MPI). Unset or empty: join when an MPI
   * launcher's variable is present (mpi_launcher). */
  int mpi;                  /* -1: auto; 0: off; 1: on */
  const char *mpi_launcher; /* the first of OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK, PMI_RANK,
                               MPI_LOCALNRANKS that is set, or NULL */

  /* TESSEL_NET_PIECE_BYTES: the largest MPI message in bytes; larger
   * transfers are split (tests set a small value to exercise the splitting).
   * A count in [1, 2^30]; unset: 2^30 (1 GiB), and messages between hosts
   * go in MPI's eager size over a slow link (comm/net.c, TESSEL_NET_EAGER
   * below); set (net_piece_set), it holds
   * between hosts too. Anything else: net_piece_invalid (every exchange
   * fails naming it). */
  size_t net_piece_bytes;
  bool net_piece_set;
  const char *net_piece_invalid;

  /* TESSEL_NET_EAGER: whether messages between hosts go in MPI's eager
   * size (comm/net.c NET_EAGER_PIECE): "1" always, "0" never; unset or
   * empty (-1): when the link measured at the start is slower than
   * NET_EAGER_BELOW_MBPS. Anything else: net_eager_invalid (every exchange
   * fails naming it). */
  int net_eager;
  const char *net_eager_invalid;

  /* TESSEL_NET_PACE: "0" posts the main lane's eager pieces between hosts
   * at once; unset, empty or "1" (-1 / 1): through the send window (comm/net.c
   * pump) when a small lane runs beside it. Anything else: net_pace_invalid
   * (every exchange fails naming it). */
  int net_pace;
  const char *net_pace_invalid;

  /* TESSEL_COMM_LANES: the small lane of collectives between processes
   * (comm/comm_internal.h COMM_LANE_BYTES): "0" none, "1" for every group
   * over several processes; unset or empty (-1): over several hosts.
   * Anything else: comm_lanes_invalid (comm_new_world fails naming it). */
  int comm_lanes;
  const char *comm_lanes_invalid;

  /* TESSEL_HIER_SEGMENT_BYTES: the segment of the all-reduce between
   * processes, whose reduce-scatter and all-gather are pipelined
   * (comm/hier.c); "0": one segment per chunk (the phases one after the
   * other). Bytes in [0, 2^30]; unset: -1 (the default, HIER_SEGMENT_BYTES);
   * anything else: hier_segment_invalid (the all-reduce fails naming it). */
  int64_t hier_segment_bytes;
  const char *hier_segment_invalid;

  /* TESSEL_AUTO_SPMD: "1" auto-shards every compile that is not a replica
   * program (PyTorch/XLA's XLA_AUTO_SPMD; ts_compile_options.auto_shard).
   * TESSEL_AUTO_SPMD_MESH: the mesh shape it uses when the options give no
   * mesh, "4,4" (XLA_AUTO_SPMD_MESH); unset: every device on one axis. */
  bool auto_spmd;
  const char *auto_spmd_mesh; /* NULL: unset */

  /* TESSEL_CKPT_PRIORITY: the CPU priority of a background checkpoint
   * saver's threads (copy, checksums, writes, commit; ts_ckpt_saver):
   * "low" (nice 19, the default), "idle" (SCHED_IDLE) or "normal" (the
   * caller's). Low/idle: training threads always win the cores; the save
   * then takes longer while steps run. ts_ckpt_saver_new fails on any other
   * value. */
  const char *ckpt_priority; /* NULL: unset (low) */
} ts_env_config;

/* The environment as read on the first call; never NULL. */
const ts_env_config *env_config(void);
/* Whether this process joins an MPI job: TESSEL_MPI on, or unset with an MPI
 * launcher's variable present (comm/net.c; tessel plan --calibrate). */
bool env_mpi_wanted(void);

/* The most bytes a collective the compiler marked asynchronous may move and
 * still run in line on its device thread (no collective worker), as comm/
 * decides it (comm.c: the reasons) and compile/predict.c costs it:
 * TESSEL_COMM_INLINE_BYTES when set (0: never in line, -1 returned), else
 * 8 MiB between devices of one host (shared memory, or processes of one
 * host) and 64 KiB between hosts. */
int64_t env_inline_bytes(bool between_hosts);
/* env_inline_bytes' default between hosts (each such call a round trip to
 * the peer); opt/schedule.c's tiny all-reduces use the same bound. */
#define ENV_INLINE_BYTES_HOSTS ((int64_t)64 << 10)

/* Reads the environment again (the pointer env_config returns stays the same;
 * its strings from before are freed). For tests that change the environment
 * between clients; no other thread may use the configuration meanwhile. */
void env_config_reload(void);

#endif
