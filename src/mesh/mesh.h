/* mesh.h — the plain structs behind ts_mesh and ts_sharding (the value types
 * of the public spmd.h) and the helpers shared by the layers above: list
 * parsing, spec checks, a string builder. This layer sits below the IR: an IR
 * node owns its sharding annotation as a value of this layer, and the IR's
 * printer and serializer call these functions. Depends on util/ only. */
#ifndef TESSEL_MESH_H
#define TESSEL_MESH_H

#include <stdarg.h>
#include <stddef.h>

#include "tessel/spmd.h"  /* ts_mesh, ts_partition_spec, ts_sharding: the public value API */
#include "util/error.h"   /* set_error */
#include "util/parse.h"   /* util_parse_int_list */

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

/* ---- mesh.c ---- */
ts_mesh *spmd_mesh_clone(const ts_mesh *m);
/* "data" or "1" (unnamed mesh) for error messages. */
const char *spmd_axis_label(const ts_mesh *m, int axis, char *buf, size_t len);

/* ---- spec.c ---- */
/* Checks spec against mesh m (axis range, axis used at most once). */
int spmd_spec_check(const ts_mesh *m, const ts_partition_spec *spec);
/* "(data+model, None)" into buf, for messages. */
const char *spmd_spec_str(const ts_mesh *m, const ts_partition_spec *spec, char *buf, size_t len);

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
