/* autoshard.h — auto-sharding inside tessel (after XLA's auto_sharding pass,
 * the Alpa intra-op ILP): every node of a global graph gets a list of
 * strategies (an output layout, the operand layouts it needs, a compute and
 * communication cost, per-device bytes); edges cost the resharding between a
 * producer's layout and what its user needs; an integer linear program over
 * one-hot strategy choices (GLPK's MIP, with a time limit and a greedy
 * fallback) picks the cheapest plan under a per-device memory limit. The plan
 * becomes sharding annotations on every node but constants (so
 * propagation does not choose other layouts than the ones priced); spmd/'s
 * partitioner does the rest. */
#ifndef TS_AUTOSHARD_H
#define TS_AUTOSHARD_H

#include "ir/ir.h"
#include "tessel/spmd.h"

/* Marks g (in place) with the chosen shardings; user-marked nodes are kept.
 * info and explain (malloc'd text, may be NULL) as ts_auto_shard. */
int autoshard_annotate(ts_graph *g, const ts_auto_shard_options *o, ts_auto_shard_info *info, char **explain);

/* The cost model's constants, defaults filled in (shared with
 * compile/predict.c, which costs a compiled per-device program with them). */
typedef struct {
  double rate[TS_KERNEL_CLASSES]; /* FLOP/s (contractions) or bytes/s */
  double overhead;                /* seconds per kernel run */
  double par_overhead;            /* seconds per kernel run on several threads */
  double step_overhead;           /* seconds per step */
  double coll_wait;               /* seconds per collective: waiting for the group's last device */
  double coll_async;              /* seconds per asynchronous collective on the device's timeline (0: none) */
  double coll_long, coll_long_after; /* a blocking one's wait after coll_long_after s of compute (0: none) */
  double bcast_operand;           /* seconds per result element per broadcast operand beyond the first */
  double dot_bw;                  /* bytes/s a dot_general streams its operands and result at (0: none) */
  double conv_wbw[3];             /* per conv kind: bytes/s it moves its weight (or filter gradient) at (0: none) */
  double cache_bytes;             /* memory-bound kernels moving at most this use cached[] (0: none) */
  double cached[TS_KERNEL_CLASSES]; /* their rates then, where > 0 */
  double link_bw[TS_MESH_MAX_RANK], latency[TS_MESH_MAX_RANK]; /* per mesh axis */
  bool remote[TS_MESH_MAX_RANK];  /* per mesh axis: it spans hosts */
  bool procs[TS_MESH_MAX_RANK];   /* per mesh axis: it spans processes of one host */
  double proc_wait;               /* seconds per collective over such an axis: the last process (0: none) */
  double proc_after;              /* compute since the previous collective at which proc_wait is whole (0: always) */
  double proc_step_wait;          /* the step's first collective over processes waits this (0: proc_wait) */
} autoshard_costs;

void autoshard_costs_from(const ts_auto_shard_options *o, autoshard_costs *k);
/* Node n of g: whether it runs a kernel (not an input, constant or reshape),
 * its class and its work (FLOPs or bytes read + written) over `par` devices.
 * update: n computes a donated parameter update (the optimizer class). */
bool autoshard_node_runs(const ts_node *n);
/* The fixed cost of running a kernel whose result has `elems` elements per device. */
double autoshard_kernel_overhead(const autoshard_costs *k, double elems);
ts_kernel_class autoshard_node_class(const ts_graph *g, const ts_node *n, double par, bool update, double *units);
/* A dot_general moving more than this (operands and result, bytes per
 * device) streams them at autoshard_costs.dot_bw; at most this (the small
 * class's 96^3 probe: 108 KiB) stays in cache. */
#define AS_DOT_STREAM_BYTES (256.0 * 1024)
/* Seconds of node n's work alone (no per-kernel overhead) over `par`
 * devices, `units` and *kc from autoshard_node_class: a memory-bound kernel
 * of at most k->cache_bytes at its class's in-cache rate when that is set;
 * a dot_general moving more than AS_DOT_STREAM_BYTES per device (operands
 * and result) with k->dot_bw set, its FLOPs over the large class's rate (*kc
 * becomes it) plus those bytes over dot_bw; else units over the class's
 * rate. The one formula of the solver (as_node_compute) and the
 * prediction (predict.c). */
double autoshard_work_s(const autoshard_costs *k, const ts_graph *g, const ts_node *n, double par,
                        ts_kernel_class *kc, double units);
/* Seconds convolution node n (conv2d, conv2d_bwd_data, conv2d_bwd_filter of
 * a compiled per-device program; 0 for any other node) spends moving its
 * weight: the weight operand's bytes (the filter gradient's: its result's)
 * over k->conv_wbw of its kind. Added to autoshard_work_s's by the
 * prediction (predict.c), not by the solver: priced per strategy (data
 * parallelism paying the whole weight on every device), it made the solver
 * split ResNet-50's convs on 2x2 by channels, a plan whose compiled program
 * the prediction put at 990 ms against the solver's 785 and the hand
 * layout's 833, and which ran 1.24x the hand layout's step (the solver's
 * blind spot on such 2-D conv plans, not found yet). */
double autoshard_conv_weight_s(const autoshard_costs *k, const ts_graph *g, const ts_node *n);
/* The broadcast instructions of fused kernel n (0 for any other node). */
int autoshard_broadcast_operands(const ts_node *n);
/* Seconds of a ring collective over `n` devices with the links of bw/latency
 * moving `bytes` per device per pass (passes: 2 all-reduce, 1 gather/scatter).
 * latency is charged for autoshard_sync_steps(n, passes, remote) steps. */
double autoshard_ring_s(double bw, double latency, int n, double bytes, int passes, bool remote, double *sent);
/* The latency steps of a collective over `n` devices: across hosts passes x
 * log2 n (recursive halving / doubling per pass); within a host (comm/'s
 * shared-memory collectives: remote false) every all-reduce, all-gather,
 * reduce-scatter and all-to-all is the same two group syncs (publish the
 * buffers, then wait for every reader), 2 log2 n steps whatever its passes:
 * the 1-element all-reduce the latency was calibrated on. */
double autoshard_sync_steps(int n, int passes, bool remote);
/* Whether an asynchronous collective moving `bytes` (the larger of operand
 * and result, per device) over a group spanning the mesh axes `axes` (a bit
 * mask) runs in line, blocking, on an idle worker's device thread: at most
 * env_inline_bytes, the between-hosts limit when an axis spans hosts
 * (cpu_collective_inline / comm_start_inline's rule). */
bool autoshard_runs_inline(const autoshard_costs *k, uint32_t axes, double bytes);

#endif
