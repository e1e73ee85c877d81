/* sharding_print.c — shardings as text: the OpSharding string XLA's
 * HloSharding::ToString prints (explicit device lists, as PyTorch/XLA's
 * _get_xla_sharding_spec shows them), and a picture of which device holds
 * which block, after PyTorch/XLA's visualize_tensor_sharding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "mesh/mesh.h"

void spmd_str_printf(spmd_str *s, const char *fmt, ...) {
  if (s->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = s->cap - s->len;
    int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) break;
    if ((size_t)n < room) {
      s->len += (size_t)n;
      return;
    }
    size_t cap = s->cap ? s->cap : 64;
    while (cap < s->len + (size_t)n + 1) cap *= 2;
    char *b = realloc(s->buf, cap);
    if (!b) break;
    s->buf = b;
    s->cap = cap;
  }
  free(s->buf);
  s->buf = NULL;
  s->failed = true;
}

char *spmd_str_take(spmd_str *s) {
  if (!s->failed && !s->buf) spmd_str_printf(s, "%s", "");
  if (s->failed) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "out of memory building a sharding string");
    return NULL;
  }
  char *b = s->buf;
  memset(s, 0, sizeof *s);
  return b;
}

char *ts_sharding_to_string(const ts_sharding *s) {
  spmd_str out = {0};
  if (ts_sharding_is_replicated(s)) {
    spmd_str_printf(&out, "{replicated}");
    return spmd_str_take(&out);
  }
  // devices=[tile dims(,replication)]id,id,...  (TileAssignment::Print)
  spmd_str_printf(&out, "{devices=[");
  for (int d = 0; d < s->rank; d++) spmd_str_printf(&out, "%s%lld", d ? "," : "", (long long)s->tiles[d]);
  if (s->replication > 1) spmd_str_printf(&out, ",%lld", (long long)s->replication);
  spmd_str_printf(&out, "]");
  for (int64_t i = 0; i < s->ndevices; i++) spmd_str_printf(&out, "%s%d", i ? "," : "", s->devices[i]);
  if (s->replication > 1) spmd_str_printf(&out, " last_tile_dim_replicate");
  spmd_str_printf(&out, "}");
  return spmd_str_take(&out);
}

// "(16, 16)" into out.
static void print_dims(spmd_str *out, int rank, const int64_t *dims) {
  spmd_str_printf(out, "(");
  for (int d = 0; d < rank; d++) spmd_str_printf(out, "%s%lld", d ? ", " : "", (long long)dims[d]);
  spmd_str_printf(out, "%s)", rank == 1 ? "," : "");
}

// The device list of block g ("0,1") into buf.
static void block_label(const ts_sharding *s, int64_t g, char *buf, size_t len) {
  size_t n = 0;
  buf[0] = '\0';
  for (int64_t r = 0; r < s->replication && n < len; r++)
    n += (size_t)snprintf(buf + n, len - n, "%s%d", r ? "," : "", s->devices[g * s->replication + r]);
  if (n >= len && len > 4) memcpy(buf + len - 4, "...", 4);  // huge replica groups
}

static void print_rule(spmd_str *out, int64_t cols, int width) {
  for (int64_t c = 0; c < cols; c++) {
    spmd_str_printf(out, "+");
    for (int k = 0; k < width; k++) spmd_str_printf(out, "-");
  }
  spmd_str_printf(out, "+\n");
}

// Rank 0..2: rows = blocks of dim 0, columns = blocks of dim 1 (a rank-1
// tensor is drawn as one row, as visualize_tensor_sharding does).
static void print_grid(spmd_str *out, const ts_sharding *s) {
  int64_t rows = s->rank == 2 ? s->tiles[0] : 1;
  int64_t cols = s->rank == 2 ? s->tiles[1] : s->rank == 1 ? s->tiles[0] : 1;
  char label[128];
  int width = 0;
  for (int64_t g = 0; g < s->num_tiles; g++) {
    block_label(s, g, label, sizeof label);
    int n = (int)strlen(label);
    if (n > width) width = n;
  }
  width += 4;
  print_rule(out, cols, width);
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c = 0; c < cols; c++) {
      block_label(s, r * cols + c, label, sizeof label);
      int n = (int)strlen(label), left = (width - n) / 2;
      spmd_str_printf(out, "|%*s%s%*s", left, "", label, width - n - left, "");
    }
    spmd_str_printf(out, "|\n");
    print_rule(out, cols, width);
  }
}

// Rank > 2: one line per device, in device id order.
static void print_devices(spmd_str *out, const ts_sharding *s, const int64_t *shape) {
  for (int dev = 0; dev < s->ndevices; dev++) {
    int64_t tile[TS_MAX_RANK], start[TS_MAX_RANK], limit[TS_MAX_RANK], replica = 0;
    ts_sharding_device_tile(s, dev, tile, &replica);
    ts_sharding_shard_range(s, shape, dev, start, limit);
    spmd_str_printf(out, "device %d: block ", dev);
    print_dims(out, s->rank, tile);
    spmd_str_printf(out, " [");
    for (int d = 0; d < s->rank; d++)
      spmd_str_printf(out, "%s%lld:%lld", d ? ", " : "", (long long)start[d], (long long)limit[d]);
    spmd_str_printf(out, "]");
    if (s->replication > 1)
      spmd_str_printf(out, " replica %lld of %lld", (long long)replica, (long long)s->replication);
    spmd_str_printf(out, "\n");
  }
}

char *ts_sharding_visualize(const ts_sharding *s, const int64_t *shape) {
  int64_t block[TS_MAX_RANK];
  if (ts_sharding_shard_shape(s, shape, block) < 0) return NULL;
  spmd_str out = {0};
  spmd_str_printf(&out, "tensor ");
  print_dims(&out, s->rank, shape);
  spmd_str_printf(&out, " on mesh (");
  for (int a = 0; a < s->mesh->rank; a++) {
    char label[TS_MESH_MAX_NAME];
    if (s->mesh->named)
      spmd_str_printf(&out, "%s%s=%lld", a ? ", " : "", spmd_axis_label(s->mesh, a, label, sizeof label),
                      (long long)s->mesh->shape[a]);
    else
      spmd_str_printf(&out, "%s%lld", a ? ", " : "", (long long)s->mesh->shape[a]);
  }
  spmd_str_printf(&out, "%s): %lld block%s of ", s->mesh->rank == 1 && !s->mesh->named ? "," : "",
                  (long long)s->num_tiles, s->num_tiles == 1 ? "" : "s");
  print_dims(&out, s->rank, block);
  spmd_str_printf(&out, ", each on %lld device%s\n", (long long)s->replication,
                  s->replication == 1 ? "" : "s");
  if (s->rank <= 2)
    print_grid(&out, s);
  else
    print_devices(&out, s, shape);
  return spmd_str_take(&out);
}
