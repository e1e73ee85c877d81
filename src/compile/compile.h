/* compile.h — the compile pipeline's internal entry points: graph passes,
 * SPMD and replica compiles. The executable they build is the runtime's
 * (runtime/executable.h); compile sits above the runtime and hands it over. */
#ifndef TS_COMPILE_H
#define TS_COMPILE_H

#include "runtime/executable.h"

/* The graph passes of ts_compile alone (verify, copy, simplify, CSE, DCE,
 * fusion, DCE, schedule), for tests and tools. Returns a new graph or NULL. */
ts_graph *compile_graph(const ts_graph *g, const ts_compile_options *opts);

/* compile_spmd.c: compiles g for every device of the client (mesh m). */
ts_executable *compile_spmd(ts_client *c, const ts_graph *g, const ts_mesh *m, const ts_compile_options *opts);
/* compile_replicas.c: compiles the replica program g (options.replicas) for
 * every device of this process. */
ts_executable *compile_replicas(ts_client *c, const ts_graph *g, const ts_compile_options *opts);
/* compile.c: an executable of an already optimized graph on client device
 * `device` (takes over opt). */
ts_executable *compile_local(ts_client *c, int device, ts_graph *opt, const ts_compile_options *opts);

#endif
