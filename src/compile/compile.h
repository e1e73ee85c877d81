/* compile.h — the executable: an optimized graph, its memory plan, the
 * device memory the plan needs (arena, constant pool) and per-node kernel
 * state. Built by ts_compile (compile.c), run by ts_execute (runtime/).
 *
 * An SPMD executable (several devices) is a top-level one holding the global
 * program, the shardings chosen for it and the collectives inserted, plus one
 * sub-executable per device (its partitioned program), each run by its own
 * thread. */
#ifndef TS_COMPILE_H
#define TS_COMPILE_H

#include "plan/plan.h"
#include "runtime/rt.h"
#include "spmd/partition.h"

struct ts_executable {
  ts_client *client;
  int device;         /* index of the client device whose memory this uses */
  ts_graph *g;        /* optimized program; schedule = node order (SPMD top level: the global program) */
  ts_plan plan;
  void *arena;        /* device memory, plan.arena_bytes */
  void *pool;         /* device memory, plan.const_bytes, filled at compile time */
  ts_kstate **state;  /* per node; freed with the executable */
  void **values;      /* per node, resolved at every execute */
  bool *async;        /* per node: an all-reduce started asynchronously (NULL: none) */
  /* ---- SPMD top level only (n_dev > 0) ---- */
  int n_dev;
  struct ts_executable **dev; /* (n_dev) per-device programs */
  ts_sharding **node_sh;      /* per node of g */
  ts_sharding **in_sh, **out_sh;
  spmd_coll_list colls;
};

/* The graph passes of ts_compile alone (verify, copy, simplify, CSE, DCE,
 * fusion, DCE, schedule), for tests and tools. Returns a new graph or NULL. */
ts_graph *ts_compile_graph(const ts_graph *g, const ts_compile_options *opts);

/* compile_spmd.c: compiles g for every device of the client (mesh m). */
ts_executable *compile_spmd(ts_client *c, const ts_graph *g, const ts_mesh *m, const ts_compile_options *opts);
/* compile_replicas.c: compiles the replica program g (options.replicas) for
 * every device of this process. */
ts_executable *compile_replicas(ts_client *c, const ts_graph *g, const ts_compile_options *opts);
/* compile.c: an executable of an already optimized graph on client device
 * `device` (takes over opt). */
ts_executable *compile_local(ts_client *c, int device, ts_graph *opt, const ts_compile_options *opts);

#endif
