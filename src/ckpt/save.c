/* save.c — ts_ckpt_save: every process writes the blocks of its own devices
 * into one safetensors file of a temporary directory, then process 0
 * assembles index.json from the processes' small descriptions of what they
 * wrote and publishes the checkpoint by renames (commit.c).
 *
 * Stages and their barriers (ts_client_check_same, which also carries each
 * process's verdict so that one failure fails every process):
 *   prepare  process 0 creates ROOT/.tmp-step-N             | barrier
 *   files    each process writes shard-P-of-Q.safetensors     | barrier
 *            and shard-P-of-Q.json (its blocks), fsync'ed
 *   commit   process 0: index.json, rename into place,        | barrier
 *            `latest`, pruning */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "util/error.h"
#include "util/hash.h" /* util_hash64 */

#define PATH_MAX_LEN 4096

void (*ckpt_test_hook)(const char *stage); /* ckpt_internal.h: NULL unless a test sets it */

void ckpt_test_stage(const char *stage) {
  if (ckpt_test_hook) ckpt_test_hook(stage);
}

ts_ckpt_kind ts_ckpt_kind_of(const char *name, bool trainable) {
  static const char *const sfx[] = {".exp_avg", ".exp_avg_sq", ".momentum_buffer"};
  size_t n = name ? strlen(name) : 0;
  for (int k = 0; k < 3; k++) {
    size_t m = strlen(sfx[k]);
    if (n > m && strcmp(name + n - m, sfx[k]) == 0) return TS_CKPT_OPTIMIZER;
  }
  return trainable ? TS_CKPT_PARAM : TS_CKPT_BUFFER;
}

/* Every process reports its verdict for `stage`; 0 only if all succeeded.
 * Collective (a barrier: no process passes before all have arrived). */
static int ckpt_agree(ts_client *c, const char *stage, int rc) {
  char own[1024];
  snprintf(own, sizeof own, "%s", rc == 0 ? "" : ts_last_error());
  char text[1200];
  snprintf(text, sizeof text, "checkpoint %s: %s", stage, rc == 0 ? "ok" : own);
  int same = ts_client_check_same(c, "the checkpoint save", text);
  if (rc != 0) return set_error("%s", own);
  if (same != 0) return set_error("checkpoint %s failed on another process: %s", stage, ts_last_error());
  return 0;
}

/* A block this process writes: tensor t, range [start, limit) read from device. */
typedef struct {
  int t, device;
  int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK];
} save_block;

/* The blocks of tensor i this process writes: every distinct non-empty
 * range once, by the lowest device id holding it (replicas written once). */
static int save_plan_tensor(ts_client *c, const ts_ckpt_entry *e, int i, save_block **out, int *n, int *cap) {
  int nd = ts_client_num_devices(c), rank = ts_buffer_rank(e->buf);
  int64_t (*seen)[2][TS_MAX_RANK] = malloc((size_t)nd * sizeof *seen);
  if (!seen) return set_error("checkpoint: out of memory");
  int ns = 0, rc = 0;
  for (int d = 0; d < nd && rc == 0; d++) {
    int64_t st[TS_MAX_RANK] = {0}, li[TS_MAX_RANK] = {0};
    if (ts_buffer_shard_range(e->buf, d, st, li) < 0) {
      rc = -1;
      break;
    }
    if (ckpt_block_numel(rank, st, li) == 0) continue;
    bool dup = false;
    for (int k = 0; k < ns && !dup; k++)
      dup = memcmp(seen[k][0], st, sizeof st) == 0 && memcmp(seen[k][1], li, sizeof li) == 0;
    if (dup) continue;
    memcpy(seen[ns][0], st, sizeof st);
    memcpy(seen[ns][1], li, sizeof li);
    ns++;
    if (!ts_client_is_local_device(c, d)) continue;
    if (*n == *cap) {
      int nc = *cap ? 2 * *cap : 16;
      save_block *nb = realloc(*out, (size_t)nc * sizeof *nb);
      if (!nb) {
        rc = set_error("checkpoint: out of memory");
        break;
      }
      *out = nb, *cap = nc;
    }
    save_block *b = &(*out)[(*n)++];
    memset(b, 0, sizeof *b);
    b->t = i, b->device = d;
    memcpy(b->start, st, sizeof st);
    memcpy(b->limit, li, sizeof li);
  }
  free(seen);
  return rc;
}

static void save_block_name(const ts_ckpt_entry *e, const save_block *b, char *buf, size_t n) {
  ck_tensor t = {.name = (char *)e->name, .rank = ts_buffer_rank(e->buf)};
  memcpy(t.shape, ts_buffer_shape(e->buf), (size_t)t.rank * sizeof *t.shape);
  ck_block cb = {0};
  memcpy(cb.start, b->start, sizeof cb.start);
  memcpy(cb.limit, b->limit, sizeof cb.limit);
  ckpt_block_name(&t, &cb, buf, n);
}

/* Writes this process's block file and its description (sidecar JSON). */
static int save_files(ts_client *c, const char *tmp, int n, const ts_ckpt_entry *t) {
  int rank = ts_client_process_index(c), np = ts_client_process_count(c);
  save_block *bl = NULL;
  int nb = 0, cap = 0, rc = 0;
  for (int i = 0; i < n && rc == 0; i++) rc = save_plan_tensor(c, &t[i], i, &bl, &nb, &cap);
  st_entry *se = calloc((size_t)nb + 1, sizeof *se);
  uint64_t *bh = calloc((size_t)nb + 1, sizeof *bh);
  char *hdr = NULL, *side = NULL;
  void *data = NULL;
  size_t hlen = 0;
  int fd = -1;
  char name[128], path[PATH_MAX_LEN];
  snprintf(name, sizeof name, "shard-%05d-of-%05d.safetensors", rank, np);
  snprintf(path, sizeof path, "%s/%s", tmp, name);
  if (rc == 0 && (!se || !bh)) rc = set_error("checkpoint: out of memory");
  uint64_t off = 0;
  for (int k = 0; k < nb && rc == 0; k++) {
    const ts_ckpt_entry *e = &t[bl[k].t];
    char bn[2048];
    save_block_name(e, &bl[k], bn, sizeof bn);
    se[k].dt = ts_buffer_dtype(e->buf);
    se[k].rank = ts_buffer_rank(e->buf);
    for (int d = 0; d < se[k].rank; d++) se[k].shape[d] = bl[k].limit[d] - bl[k].start[d];
    se[k].begin = off;
    off += (uint64_t)ts_shape_numel(se[k].rank, se[k].shape) * ts_dtype_size(se[k].dt);
    se[k].end = off;
    if (!(se[k].name = strdup(bn))) rc = set_error("checkpoint: out of memory");
  }
  if (rc == 0 && !(hdr = st_header_build(nb, se, &hlen))) rc = -1;
  if (rc == 0 && (fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
    rc = set_error("%s: cannot create: %s", path, strerror(errno));
  uint8_t prefix[8];
  for (int k = 0; k < 8; k++) prefix[k] = (uint8_t)((uint64_t)hlen >> (8 * k)); /* little-endian u64 */
  uint64_t header_hash = 0;
  if (rc == 0) {
    char *ph = malloc(8 + hlen);
    if (!ph) rc = set_error("checkpoint: out of memory");
    else {
      memcpy(ph, prefix, 8);
      memcpy(ph + 8, hdr, hlen);
      header_hash = util_hash64(ph, 8 + hlen, 0);
      rc = ckpt_write_all(fd, ph, 8 + hlen, path);
      free(ph);
    }
  }
  for (int k = 0; k < nb && rc == 0; k++) { /* one block in host memory at a time */
    size_t bytes = (size_t)(se[k].end - se[k].begin);
    void *nd = realloc(data, bytes ? bytes : 1);
    if (!nd) {
      rc = set_error("checkpoint: out of memory (block %s, %zu bytes)", se[k].name, bytes);
      break;
    }
    data = nd;
    if (ts_buffer_read_shard(t[bl[k].t].buf, bl[k].device, data, bytes) < 0) {
      rc = set_error("checkpoint: reading %s from device %d: %s", se[k].name, bl[k].device, ts_last_error());
      break;
    }
    bh[k] = util_hash64(data, bytes, 0);
    rc = ckpt_write_all(fd, data, bytes, path);
  }
  if (rc == 0 && fsync(fd) != 0) rc = set_error("%s: fsync failed: %s", path, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && rc == 0) rc = set_error("%s: close failed: %s", path, strerror(errno));
  uint64_t fhash = 0, fbytes = 0;
  if (rc == 0) rc = ckpt_file_hash(path, &fhash, &fbytes); /* what is on disk, as load will check it */
  if (rc == 0) {
    ts_strbuf sb = {0};
    sb_printf(&sb, "{\"file\":");
    json_write_string(&sb, name);
    sb_printf(&sb, ",\"bytes\":%llu,\"hash\":\"%016" PRIx64 "\",\"header_hash\":\"%016" PRIx64 "\",\"blocks\":[",
                 (unsigned long long)fbytes, fhash, header_hash);
    for (int k = 0; k < nb; k++) {
      int r = se[k].rank;
      sb_printf(&sb, "%s{\"tensor\":%d,\"start\":[", k ? "," : "", bl[k].t);
      for (int d = 0; d < r; d++) sb_printf(&sb, d ? ",%lld" : "%lld", (long long)bl[k].start[d]);
      sb_printf(&sb, "],\"limit\":[");
      for (int d = 0; d < r; d++) sb_printf(&sb, d ? ",%lld" : "%lld", (long long)bl[k].limit[d]);
      sb_printf(&sb, "],\"byte_range\":[%llu,%llu],\"hash\":\"%016" PRIx64 "\"}",
                   (unsigned long long)(8 + hlen + se[k].begin), (unsigned long long)(8 + hlen + se[k].end), bh[k]);
    }
    sb_printf(&sb, "]}\n");
    if (!(side = sb_finish(&sb, "checkpoint"))) rc = -1;
  }
  if (rc == 0) {
    snprintf(path, sizeof path, "%s/shard-%05d-of-%05d.json", tmp, rank, np);
    rc = ckpt_write_small(path, side, strlen(side));
  }
  for (int k = 0; se && k < nb; k++) free(se[k].name);
  free(se);
  free(bh);
  free(bl);
  free(hdr);
  free(side);
  free(data);
  return rc;
}

/* The mesh of the first sharded buffer, as "data=2,model=2". */
static void save_mesh_text(int n, const ts_ckpt_entry *t, char *buf, size_t len) {
  buf[0] = 0;
  for (int i = 0; i < n; i++) {
    const ts_sharding *s = ts_buffer_sharding(t[i].buf);
    if (!s) continue;
    const ts_mesh *m = ts_sharding_mesh(s);
    int o = 0;
    for (int a = 0; a < ts_mesh_rank(m) && o >= 0 && (size_t)o < len; a++) {
      const char *nm = ts_mesh_axis_name(m, a);
      o += nm ? snprintf(buf + o, len - (size_t)o, "%s%s=%lld", a ? "," : "", nm, (long long)ts_mesh_axis_size(m, a))
              : snprintf(buf + o, len - (size_t)o, "%s%lld", a ? "," : "", (long long)ts_mesh_axis_size(m, a));
    }
    return;
  }
}

static int save_check_args(ts_client *c, const char *root, const ts_ckpt_meta *meta, int n, const ts_ckpt_entry *t) {
  if (!c || !root || !root[0] || !meta || n < 0 || (n > 0 && !t))
    return set_error("ts_ckpt_save: NULL or empty argument (client, root, meta or tensors)");
  if (meta->step < 0 || meta->step > 99999999)
    return set_error("ts_ckpt_save: step %lld is outside [0, 99999999]", (long long)meta->step);
  if (strlen(root) > 3000) return set_error("ts_ckpt_save: root path is too long");
  for (int i = 0; i < n; i++) {
    if (!t[i].name || !t[i].name[0] || strlen(t[i].name) > 1000 || !t[i].buf)
      return set_error("ts_ckpt_save: tensor %d has no name, a name over 1000 bytes or no buffer", i);
    if ((unsigned)t[i].kind > TS_CKPT_BUFFER)
      return set_error("ts_ckpt_save: tensor %s has unknown kind %d", t[i].name, (int)t[i].kind);
    for (int j = 0; j < i; j++)
      if (strcmp(t[i].name, t[j].name) == 0) return set_error("ts_ckpt_save: tensor %s is listed twice", t[i].name);
  }
  return 0;
}

int ts_ckpt_save(ts_client *c, const char *root, const ts_ckpt_meta *meta, int n, const ts_ckpt_entry *t, int keep) {
  int rc = save_check_args(c, root, meta, n, t);
  if (rc != 0 && !c) return -1;
  ts_ckpt_meta m = {0};
  char tmp[PATH_MAX_LEN] = "";
  int rank = ts_client_process_index(c);
  if (rc == 0) {
    m = *meta;
    if (!m.mesh[0]) save_mesh_text(n, t, m.mesh, sizeof m.mesh);
    m.num_devices = ts_client_num_devices(c);
    m.process_count = ts_client_process_count(c);
    snprintf(m.tessel_version, sizeof m.tessel_version, "%s", TS_VERSION_STRING);
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-%08lld", root, (long long)m.step);
    if (rank == 0) {
      if (ckpt_prepare_root(root) < 0)
        rc = -1;
      else if (mkdir(tmp, 0755) != 0)
        rc = set_error("%s: cannot create: %s", tmp, strerror(errno));
    }
  }
  /* Barrier: the temporary directory exists before anyone writes into it. */
  if (ckpt_agree(c, "prepare", rc) < 0) goto fail;
  rc = save_files(c, tmp, n, t);
  if (rc == 0) ckpt_test_stage("files");
  /* Barrier: every block file is on disk before process 0 indexes them. */
  if (ckpt_agree(c, "files", rc) < 0) goto fail;
  if (rank == 0) rc = ckpt_commit(c, root, tmp, &m, n, t, keep);
  /* Barrier: nobody returns (and, say, loads or saves again) before the
   * checkpoint is in place. */
  if (ckpt_agree(c, "commit", rc) < 0) goto fail;
  return 0;
fail:
  if (rank == 0 && tmp[0]) {
    char err[1024];
    snprintf(err, sizeof err, "%s", ts_last_error());
    ckpt_remove_dir(tmp); /* best effort: the previous checkpoint is untouched */
    set_error("%s", err);
  }
  return -1;
}

int ts_ckpt_save_params(ts_client *c, const char *root, ts_params *p, const ts_ckpt_meta *meta, int keep) {
  int n = ts_params_count(p);
  ts_ckpt_entry *t = calloc((size_t)n + 1, sizeof *t);
  if (!t) return set_error("ts_ckpt_save_params: out of memory");
  int rc = 0;
  for (int i = 0; i < n && rc == 0; i++) {
    t[i].name = ts_params_name(p, i);
    t[i].kind = ts_ckpt_kind_of(t[i].name, ts_params_trainable(p, i));
    if (!(t[i].buf = ts_params_buffer(p, c, i))) rc = -1;
  }
  if (rc == 0) rc = ts_ckpt_save(c, root, meta, n, t, keep);
  else if (c) ckpt_agree(c, "prepare", rc); /* this process's failure alone: tell the others at their first barrier */
  free(t);
  return rc;
}
