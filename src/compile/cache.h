/* cache.h — the compile cache: optimized programs by key, in memory (one
 * compile per program per process) and on disk under the cache directory
 * (a later process loads instead of compiling).
 *
 * Key: two independent 64-bit hashes of the tessel version, the cache
 * format version, the compile options that change the result, an `extra`
 * text (mesh and shardings for SPMD programs) and the canonical graph text.
 * Stored: the optimized graph(s) after every pass, serialized exactly
 * (ir/serialize.h). The memory plan is not stored: plan_build is a
 * linear liveness scan, far cheaper than the passes, and recomputing it
 * keeps a file independent of the planner's internals.
 *
 * Entry file <dir>/<key hex>.tsc: "TESSELCC", u32 format version, the tessel
 * version (16 bytes), the key (16 bytes), u64 payload length, u64 payload
 * checksum; payload: u32 graph count, then the graphs. Written to a temp
 * file, fsync'd, renamed (a crash never leaves a readable half entry). On
 * load every header field and the checksum are checked; a corrupt or foreign
 * entry is ignored with one warning on stderr (per process), counted in
 * PersistentCacheDiscarded, recompiled and overwritten. */
#ifndef TS_CACHE_H
#define TS_CACHE_H

#include "ir/ir.h"
#include "tessel/metrics.h" /* ts_compile_cache_set_dir, _clear */
#include "tessel/runtime.h" /* ts_compile_options */

/* 3: graphs name their ops (TS_SERIALIZE_VERSION 2); older entries are
 * ignored and recompiled. 4: a FUSED node may be a fused reduction
 * (attr.n_dims > 0), which an older binary would run as elementwise. */
#define TS_CACHE_FORMAT_VERSION 4

typedef struct {
  uint64_t lo, hi;
} ts_cache_key;

/* Key of compiling g with opts; extra (may be NULL) adds what else decides
 * the result (mesh, shardings). Returns 0 or -1 (error set). */
int cache_key_make(const ts_graph *g, const ts_compile_options *opts, const char *extra, ts_cache_key *out);

/* Produces the optimized graphs for a cache miss: returns their count (>= 1)
 * and a malloc'd array of new graphs in *graphs, or -1 with the error set. */
typedef int (*ts_cache_compile_fn)(void *user, ts_graph ***graphs);

/* The optimized graphs for (g, opts, extra): from memory (CachedCompile),
 * else from disk (PersistentCacheHit), else by calling fn (UncachedCompile,
 * CompileTime) and storing the result in both. Returns the count and a
 * malloc'd array of new graphs the caller owns, or -1 with fn's error. */
int cache_run(const ts_graph *g, const ts_compile_options *opts, const char *extra,
                         ts_cache_compile_fn fn, void *user, ts_graph ***out);

/* The single-program form used by ts_compile: compile_graph through the
 * cache. Returns a new optimized graph or NULL. */
ts_graph *cache_compile_graph(const ts_graph *g, const ts_compile_options *opts);

/* The entry file of key k in dir (for tests and tools): "<dir>/<32 hex>.tsc". */
void cache_entry_path(const char *dir, const ts_cache_key *k, char *buf, size_t len);


#endif
