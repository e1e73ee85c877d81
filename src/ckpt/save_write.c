/* save_write.c — the files stage of a checkpoint save (save.c runs it on
 * the saver's writer thread, or inline for ts_ckpt_save): the held device
 * blocks are copied into the snapshot memory laid out as the file (header +
 * blocks) and released, then that image is written as one sequential stream
 * in 16 MiB windows with O_DIRECT (buffered with early write-back where
 * O_DIRECT is refused) while a second thread computes the XXH64 checksums of
 * each block and of the whole file. */
#define _GNU_SOURCE /* sync_file_range */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/save_internal.h"
#include "util/error.h"
#include "util/hash.h" /* util_hash64: format 1 */

/* Host memory for `bytes` of snapshot, kept for the next saves. mmap with
 * MAP_POPULATE: the pages exist before the copy (no fault per page in the
 * caller's wait). */
static int snap_reserve(ts_ckpt_saver *s, size_t bytes) {
  if (bytes <= s->snap_cap) return 0;
  if (s->snap) munmap(s->snap, s->snap_cap);
  s->snap = NULL, s->snap_cap = 0;
  size_t cap = (bytes + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
  void *p = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return set_error("checkpoint: out of memory for the snapshot (%zu bytes): %s", cap, strerror(errno));
  s->snap = p, s->snap_cap = cap;
  return 0;
}

/* Blocks [k0, k1) of a snapshot, copied by one thread. */
typedef struct {
  const save_job *j;
  char *data;
  int k0, k1, rc;
  char err[512];
} snap_part;

static void *snap_copy(void *arg) {
  snap_part *p = arg;
  const save_job *j = p->j;
  for (int k = p->k0; k < p->k1 && p->rc == 0; k++) {
    const save_block *b = &j->bl[k];
    size_t bytes = (size_t)(j->se[k].end - j->se[k].begin);
    if (ts_buffer_hold_read_shard(j->holds[j->same[b->t]], b->device, p->data + j->se[k].begin, bytes) < 0) {
      snprintf(p->err, sizeof p->err, "checkpoint: reading %s from device %d: %s", j->se[k].name, b->device,
               ts_last_error());
      p->rc = -1;
    }
  }
  return NULL;
}

/* The copy of every held block into the snapshot (the file's image), on the
 * writer's thread, then the holds are released: on up to SNAP_THREADS threads
 * over contiguous runs of blocks of about equal bytes (one core's copy
 * bandwidth is well below the memory's). */
int save_copy(ts_ckpt_saver *s, save_job *j) {
  /* The snapshot is the file's image: header, then every block in order
   * (its memory is kept for the next saves: the first one maps it here). */
  int rc = snap_reserve(s, (size_t)(8 + j->hlen + j->data_bytes));
  if (rc != 0) {
    job_release(j);
    return rc;
  }
  memcpy(s->snap, j->hdr, 8 + j->hlen);
  int nt = ts_client_num_threads(s->c);
  if (nt > SNAP_THREADS) nt = SNAP_THREADS;
  if ((uint64_t)nt > j->data_bytes / SNAP_MIN_PER_THREAD) nt = (int)(j->data_bytes / SNAP_MIN_PER_THREAD);
  if (nt < 1) nt = 1;
  snap_part part[SNAP_THREADS];
  pthread_t th[SNAP_THREADS];
  bool started[SNAP_THREADS] = {false};
  int k = 0;
  for (int p = 0; p < nt; p++) {
    uint64_t stop = j->data_bytes / (uint64_t)nt * (uint64_t)(p + 1);
    part[p] = (snap_part){.j = j, .data = s->snap + 8 + j->hlen, .k0 = k};
    while (k < j->nb && (p == nt - 1 || j->se[k].begin < stop)) k++;
    part[p].k1 = k;
    if (p > 0) started[p] = pthread_create(&th[p], NULL, snap_copy, &part[p]) == 0;
  }
  for (int p = 0; p < nt; p++)
    if (!started[p]) snap_copy(&part[p]); /* part 0, and any without a thread, here */
  for (int p = 0; p < nt; p++) {
    if (started[p]) pthread_join(th[p], NULL);
    if (part[p].rc != 0 && rc == 0) rc = set_error("%s", part[p].err);
  }
  job_release(j); /* the buffers' memory is theirs again (or freed, when they are gone) */
  return rc;
}

/* Checksums of data[0..len) (offsets [pos, pos + len) of the data part) into
 * the running block checksum (block *k, finished ones into bh) and the
 * file's, a piece at a time so that the second pass reads from cache. */
static void save_hash_window(save_job *j, const char *data, uint64_t pos, uint64_t len, int *k,
                             ckpt_xxh64_state *bs, ckpt_xxh64_state *fs, uint64_t *bh) {
  uint64_t p = pos, end = pos + len;
  while (p < end) {
    const st_entry *e = &j->se[*k];
    uint64_t stop = e->end < end ? e->end : end;
    if (j->version >= 2) {
      for (uint64_t q = p; q < stop; q += SAVE_PIECE) {
        size_t m = (size_t)(stop - q < SAVE_PIECE ? stop - q : SAVE_PIECE);
        ckpt_xxh64_update(bs, data + q, m);
        ckpt_xxh64_update(fs, data + q, m);
      }
    }
    p = stop;
    if (p == e->end) { /* the block is complete */
      bh[*k] = j->version >= 2 ? ckpt_xxh64_digest(bs) : util_hash64(data + e->begin, (size_t)(e->end - e->begin), 0);
      ckpt_xxh64_init(bs);
      (*k)++;
    }
  }
}

/* The checksums of a file image: each block's, the header's, the file's. */
typedef struct {
  save_job *j;
  const char *img;
  uint64_t *bh; /* out: per block */
  uint64_t header_hash, file_hash;
} save_hasher;

static void *save_hash_all(void *arg) {
  save_hasher *z = arg;
  save_job *j = z->j;
  uint64_t H = 8 + j->hlen;
  z->header_hash = ckpt_sum(j->version, z->img, (size_t)H);
  ckpt_xxh64_state fs, bs;
  ckpt_xxh64_init(&fs);
  ckpt_xxh64_init(&bs);
  ckpt_xxh64_update(&fs, z->img, (size_t)H);
  int k = 0;
  for (uint64_t pos = 0; pos < j->data_bytes; pos += SAVE_WINDOW) {
    uint64_t len = j->data_bytes - pos < SAVE_WINDOW ? j->data_bytes - pos : SAVE_WINDOW;
    save_hash_window(j, z->img + H, pos, len, &k, &bs, &fs, z->bh);
  }
  z->file_hash = ckpt_xxh64_digest(&fs);
  return NULL;
}

/* Writes img[0..n) at offset off. With O_DIRECT (*direct) img, n and off are
 * multiples of SAVE_ALIGN; a filesystem that refuses a direct write gets the
 * rest through the page cache. */
static int save_put(int fd, bool *direct, const char *img, size_t n, uint64_t off, const char *path) {
  while (n > 0) {
    ssize_t w = pwrite(fd, img, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && *direct) {
      int fl = fcntl(fd, F_GETFL);
      if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) == -1)
        return set_error("%s: write failed: %s", path, strerror(EINVAL));
      *direct = false;
      continue;
    }
    if (w <= 0) return set_error("%s: write failed: %s", path, w < 0 ? strerror(errno) : "no progress");
    img += w, n -= (size_t)w, off += (uint64_t)w;
  }
  return 0;
}

/* The files stage from the snapshot `img` (the file's image): this
 * process's block file (fsync'ed) and the description of what it holds
 * (j->side; for P > 0 also written as shard-P-of-Q.json for process 0).
 *
 * The image is written with O_DIRECT where the filesystem allows it: the
 * disk reads the snapshot's pages itself, no copy into the page cache (that
 * copy was the largest CPU cost of a save). Windows are aligned; the last
 * partial page goes through the page cache. Elsewhere (tmpfs, ...) buffered
 * writes, each window's write-back started at once (sync_file_range). */
int save_write(save_job *j, const char *img) {
  char name[128], path[PATH_MAX_LEN + 256];
  snprintf(name, sizeof name, "shard-%05d-of-%05d.safetensors", j->rank, j->np);
  snprintf(path, sizeof path, "%s/%s", j->tmp, name);
  uint64_t *bh = calloc((size_t)j->nb + 1, sizeof *bh);
  if (!bh) return set_error("checkpoint: out of memory");
  bool direct = true;
  int rc = 0, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0 && errno == EINVAL) {
    direct = false;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  if (fd < 0) rc = set_error("%s: cannot create: %s", path, strerror(errno));
  uint64_t H = 8 + j->hlen, total = H + j->data_bytes;
  /* The checksums on a thread of their own, beside the writes (they only read the image). */
  save_hasher hz = {.j = j, .img = img, .bh = bh};
  pthread_t hth;
  bool hthreaded = pthread_create(&hth, NULL, save_hash_all, &hz) == 0;
  if (!hthreaded) save_hash_all(&hz);
  bool flush = true; /* sync_file_range works here (not on every filesystem) */
  for (uint64_t pos = 0; pos < total && rc == 0; pos += SAVE_WINDOW) {
    uint64_t len = total - pos < SAVE_WINDOW ? total - pos : SAVE_WINDOW;
    uint64_t al = direct ? len / SAVE_ALIGN * SAVE_ALIGN : len;
    rc = save_put(fd, &direct, img + pos, (size_t)al, pos, path);
    if (rc == 0 && al < len) { /* the tail, not a whole page: through the page cache */
      int fl = fcntl(fd, F_GETFL);
      if (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) == -1)
        rc = set_error("%s: fcntl failed: %s", path, strerror(errno));
      direct = false;
      if (rc == 0) rc = save_put(fd, &direct, img + pos + al, (size_t)(len - al), pos + al, path);
    }
    if (rc == 0 && !direct && flush && sync_file_range(fd, (off_t)pos, (off_t)len, SYNC_FILE_RANGE_WRITE) != 0)
      flush = false;
  }
  if (rc == 0 && fsync(fd) != 0) rc = set_error("%s: fsync failed: %s", path, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && rc == 0) rc = set_error("%s: close failed: %s", path, strerror(errno));
  if (hthreaded) pthread_join(hth, NULL);
  uint64_t header_hash = hz.header_hash;
  uint64_t fhash = hz.file_hash, fbytes = total;
  if (rc == 0 && j->version == 1) rc = ckpt_file_hash(path, 1, &fhash, &fbytes);
  if (rc == 0) {
    ts_strbuf sb = {0};
    sb_printf(&sb, "{\"file\":");
    json_write_string(&sb, name);
    sb_printf(&sb, ",\"bytes\":%llu,\"hash\":\"%016" PRIx64 "\",\"header_hash\":\"%016" PRIx64 "\",\"blocks\":[",
              (unsigned long long)fbytes, fhash, header_hash);
    for (int b = 0; b < j->nb; b++) {
      int r = j->se[b].rank;
      sb_printf(&sb, "%s{\"tensor\":%d,\"start\":[", b ? "," : "", j->bl[b].t);
      for (int d = 0; d < r; d++) sb_printf(&sb, d ? ",%lld" : "%lld", (long long)j->bl[b].start[d]);
      sb_printf(&sb, "],\"limit\":[");
      for (int d = 0; d < r; d++) sb_printf(&sb, d ? ",%lld" : "%lld", (long long)j->bl[b].limit[d]);
      sb_printf(&sb, "],\"byte_range\":[%llu,%llu],\"hash\":\"%016" PRIx64 "\"}",
                (unsigned long long)(8 + j->hlen + j->se[b].begin), (unsigned long long)(8 + j->hlen + j->se[b].end),
                bh[b]);
    }
    sb_printf(&sb, "]}\n");
    if (!(j->side = sb_finish(&sb, "checkpoint"))) rc = -1;
  }
  if (rc == 0 && j->rank > 0) { /* process 0 reads it after the barrier */
    snprintf(path, sizeof path, "%s/shard-%05d-of-%05d.json", j->tmp, j->rank, j->np);
    rc = ckpt_write_small(path, j->side, strlen(j->side));
  }
  free(bh);
  return rc;
}
