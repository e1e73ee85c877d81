/* load.c — opening a checkpoint and reading tensors back onto any mesh.
 *
 * ts_ckpt_open reads index.json only. A block file is opened the first time
 * one of its blocks is needed: its size must be the index's, its header
 * (length prefix + JSON) must hash to the index's header_hash, parse as
 * strict safetensors and describe exactly the blocks the index places in it
 * (names, dtypes, shapes, byte ranges). A block is always read whole and its
 * checksum compared before any of it is used; a device then keeps the part
 * that overlaps its own block of the destination buffer (resharding). */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "util/error.h"

#define PATH_LEN 4096
#define LOAD_ALIGN 4096u /* O_DIRECT: offsets, lengths and memory in multiples of this */

int ckpt_load_direct = 1; /* ckpt_internal.h */

void ts_ckpt_close(ts_ckpt *ck) {
  if (!ck) return;
  for (int i = 0; i < ck->nf; i++) {
    if (ck->f[i].fd >= 0) close(ck->f[i].fd);
    if (ck->f[i].loaded && ck->f[i].dfd >= 0) close(ck->f[i].dfd);
  }
  ckpt_free_contents(ck);
  free(ck->path);
  free(ck);
}

/* Reads the 8-byte length and the header of an open file of `size` bytes. */
static char *load_header(int fd, int version, uint64_t size, const char *path, uint64_t *hlen, uint64_t *hhash) {
  uint8_t pre[8];
  if (size < 8) {
    set_error("%s: %llu bytes, too short for a safetensors file (truncated?)", path, (unsigned long long)size);
    return NULL;
  }
  if (ckpt_pread_all(fd, pre, 8, 0, path) < 0) return NULL;
  uint64_t n = 0;
  for (int k = 7; k >= 0; k--) n = n << 8 | pre[k];
  if (n > size - 8 || n > CKPT_MAX_HEADER) {
    set_error("%s: safetensors header length %llu runs past the end of the file (%llu bytes)", path,
                 (unsigned long long)n, (unsigned long long)size);
    return NULL;
  }
  char *buf = malloc(8 + n + 1);
  if (!buf) {
    set_error("%s: out of memory", path);
    return NULL;
  }
  memcpy(buf, pre, 8);
  if (ckpt_pread_all(fd, buf + 8, n, 8, path) < 0) {
    free(buf);
    return NULL;
  }
  buf[8 + n] = 0;
  *hlen = n;
  *hhash = ckpt_sum(version, buf, 8 + n);
  return buf;
}

/* The path of file fi, for opening and for errors. */
static void file_path(const ts_ckpt *ck, int fi, char *path, size_t n) {
  if (ck->plain) snprintf(path, n, "%s", ck->path);
  else snprintf(path, n, "%s/%s", ck->path, ck->f[fi].name);
}

/* Opens and checks file f against the index (once). */
static int load_file(ts_ckpt *ck, int fi) {
  ck_file *f = &ck->f[fi];
  if (f->loaded) return 0;
  char path[PATH_LEN];
  file_path(ck, fi, path, sizeof path);
  if (f->fd < 0 && (f->fd = open(path, O_RDONLY)) < 0)
    return set_error("checkpoint %s: file %s is missing or unreadable: %s", ck->path, f->name, strerror(errno));
  posix_fadvise(f->fd, 0, 0, POSIX_FADV_SEQUENTIAL); /* larger read-ahead */
  struct stat st;
  if (fstat(f->fd, &st) != 0 || !S_ISREG(st.st_mode)) return set_error("%s: not a regular file", path);
  if ((uint64_t)st.st_size != f->bytes)
    return set_error("%s: %lld bytes but the index says %llu (truncated or replaced)", path, (long long)st.st_size,
                        (unsigned long long)f->bytes);
  uint64_t hlen, hhash;
  char *hdr = load_header(f->fd, ck->version, f->bytes, path, &hlen, &hhash);
  if (!hdr) return -1;
  int rc = 0;
  if (!ck->plain && hhash != f->header_hash)
    rc = set_error("%s: header checksum mismatch (corrupted, or a file from another checkpoint)", path);
  if (rc == 0) rc = st_header_parse(hdr + 8, hlen, f->bytes - 8 - hlen, path, &f->hdr);
  free(hdr);
  if (rc != 0) return -1;
  /* The header must describe exactly the index's blocks of this file. */
  int nblocks = 0;
  for (int i = 0; i < ck->nt && rc == 0; i++) {
    const ck_tensor *t = &ck->t[i];
    for (int k = 0; k < t->nb && rc == 0; k++) {
      const ck_block *b = &t->b[k];
      if (b->file != fi) continue;
      nblocks++;
      char bn[2048];
      ckpt_block_name(t, b, bn, sizeof bn);
      const st_entry *e = st_header_find(&f->hdr, bn);
      if (!e) {
        rc = set_error("%s: tensor %s: block '%s' is not in the file", path, t->name, bn);
        break;
      }
      bool same = e->dt == t->dt && e->rank == t->rank;
      for (int d = 0; same && d < t->rank; d++) same = e->shape[d] == b->limit[d] - b->start[d];
      if (!same && ck->plain && t->nb == 1) /* a view (ckpt_plain_view): the same elements */
        same = e->dt == t->dt && ts_shape_numel(e->rank, e->shape) == ts_shape_numel(t->rank, t->shape);
      if (!same) {
        rc = set_error("%s: tensor %s: the file has '%s' as %s rank %d, the index as %s rank %d", path, t->name,
                          bn, ts_dtype_name(e->dt), e->rank, ts_dtype_name(t->dt), t->rank);
        break;
      }
      if (e->begin + 8 + hlen != b->begin || e->end + 8 + hlen != b->end)
        rc = set_error("%s: tensor %s: '%s' is at bytes [%llu, %llu) in the file but [%llu, %llu) in the index",
                          path, t->name, bn, (unsigned long long)(e->begin + 8 + hlen),
                          (unsigned long long)(e->end + 8 + hlen), (unsigned long long)b->begin,
                          (unsigned long long)b->end);
    }
  }
  if (rc == 0 && nblocks != f->hdr.n)
    rc = set_error("%s: holds %d tensors but the index places %d blocks in it (a foreign file?)", path, f->hdr.n,
                      nblocks);
  if (rc != 0) {
    st_header_free(&f->hdr);
    return -1;
  }
  /* The blocks themselves are read with O_DIRECT where the filesystem allows it (load_block_direct). */
  f->dfd = ckpt_load_direct ? open(path, O_RDONLY | O_DIRECT) : -1;
  f->loaded = true;
  return 0;
}

int ckpt_prefetch(ts_ckpt *ck, int file, uint64_t begin, uint64_t end) {
  if (file < 0 || file >= ck->nf || load_file(ck, file) < 0) return -1;
  if (ck->f[file].dfd < 0) /* buffered reads: the kernel reads ahead (direct reads bypass the cache) */
    posix_fadvise(ck->f[file].fd, (off_t)begin, (off_t)(end - begin), POSIX_FADV_WILLNEED);
  return 0;
}

/* Block b of tensor t, read from path into data: its checksum against the index's. */
static int check_block(const ts_ckpt *ck, const ck_tensor *t, const ck_block *b, const void *data, const char *path) {
  if (ck->plain || ckpt_sum(ck->version, data, (size_t)(b->end - b->begin)) == b->hash) return 0;
  char bn[2048];
  ckpt_block_name(t, b, bn, sizeof bn);
  return set_error("%s: checksum mismatch in tensor %s (block '%s', bytes [%llu, %llu)): the data is corrupted", path,
                   t->name, bn, (unsigned long long)b->begin, (unsigned long long)b->end);
}

/* Block k of tensor t, whole and checked, into buf (its bytes). */
static int load_block_into(ts_ckpt *ck, const ck_tensor *t, int k, void *buf) {
  const ck_block *b = &t->b[k];
  if (load_file(ck, b->file) < 0) return -1;
  size_t n = (size_t)(b->end - b->begin);
  char path[PATH_LEN];
  file_path(ck, b->file, path, sizeof path);
  if (ckpt_pread_all(ck->f[b->file].fd, buf, n, b->begin, path) < 0) return -1;
  return check_block(ck, t, b, buf, path);
}

/* Block k of tensor t, whole and checked, into a malloc'd buffer. */
static void *load_block(ts_ckpt *ck, const ck_tensor *t, int k) {
  size_t n = (size_t)(t->b[k].end - t->b[k].begin);
  void *buf = malloc(n ? n : 1);
  if (!buf) {
    set_error("checkpoint: out of memory reading tensor %s", t->name);
    return NULL;
  }
  if (load_block_into(ck, t, k, buf) < 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

void ckpt_scratch_free(ckpt_scratch *s) {
  if (s && s->mem) munmap(s->mem, s->cap);
  if (s) s->mem = NULL, s->cap = 0;
}

/* s's memory, at least n bytes (page-aligned): grown by a fresh mapping
 * (2 MiB multiples, transparent huge pages where the kernel allows them:
 * fewer faults on the first use). NULL: out of memory (error set). */
static void *scratch_get(ckpt_scratch *s, size_t n, const char *tensor) {
  if (n <= s->cap) return s->mem;
  ckpt_scratch_free(s);
  size_t cap = (n + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
  void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    set_error("checkpoint: out of memory reading tensor %s (%zu bytes)", tensor, cap);
    return NULL;
  }
  (void)madvise(p, cap, MADV_HUGEPAGE); /* best effort */
  s->mem = p, s->cap = cap;
  return p;
}

/* Block k of tensor t, whole and checked, read with O_DIRECT: the pages
 * covering it into page-aligned memory, the block at *data inside: the
 * scratch's memory where scratch is not NULL (*mem NULL: nothing to free),
 * else *mem (posix_memalign'd; free() it). The disk writes the memory
 * itself (no page cache, no copy out of it). 1: no O_DIRECT for this file
 * (read it buffered); -1: error. */
static int load_block_direct(ts_ckpt *ck, const ck_tensor *t, int k, ckpt_scratch *scratch, void **mem,
                             const char **data) {
  const ck_block *b = &t->b[k];
  if (load_file(ck, b->file) < 0) return -1;
  ck_file *f = &ck->f[b->file];
  if (f->dfd < 0) return 1;
  uint64_t a0 = b->begin / LOAD_ALIGN * LOAD_ALIGN, need = b->end - a0;
  size_t n = (size_t)((need + LOAD_ALIGN - 1) / LOAD_ALIGN * LOAD_ALIGN), got = 0;
  char path[PATH_LEN];
  file_path(ck, b->file, path, sizeof path);
  void *p = NULL, *own = NULL; /* own: p when it is ours to free */
  if (scratch) {
    if (!(p = scratch_get(scratch, n ? n : LOAD_ALIGN, t->name))) return -1;
  } else if (posix_memalign(&p, LOAD_ALIGN, n ? n : LOAD_ALIGN) != 0) {
    return set_error("checkpoint: out of memory reading tensor %s", t->name);
  } else {
    own = p;
  }
  int rc = 0;
  while (got < need && rc == 0) { /* the last page of the file may be short */
    ssize_t r = pread(f->dfd, (char *)p + got, n - got, (off_t)(a0 + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EINVAL && got == 0) rc = 1; /* refused after all: buffered from now on */
    else if (r < 0)
      rc = set_error("%s: read at byte %llu failed: %s", path, (unsigned long long)(a0 + got), strerror(errno));
    else if (r == 0 || (got + (size_t)r < need && (size_t)r % LOAD_ALIGN != 0)) break;
    else got += (size_t)r;
  }
  if (rc == 0 && got < need)
    rc = set_error("%s: unexpected end of file at byte %llu (truncated?)", path, (unsigned long long)(a0 + got));
  const char *d = (const char *)p + (b->begin - a0);
  if (rc == 0) rc = check_block(ck, t, b, d, path);
  if (rc != 0) {
    free(own);
    return rc;
  }
  *mem = own, *data = d;
  return 0;
}

/* Copies the overlap of block b (data bdata) and range [st, li) into dst, which holds that range. */
static void load_copy(const ck_tensor *t, const ck_block *b, const void *bdata, const int64_t *st, const int64_t *li,
                      void *dst) {
  int r = t->rank;
  size_t es = ts_dtype_size(t->dt);
  int64_t lo[TS_MAX_RANK] = {0}, hi[TS_MAX_RANK] = {0};
  for (int d = 0; d < r; d++) {
    lo[d] = b->start[d] > st[d] ? b->start[d] : st[d];
    hi[d] = b->limit[d] < li[d] ? b->limit[d] : li[d];
    if (lo[d] >= hi[d]) return;
  }
  if (r == 0) {
    memcpy(dst, bdata, es);
    return;
  }
  /* Contiguous runs: the trailing dims that the overlap spans whole in both
   * the block and dst merge into one run (a block equal to dst: one memcpy). */
  int c = r - 1;
  size_t run = (size_t)(hi[c] - lo[c]) * es;
  while (c > 0 && lo[c] == b->start[c] && lo[c] == st[c] && hi[c] == b->limit[c] && hi[c] == li[c]) {
    c--;
    run *= (size_t)(hi[c] - lo[c]);
  }
  int64_t idx[TS_MAX_RANK];
  memcpy(idx, lo, sizeof idx);
  for (;;) {
    int64_t so = 0, doff = 0;
    for (int d = 0; d < r; d++) {
      so = so * (b->limit[d] - b->start[d]) + (idx[d] - b->start[d]);
      doff = doff * (li[d] - st[d]) + (idx[d] - st[d]);
    }
    memcpy((char *)dst + (size_t)doff * es, (const char *)bdata + (size_t)so * es, run);
    int d = c - 1;
    while (d >= 0 && ++idx[d] == hi[d]) idx[d] = lo[d], d--;
    if (d < 0) break;
  }
}

/* Fills dst (range [st, li) of tensor t) from every overlapping block; cache[k]
 * keeps blocks already read for other ranges of the same call. */
static int load_range(ts_ckpt *ck, const ck_tensor *t, const int64_t *st, const int64_t *li, void *dst, void **cache) {
  for (int k = 0; k < t->nb; k++) {
    const ck_block *b = &t->b[k];
    bool overlap = true;
    for (int d = 0; d < t->rank && overlap; d++)
      overlap = (b->start[d] > st[d] ? b->start[d] : st[d]) < (b->limit[d] < li[d] ? b->limit[d] : li[d]);
    if (!overlap || ckpt_block_numel(t->rank, b->start, b->limit) == 0) continue;
    bool same = !cache[k];
    for (int d = 0; same && d < t->rank; d++) same = b->start[d] == st[d] && b->limit[d] == li[d];
    if (same) { /* the block is the range: read it in place */
      if (load_block_into(ck, t, k, dst) < 0) return -1;
      continue;
    }
    if (!cache[k] && !(cache[k] = load_block(ck, t, k))) return -1;
    load_copy(t, b, cache[k], st, li, dst);
  }
  return 0;
}

int ts_ckpt_find(const ts_ckpt *ck, const char *name) {
  for (int i = 0; ck && name && i < ck->nt; i++)
    if (strcmp(ck->t[i].name, name) == 0) return i;
  return -1;
}

static const ck_tensor *load_tensor(const ts_ckpt *ck, const char *name) {
  int i = ts_ckpt_find(ck, name);
  if (i < 0) {
    set_error("checkpoint %s has no tensor '%s'", ck ? ck->path : "(null)", name ? name : "(null)");
    return NULL;
  }
  return &ck->t[i];
}

static void shape_text(ts_dtype dt, int rank, const int64_t *shape, char *buf, size_t n) {
  int o = snprintf(buf, n, "%s[", ts_dtype_name(dt));
  for (int d = 0; d < rank && o > 0 && (size_t)o < n; d++)
    o += snprintf(buf + o, n - (size_t)o, d ? ",%lld" : "%lld", (long long)shape[d]);
  if (o > 0 && (size_t)o < n) snprintf(buf + o, n - (size_t)o, "]");
}

/* A plain safetensors file's tensor k stored with dst's first two dims merged
 * (PyTorch's layout of the GPT's c_attn: nanoGPT's (3C, C) weight and (3C)
 * bias for tessel's (3, C, C) and (3, C); the same bytes) is read as dst's
 * shape: the tensor's shape becomes dst's. Anything else is left alone. */
void ckpt_plain_view(ts_ckpt *ck, int k, const ts_buffer *dst) {
  ck_tensor *t = &ck->t[k];
  int r = ts_buffer_rank(dst);
  const int64_t *s = ts_buffer_shape(dst);
  if (!ck->plain || t->nb != 1 || r < 2 || t->rank != r - 1 || t->dt != ts_buffer_dtype(dst) || t->shape[0] != s[0] * s[1])
    return;
  for (int d = 1; d < t->rank; d++)
    if (t->shape[d] != s[d + 1]) return;
  t->rank = r;
  memcpy(t->shape, s, (size_t)r * sizeof *s);
  memcpy(t->b[0].limit, s, (size_t)r * sizeof *s);
}

int ts_ckpt_read(ts_ckpt *ck, ts_client *c, const char *name, ts_buffer *dst) {
  ckpt_scratch s = {0};
  int rc = ckpt_read_buffer(ck, c, name, dst, &s);
  ckpt_scratch_free(&s);
  return rc;
}

int ckpt_read_buffer(ts_ckpt *ck, ts_client *c, const char *name, ts_buffer *dst, ckpt_scratch *scratch) {
  if (!ck || !c || !dst) return set_error("ts_ckpt_read: NULL checkpoint, client or buffer");
  int k = name ? ts_ckpt_find(ck, name) : -1;
  if (k >= 0) ckpt_plain_view(ck, k, dst);
  const ck_tensor *t = load_tensor(ck, name);
  if (!t) return -1;
  int r = ts_buffer_rank(dst);
  bool same = ts_buffer_dtype(dst) == t->dt && r == t->rank;
  for (int d = 0; same && d < r; d++) same = ts_buffer_shape(dst)[d] == t->shape[d];
  if (!same) {
    char a[256], b[256];
    shape_text(t->dt, t->rank, t->shape, a, sizeof a);
    shape_text(ts_buffer_dtype(dst), r, ts_buffer_shape(dst), b, sizeof b);
    return set_error("checkpoint %s: tensor %s is %s but the program's is %s", ck->path, name, a, b);
  }
  int nd = ts_client_num_devices(c);
  void **cache = calloc((size_t)t->nb + 1, sizeof *cache);
  int64_t(*ranges)[2][TS_MAX_RANK] = calloc((size_t)nd, sizeof *ranges);
  void **host = calloc((size_t)nd, sizeof *host);
  const void **data = calloc((size_t)nd, sizeof *data); /* each device's values (inside host[d], or a replica's) */
  int rc = cache && ranges && host && data ? 0 : set_error("checkpoint: out of memory");
  size_t es = ts_dtype_size(t->dt);
  for (int d = 0; d < nd && rc == 0; d++) {
    if (!ts_client_is_local_device(c, d)) continue;
    int64_t *st = ranges[d][0], *li = ranges[d][1];
    if (ts_buffer_shard_range(dst, d, st, li) < 0) {
      rc = -1;
      break;
    }
    size_t bytes = (size_t)ckpt_block_numel(r, st, li) * es;
    const void *src = NULL;
    for (int e = 0; e < d && !src; e++) /* a replica of a block already assembled */
      if (host[e] && memcmp(ranges[e], ranges[d], sizeof ranges[d]) == 0) src = data[e];
    int whole = -1; /* the one block that is exactly this device's range */
    for (int k = 0; !src && k < t->nb && whole < 0; k++) {
      bool eq = bytes > 0;
      for (int q = 0; eq && q < r; q++) eq = t->b[k].start[q] == st[q] && t->b[k].limit[q] == li[q];
      if (eq) whole = k;
    }
    if (!src && whole >= 0) { /* read straight into the memory handed to the device */
      const char *in = NULL;
      int dr = load_block_direct(ck, t, whole, scratch, &host[d], &in);
      if (dr < 0) {
        rc = -1;
        break;
      }
      if (dr == 0) src = in;
      if (dr == 0 && !host[d]) scratch = NULL; /* in the scratch: kept for this call (replicas read it) */
    }
    if (!src) {
      if (!(host[d] = malloc(bytes ? bytes : 1))) {
        rc = set_error("checkpoint: out of memory");
        break;
      }
      if (load_range(ck, t, st, li, host[d], cache) < 0) {
        rc = -1;
        break;
      }
      src = host[d];
    }
    data[d] = src;
    if (ts_buffer_write_shard(dst, d, src, bytes) < 0) rc = -1;
  }
  for (int k = 0; cache && k < t->nb; k++) free(cache[k]);
  for (int d = 0; host && d < nd; d++) free(host[d]);
  free(cache);
  free(ranges);
  free(host);
  free(data);
  return rc;
}

int ts_ckpt_read_host(ts_ckpt *ck, const char *name, void *dst, size_t bytes) {
  if (!ck || !dst) return set_error("ts_ckpt_read_host: NULL checkpoint or destination");
  const ck_tensor *t = load_tensor(ck, name);
  if (!t) return -1;
  size_t need = (size_t)ts_shape_numel(t->rank, t->shape) * ts_dtype_size(t->dt);
  if (bytes != need)
    return set_error("ts_ckpt_read_host: tensor %s has %zu bytes, not %zu", name, need, bytes);
  int64_t st[TS_MAX_RANK] = {0};
  void **cache = calloc((size_t)t->nb + 1, sizeof *cache);
  if (!cache) return set_error("checkpoint: out of memory");
  int rc = load_range(ck, t, st, t->shape, dst, cache);
  for (int k = 0; k < t->nb; k++) free(cache[k]);
  free(cache);
  return rc;
}

/* ---- opening ---- */

/* A plain safetensors file as a one-file checkpoint of whole tensors. */
static int open_plain(ts_ckpt *ck) {
  int fd = open(ck->path, O_RDONLY);
  if (fd < 0) return set_error("%s: cannot open: %s", ck->path, strerror(errno));
  struct stat st;
  uint64_t hlen = 0, hh = 0;
  char *hdr = NULL;
  st_header h = {0};
  int rc = fstat(fd, &st) == 0 ? 0 : set_error("%s: cannot stat: %s", ck->path, strerror(errno));
  if (rc == 0 && !(hdr = load_header(fd, 2, (uint64_t)st.st_size, ck->path, &hlen, &hh))) rc = -1;
  if (rc == 0) rc = st_header_parse(hdr + 8, hlen, (uint64_t)st.st_size - 8 - hlen, ck->path, &h);
  free(hdr);
  close(fd);
  if (rc != 0) return -1;
  ck->plain = true;
  ck->f = calloc(1, sizeof *ck->f);
  ck->t = calloc((size_t)h.n + 1, sizeof *ck->t);
  if (!ck->f || !ck->t) {
    st_header_free(&h);
    return set_error("%s: out of memory", ck->path);
  }
  const char *base = strrchr(ck->path, '/');
  ck->nf = 1;
  ck->f[0] = (ck_file){.name = strdup(base ? base + 1 : ck->path), .bytes = (uint64_t)st.st_size, .fd = -1};
  for (int i = 0; i < h.n; i++) {
    const st_entry *e = &h.e[i];
    ck_tensor *t = &ck->t[ck->nt++];
    t->name = strdup(e->name);
    t->dt = e->dt;
    t->rank = e->rank;
    memcpy(t->shape, e->shape, sizeof t->shape);
    t->kind = ts_ckpt_kind_of(e->name, true);
    t->sharding = strdup("{replicated}");
    t->spec = strdup("");
    t->b = calloc(1, sizeof *t->b);
    if (!t->name || !t->sharding || !t->spec || !t->b) {
      rc = set_error("%s: out of memory", ck->path);
      break;
    }
    t->nb = 1;
    memcpy(t->b[0].limit, e->shape, sizeof t->b[0].limit);
    t->b[0].begin = 8 + hlen + e->begin;
    t->b[0].end = 8 + hlen + e->end;
  }
  st_header_free(&h);
  if (rc == 0 && !ck->f[0].name) rc = set_error("%s: out of memory", ck->path);
  ck->meta.process_count = 1;
  return rc;
}

ts_ckpt *ts_ckpt_open(const char *path) {
  if (!path || !path[0] || strlen(path) > 3000) {
    set_error("ts_ckpt_open: no path or a path over 3000 bytes");
    return NULL;
  }
  ts_ckpt *ck = calloc(1, sizeof *ck);
  char p[PATH_LEN];
  struct stat st;
  if (!ck) goto oom;
  if (stat(path, &st) != 0) {
    set_error("checkpoint %s: %s", path, strerror(errno));
    goto fail;
  }
  if (S_ISREG(st.st_mode)) {
    if (!(ck->path = strdup(path))) goto oom;
    if (open_plain(ck) < 0) goto fail;
    return ck;
  }
  snprintf(p, sizeof p, "%s/index.json", path);
  if (stat(p, &st) == 0) {
    ck->path = strdup(path);
  } else { /* a root: follow `latest` */
    snprintf(p, sizeof p, "%s/latest", path);
    size_t n = 0;
    char *line = ckpt_read_small(p, 256, &n);
    if (!line) {
      set_error("checkpoint %s: neither a checkpoint (no index.json) nor a checkpoint root (no readable latest)",
                   path);
      goto fail;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' ')) line[--n] = 0;
    bool ok = strncmp(line, "step-", 5) == 0 && n > 5;
    for (size_t k = 5; ok && k < n; k++) ok = line[k] >= '0' && line[k] <= '9';
    if (!ok) {
      set_error("%s: does not name a step directory ('%s')", p, line);
      free(line);
      goto fail;
    }
    snprintf(p, sizeof p, "%s/%s", path, line);
    free(line);
    ck->path = strdup(p);
  }
  if (!ck->path) goto oom;
  snprintf(p, sizeof p, "%s/index.json", ck->path);
  size_t n = 0;
  char *text = ckpt_read_small(p, 256u << 20, &n);
  if (!text) goto fail;
  int rc = ckpt_index_parse(ck, text, n, p);
  free(text);
  if (rc < 0) goto fail;
  return ck;
oom:
  set_error("ts_ckpt_open: out of memory");
fail:
  ts_ckpt_close(ck);
  return NULL;
}

const char *ts_ckpt_path(const ts_ckpt *ck) { return ck ? ck->path : NULL; }
const ts_ckpt_meta *ts_ckpt_get_meta(const ts_ckpt *ck) { return ck ? &ck->meta : NULL; }
int ts_ckpt_num_tensors(const ts_ckpt *ck) { return ck ? ck->nt : 0; }
int ts_ckpt_num_files(const ts_ckpt *ck) { return ck ? ck->nf : 0; }

int ts_ckpt_tensor(const ts_ckpt *ck, int i, ts_ckpt_tensor_info *out) {
  if (!ck || !out || i < 0 || i >= ck->nt)
    return set_error("ts_ckpt_tensor: index %d out of range (%d tensors)", i, ck ? ck->nt : 0);
  const ck_tensor *t = &ck->t[i];
  *out = (ts_ckpt_tensor_info){.name = t->name, .dtype = t->dt, .rank = t->rank, .kind = t->kind,
                               .num_blocks = t->nb, .sharding = t->sharding, .spec = t->spec};
  memcpy(out->shape, t->shape, sizeof out->shape);
  return 0;
}

int ts_ckpt_file(const ts_ckpt *ck, int i, const char **name, uint64_t *bytes) {
  if (!ck || i < 0 || i >= ck->nf) return set_error("ts_ckpt_file: index %d out of range", i);
  if (name) *name = ck->f[i].name;
  if (bytes) *bytes = ck->f[i].bytes;
  return 0;
}
