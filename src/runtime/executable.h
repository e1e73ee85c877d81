/* executable.h — the executable: an optimized graph, its memory plan, the
 * device memory the plan needs (arena, constant pool) and per-node kernel
 * state. Built by the compiler (compile/, one layer up), run and freed by the
 * runtime (execute.c).
 *
 * An SPMD executable (several devices) is a top-level one holding the global
 * program, the shardings chosen for it and the collectives inserted, plus one
 * sub-executable per device (its partitioned program), each run by its own
 * thread. */
#ifndef TS_RUNTIME_EXECUTABLE_H
#define TS_RUNTIME_EXECUTABLE_H

#include "plan/plan.h"        /* ts_plan */
#include "runtime/rt.h"       /* ts_client */
#include "spmd/partition.h"   /* spmd_coll_list: the collectives inserted */

struct ts_executable {
  ts_client *client;
  int device;         /* index of the client device whose memory this uses */
  ts_graph *g;        /* optimized program; schedule = node order (SPMD top level: the global program) */
  ts_plan plan;
  void *arena;        /* device memory, plan.arena_bytes */
  void *pool;         /* device memory, plan.const_bytes, filled at compile time */
  void **state;       /* per node: the device's cached state; released with the executable */
  void **values;      /* per node, resolved at every execute */
  bool *async;        /* per node: a collective started asynchronously (NULL: none) */
  bool *defer;        /* per node: an async one that may end after the run (NULL: none) */
  bool *borrow;       /* per node: an async one that reads its operand in place, kept live by the plan (NULL: none) */
  int32_t *chain_of;  /* per node: run by the update chain of that gather, or -1 (NULL: none; plan.h) */
  plan_chain *chains; /* (n_chains) gather, hand-off node, reduction; in hand-off order */
  int n_chains;
  /* ---- SPMD top level only (n_dev > 0) ---- */
  int n_dev;
  struct ts_executable **dev; /* (n_dev) per-device programs */
  ts_sharding **node_sh;      /* per node of g */
  ts_sharding **in_sh, **out_sh;
  spmd_coll_list colls;
};

#endif
