/* plan.h — the memory plan of an optimized graph: where every value lives
 * while the program runs (caller's input or output buffer, constant pool,
 * temporary arena, or an alias of another value), the arena offsets found by
 * liveness analysis with best-fit reuse, and the copies left for the end. */
#ifndef TS_PLAN_H
#define TS_PLAN_H

#include "ir/ir.h"

#define PLAN_ALIGN 64

typedef enum {
  PLAN_INPUT,   /* the caller's input buffer `index` (also in-place donated outputs) */
  PLAN_CONST,   /* constant pool + offset */
  PLAN_ARENA,   /* arena + offset */
  PLAN_OUTPUT,  /* the caller's output buffer `index` */
  PLAN_ALIAS,   /* same memory as node `index` (RESHAPE) */
  PLAN_UNUSED,  /* dropped value (never read) */
} plan_kind;

typedef struct {
  plan_kind kind;
  int index;
  size_t offset;
  size_t bytes;
  int def, last; /* live range in schedule positions (last use; n_nodes = end) */
} plan_value;

/* An end-of-run copy. src: node `src_node`'s memory, or when src_node < 0
 * the arena at src_offset; dst: output `dst_output` (its buffer, or for an
 * aliased output the input buffer), or when dst_output < 0 the arena at
 * dst_offset (staging, so that swapping donated inputs works). */
typedef struct {
  int src_node;
  size_t src_offset;
  int dst_output;
  size_t dst_offset;
  size_t bytes;
} plan_copy;

typedef struct {
  int n;               /* nodes */
  plan_value *values;  /* per node, in schedule (= node) order */
  size_t arena_bytes;  /* peak */
  size_t const_bytes;
  plan_copy *copies;
  int n_copies;
  int n_inplace;       /* donated outputs computed directly into their input */
  int n_reused;        /* elementwise values written over a dying operand */
} ts_plan;

/* Plans g (already optimized; schedule = node order). */
int plan_build(const ts_graph *g, ts_plan *p);
/* The same, with node i's first operand (its storage root) live up to
 * schedule position keep[i] at least (keep NULL or keep[i] < 0: as read):
 * an operand that a collective started at i reads until its result's first
 * user awaits it (plan/async.c plan_mark_async), so no staging copy is needed. */
int plan_build_kept(const ts_graph *g, const int32_t *keep, ts_plan *p);
/* The same, and each arena value v with from[v] >= 0 (from NULL: none)
 * taken at schedule position from[v] (<= v) instead of v and live to the
 * end: a value an update chain computes on the collective worker at any
 * time after the device passed from[v] (plan_mark_async). */
int plan_build_live(const ts_graph *g, const int32_t *keep, const int32_t *from, ts_plan *p);
void plan_free(ts_plan *p);

/* async.c — the collectives a device starts asynchronously (all-reduces,
 * all-gathers, reduce-scatters whose first user is not the next node the
 * device runs; the schedule pass put each collective right after its last
 * operand), those that may end after the run (carried into the caller's
 * buffer: defer), and the started reduce-scatters that read their arena
 * operand in place (borrow: no staging copy; p is planned again with that
 * operand live until the collective is awaited). Each array has a bool per
 * node, or is NULL when no node is marked. Used by compile.c and by the
 * prediction (predict.c), so both plan the same arena. */
typedef struct {
  bool *async, *defer, *borrow;
  /* Update chains (only when asked: plan_mark_async's chains): a started
   * all-gather G of one block per member whose operand is computed, from a
   * started reduce-scatter or all-reduce R (a gather of more than 1 MiB: a
   * network link's milliseconds), program inputs and tiny values
   * of inputs alone, by nodes nothing else reads (ZeRO-1's update of a
   * weight block: R its gradient's reduce-scatter, G the new weight's
   * gather). The device hands those nodes and G to the collective worker
   * once it has run the chain's hand-off node (R, and every other node that reads or
   * writes memory the chain writes, or writes memory it reads), and skips
   * them at their own places; the worker runs them as soon as R ends
   * (runtime/cpu_device.c). chain_of: per node, the G of the chain that runs
   * it (G's own entry too), else -1; chains: each chain's G, hand-off node
   * and R, in order of their hand-off nodes. NULL / 0: none. */
  int32_t *chain_of;
  struct plan_chain *chains;
  int n_chains;
} plan_async;
typedef struct plan_chain {
  int32_t gather, hand_off, reduction;
} plan_chain;
/* base[i]: node i's storage root (through reshapes); first_use[i]: the first
 * node that reads it (reshapes run nothing: their users count as users of
 * what they reshape), `none` when nobody does. Arrays of g->n_nodes. */
void plan_first_uses(const ts_graph *g, int32_t *base, int32_t *first_use, int32_t none);
/* chains: also form update chains (between processes, where the worker's
 * early gather hides the link; compile.c); the plan then keeps each chain's
 * values from its hand-off to the end (plan_build_live). */
int plan_mark_async(const ts_graph *g, ts_plan *p, bool chains, plan_async *marks);
void plan_async_free(plan_async *marks);
/* Appends the plan as text (one value a line) to a malloc'd string *buf of
 * length *len; returns 0 or -1. */
int plan_print(const ts_plan *p, const ts_graph *g, char **buf, size_t *len, size_t *cap);

#endif
