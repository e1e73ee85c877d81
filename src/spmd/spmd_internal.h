/* spmd_internal.h — the plain structs behind ts_mesh and ts_sharding, and the
 * helpers shared by the spmd/ files and tools (list parsing, a string builder).
 * A later partitioner reads these fields directly. */
#ifndef TESSEL_SPMD_INTERNAL_H
#define TESSEL_SPMD_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>

#include "ir/ir.h" /* ts_node: replica groups */
#include "tessel/spmd.h"

struct ts_mesh {
  int rank;
  int64_t shape[TS_MESH_MAX_RANK];                 // (rank) devices along each axis
  bool named;                                      // false: axes are referenced by index only
  char names[TS_MESH_MAX_RANK][TS_MESH_MAX_NAME];  // (rank) "" when !named
  int64_t ndevices;                                // N = product of shape
  int *device_ids;                                 // (N) row-major over shape, a permutation of 0..N-1
};

/* XLA's normal form of a (partially) tiled sharding: the tile assignment has
 * dims (tiles[0], ..., tiles[rank-1], replication) and lists devices row-major
 * over it, each group of `replication` devices (one block) sorted ascending,
 * as HloSharding::PartialTile leaves it. Replicated: every tiles[d] == 1. */
struct ts_sharding {
  int rank;                      // tensor rank
  ts_partition_spec spec;        // as given (axis indices), validated
  ts_mesh *mesh;                 // owned copy
  int64_t tiles[TS_MAX_RANK];    // (rank) blocks along each tensor dim
  int64_t num_tiles;             // product of tiles
  int64_t replication;           // N / num_tiles devices per block
  int64_t ndevices;              // N
  int *devices;                  // (N) the tile assignment
};

/* ---- replica.c ---- */
#define TS_ALL_REPLICAS (-1) /* the group of a ts_replica_all_reduce before compile */
bool replica_is_all(const ts_node *n);
/* Gives every replica all-reduce of g the group of all n_devices devices. */
int replica_resolve_groups(ts_graph *g, int n_devices);

/* ---- mesh.c ---- */
ts_mesh *spmd_mesh_clone(const ts_mesh *m);
/* "data" or "1" (unnamed mesh) for error messages. */
const char *spmd_axis_label(const ts_mesh *m, int axis, char *buf, size_t len);

/* ---- spec.c ---- */
/* Checks spec against mesh m (axis range, axis used at most once). */
int spmd_spec_check(const ts_mesh *m, const ts_partition_spec *spec);
/* "(data+model, None)" into buf, for messages. */
const char *spmd_spec_str(const ts_mesh *m, const ts_partition_spec *spec, char *buf, size_t len);

/* ---- list parsing (mesh.c) ---- */
/* Parses a comma-separated list of integers in [min, max] ("2,4"; "" is the
 * empty list) into out (at most cap values). `what` names the list in errors
 * ("mesh shape"). Returns the count, or -1 with the error set. */
int spmd_parse_int_list(const char *text, const char *what, int64_t min, int64_t max,
                        int64_t *out, int cap);

/* ---- a growable string (sharding_print.c) ---- */
typedef struct {
  char *buf;
  size_t len, cap;
  bool failed;  // an allocation failed; buf is then freed and NULL
} spmd_str;
void spmd_str_printf(spmd_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands over the text (NULL, error set, if an allocation failed). */
char *spmd_str_take(spmd_str *s);

#endif
