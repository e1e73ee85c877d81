/* compile.h — the executable: an optimized graph, its memory plan, the
 * device memory the plan needs (arena, constant pool) and per-node kernel
 * state. Built by ts_compile (compile.c), run by ts_execute (runtime/). */
#ifndef TS_COMPILE_H
#define TS_COMPILE_H

#include "plan/plan.h"
#include "runtime/rt.h"

struct ts_executable {
  ts_client *client;
  ts_graph *g;        /* optimized program; schedule = node order */
  ts_plan plan;
  void *arena;        /* device memory, plan.arena_bytes */
  void *pool;         /* device memory, plan.const_bytes, filled at compile time */
  ts_kstate **state;  /* per node; freed with the executable */
  void **values;      /* per node, resolved at every execute */
};

/* The graph passes of ts_compile alone (verify, copy, simplify, CSE, DCE,
 * fusion, DCE), for tests and tools. Returns a new graph or NULL. */
ts_graph *ts_compile_graph(const ts_graph *g, const ts_compile_options *opts);

#endif
