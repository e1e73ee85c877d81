/* part_internal.h — the state of one run of the partitioner (one device's
 * program) shared by partition.c (op rules) and reshard.c (collectives). */
#ifndef TS_SPMD_PART_INTERNAL_H
#define TS_SPMD_PART_INTERNAL_H

#include "spmd/partition.h"

typedef struct part_memo {
  ts_partition_spec spec;
  int32_t id;
  struct part_memo *next;
} part_memo;

typedef struct {
  const ts_graph *g;             /* global program */
  const ts_mesh *m;
  const ts_partition_spec *W;    /* per global node: its (even) sharding */
  int device;
  int64_t coord[TS_MESH_MAX_RANK];  /* this device's mesh coordinates */
  ts_graph *L;                   /* the per-device program being built */
  int32_t *val;                  /* per global node: local value laid out as W */
  part_memo **memo;              /* per global node: other layouts already made */
  uint32_t *partial;             /* per global node: mesh axes of a sum left pending for its one user
                                    (a dot that is a scatter_add's base: lower_dot), else 0 */
  spmd_coll_list *colls;         /* NULL: do not record */
  int cause;                     /* global node being lowered */
} part;

/* Padded block shape of a (global) shape under s. */
void part_local_shape(const part *p, const ts_partition_spec *s, int rank, const int64_t *shape, int64_t *out);
/* This device's block index along a dim split over mesh axes (major first). */
int64_t part_tile_index(const part *p, const int *axes, int n);
/* Appends a node to the local program (attr copied without owned parts). */
int32_t part_emit(part *p, ts_op op, ts_dtype dt, int rank, const int64_t *shape, int n_in, const int32_t *in,
                  const ts_attr *attr);
/* Appends collective `op` over mesh axes (major first) to the local program
 * and records it: reduce `kind`; gather / scatter dim `axis`; all-to-all
 * splits `axis` and concatenates `dim2`. Result shape `shape` (local). */
int32_t part_emit_coll(part *p, ts_op op, ts_dtype dt, int rank, const int64_t *shape, int32_t v, const int *axes,
                       int n, ts_reduce_kind kind, int axis, int dim2);
/* Local value v, laid out as S with a pending `kind` reduction over mesh axes
 * P, re-laid out as T. */
int32_t part_reshard(part *p, int32_t v, ts_dtype dt, int rank, const int64_t *shape, ts_partition_spec S,
                     uint32_t P, ts_reduce_kind kind, const ts_partition_spec *T);
/* Global node `node`'s value laid out as T (memoized). */
int32_t part_get(part *p, int32_t node, const ts_partition_spec *T);

#endif
