/* sharding.c — a partition spec resolved on a mesh into XLA's tile assignment
 * (PyTorch/XLA's Mesh.get_op_sharding followed by HloSharding's normal form),
 * its queries, and the index block each device holds.
 *
 * How PyTorch/XLA builds it (xla_sharding.py, _get_tile_assignment and
 * _get_group_assignment; xla_sharding_util.cc, CreateOpSharding):
 *   1. transpose the logical mesh so that the axes the spec uses come first,
 *      in spec order (tuple axes adjacent, major first), then the unused axes
 *      in ascending order; merge each tuple's axes into one;
 *   2. the used axes tile the tensor dims; the unused ones form the replica
 *      groups, which are contiguous runs of the flattened transposed mesh;
 *   3. XLA's HloSharding::PartialTile sorts each group, turns a group size of 1
 *      into plain tiling and a single group into {replicated}; a 1-device mesh
 *      and a rank-0 tensor are replicated too.
 * Every case of mark_sharding (tiled, partial, replicated) lands in one form:
 * tile dims (tiles..., replication) with sorted groups. */
#include <stdlib.h>
#include <string.h>


#include "mesh/mesh.h"

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

ts_sharding *ts_sharding_new(const ts_mesh *m, const ts_partition_spec *spec, int rank) {
  if (!m || !spec) {
    set_error("sharding: no %s given", m ? "partition spec" : "mesh");
    return NULL;
  }
  if (rank < 0 || rank > TS_MAX_RANK) {
    set_error("sharding: tensor rank %d is out of range (0..%d)", rank, TS_MAX_RANK);
    return NULL;
  }
  if (spec->rank != rank) {
    set_error("partition spec has %d entries but the tensor is rank %d", spec->rank, rank);
    return NULL;
  }
  if (spmd_spec_check(m, spec) < 0) return NULL;

  // Step 1: the mesh axis order of the transposed mesh.
  int order[TS_MESH_MAX_RANK], norder = 0;
  bool used[TS_MESH_MAX_RANK] = {false};
  for (int d = 0; d < rank; d++)
    for (int k = 0; k < spec->naxes[d]; k++) {
      order[norder++] = spec->axes[d][k];
      used[spec->axes[d][k]] = true;
    }
  for (int a = 0; a < m->rank; a++)
    if (!used[a]) order[norder++] = a;

  ts_sharding *s = calloc(1, sizeof *s);
  int *devices = malloc((size_t)m->ndevices * sizeof *devices);
  ts_mesh *mesh = spmd_mesh_clone(m);
  if (!s || !devices || !mesh) {
    free(s), free(devices), ts_mesh_free(mesh);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "sharding: out of memory for %lld devices", (long long)m->ndevices);
    return NULL;
  }
  s->rank = rank;
  s->spec = *spec;
  s->mesh = mesh;
  s->ndevices = m->ndevices;
  s->devices = devices;
  s->num_tiles = 1;
  for (int d = 0; d < rank; d++) {
    s->tiles[d] = 1;
    for (int k = 0; k < spec->naxes[d]; k++) s->tiles[d] *= m->shape[spec->axes[d][k]];
    s->num_tiles *= s->tiles[d];
  }
  s->replication = m->ndevices / s->num_tiles;

  // Step 2: the transposed mesh, flattened. Walk its coordinates (over the
  // axis sizes in `order`) row-major and read the device at the matching
  // position of the original mesh.
  int64_t strides[TS_MESH_MAX_RANK];  // row-major strides of the original mesh
  int64_t st = 1;
  for (int a = m->rank - 1; a >= 0; a--) strides[a] = st, st *= m->shape[a];
  int64_t coord[TS_MESH_MAX_RANK] = {0};  // coordinate along order[k]
  for (int64_t f = 0; f < m->ndevices; f++) {
    int64_t src = 0;
    for (int k = 0; k < norder; k++) src += coord[k] * strides[order[k]];
    devices[f] = m->device_ids[src];
    for (int k = norder - 1; k >= 0; k--) {
      if (++coord[k] < m->shape[order[k]]) break;
      coord[k] = 0;
    }
  }
  // Step 3: sort each replica group (PartialTile's normal form).
  for (int64_t g = 0; g < s->num_tiles; g++)
    qsort(devices + g * s->replication, (size_t)s->replication, sizeof *devices, cmp_int);
  return s;
}

void ts_sharding_free(ts_sharding *s) {
  if (!s) return;
  ts_mesh_free(s->mesh);
  free(s->devices);
  free(s);
}

int ts_sharding_rank(const ts_sharding *s) { return s->rank; }

bool ts_sharding_is_replicated(const ts_sharding *s) { return s->num_tiles == 1; }

int64_t ts_sharding_num_tiles(const ts_sharding *s, int dim) {
  return dim >= 0 && dim < s->rank ? s->tiles[dim] : 1;
}

int64_t ts_sharding_replication(const ts_sharding *s) { return s->replication; }

int64_t ts_sharding_num_devices(const ts_sharding *s) { return s->ndevices; }

const int *ts_sharding_tile_devices(const ts_sharding *s) { return s->devices; }

const ts_partition_spec *ts_sharding_spec(const ts_sharding *s) { return &s->spec; }

const ts_mesh *ts_sharding_mesh(const ts_sharding *s) { return s->mesh; }

bool ts_sharding_equal(const ts_sharding *a, const ts_sharding *b) {
  if (a->rank != b->rank || a->ndevices != b->ndevices) return false;
  if (ts_sharding_is_replicated(a) || ts_sharding_is_replicated(b))
    return ts_sharding_is_replicated(a) && ts_sharding_is_replicated(b);
  for (int d = 0; d < a->rank; d++)
    if (a->tiles[d] != b->tiles[d]) return false;
  return memcmp(a->devices, b->devices, (size_t)a->ndevices * sizeof *a->devices) == 0;
}

int ts_sharding_device_tile(const ts_sharding *s, int device, int64_t *tile, int64_t *replica) {
  int64_t pos = -1;
  for (int64_t i = 0; i < s->ndevices && pos < 0; i++)
    if (s->devices[i] == device) pos = i;
  if (pos < 0)
    return set_error("device %d is not in the mesh (devices 0..%lld)", device,
                        (long long)s->ndevices - 1);
  if (replica) *replica = pos % s->replication;
  int64_t g = pos / s->replication;  // block number, row-major over tiles
  for (int d = s->rank - 1; d >= 0; d--) {
    if (tile) tile[d] = g % s->tiles[d];
    g /= s->tiles[d];
  }
  return 0;
}

static int check_shape(const ts_sharding *s, const int64_t *shape) {
  if (s->rank > 0 && !shape) return set_error("sharding: no tensor shape given");
  for (int d = 0; d < s->rank; d++)
    if (shape[d] < 0)
      return set_error("sharding: tensor dim %d has negative size %lld", d, (long long)shape[d]);
  return 0;
}

int ts_sharding_shard_shape(const ts_sharding *s, const int64_t *shape, int64_t *out) {
  if (check_shape(s, shape) < 0) return -1;
  for (int d = 0; d < s->rank; d++) out[d] = (shape[d] + s->tiles[d] - 1) / s->tiles[d];
  return 0;
}

int ts_sharding_shard_range(const ts_sharding *s, const int64_t *shape, int device,
                            int64_t *start, int64_t *limit) {
  int64_t tile[TS_MAX_RANK];
  if (check_shape(s, shape) < 0 || ts_sharding_device_tile(s, device, tile, NULL) < 0) return -1;
  // As HloSharding::TileOffsetForDevice / TileLimitForDevice: ceil-sized
  // blocks, both ends clamped to the dim (trailing blocks may be short or empty).
  for (int d = 0; d < s->rank; d++) {
    int64_t size = (shape[d] + s->tiles[d] - 1) / s->tiles[d];
    int64_t b = tile[d] * size, e = (tile[d] + 1) * size;
    start[d] = b < shape[d] ? b : shape[d];
    limit[d] = e < shape[d] ? e : shape[d];
  }
  return 0;
}

ts_sharding *ts_sharding_clone(const ts_sharding *s) {
  if (!s) {
    set_error("sharding_clone: sharding is NULL");
    return NULL;
  }
  return ts_sharding_new(s->mesh, &s->spec, s->rank);
}
