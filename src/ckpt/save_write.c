/* save_write.c — the files stage of a checkpoint save (save.c runs it on
 * the saver's writer thread, or inline for ts_ckpt_save), as a pipeline over
 * the file's image (header + blocks) cut into SAVE_CHUNK pieces at aligned
 * file offsets, through a ring of SAVE_SLOTS chunk buffers:
 *   fill   (this thread) copies the chunk's bytes from the held device blocks
 *          a SAVE_PIECE at a time, read in place (ts_buffer_hold_visit_range)
 *          and hashed into its block's and the file's XXH64 in the same pass
 *          over them, the ring written with non-temporal stores
 *          (ckpt_copy_hash2, copyhash.c: the copy beside a training step
 *          takes as little memory bandwidth and cache as it can);
 *          a buffer's hold is released as soon as its last byte is copied;
 *   write  (SAVE_IO_THREADS threads) write filled chunks with O_DIRECT (the
 *          disk reads the ring itself; buffered with early write-back where
 *          O_DIRECT is refused) and hand the slots back.
 * So a save takes about max(copy + hash, write), not their sum, and needs
 * SAVE_SLOTS chunks of host memory instead of a copy of the whole state. The
 * bytes are those of the serial copy-then-write (same file, same checksums:
 * XXH64 streamed does not depend on how the bytes are cut). */
#define _GNU_SOURCE /* sync_file_range */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h> /* CLOCK_THREAD_CPUTIME_ID */
#include <unistd.h>

#include "ckpt/save_internal.h"
#include "util/clock.h"
#include "util/error.h"
#include "util/hash.h" /* util_hash64: format 1 */

/* Host memory for the ring (`bytes`), kept for the next saves: mmap'ed
 * (page-aligned: O_DIRECT), marked for transparent huge pages (where THP is
 * in madvise mode: an O_DIRECT write of a chunk pins 4 huge pages instead of
 * 2048 small ones, and the copies into it miss the TLB less), then touched so
 * its pages exist before the copy. */
static int ring_reserve(ts_ckpt_saver *s, size_t bytes) {
  if (bytes <= s->snap_cap) return 0;
  if (s->snap) munmap(s->snap, s->snap_cap);
  s->snap = NULL, s->snap_cap = 0;
  size_t huge = 2u << 20, cap = (bytes + huge - 1) & ~(huge - 1);
  char *p = mmap(NULL, cap + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return set_error("checkpoint: out of memory for the save's buffers (%zu bytes): %s", cap, strerror(errno));
  char *a = (char *)(((uintptr_t)p + huge - 1) & ~(uintptr_t)(huge - 1)); /* 2 MiB-aligned: whole huge pages */
  if (a > p) munmap(p, (size_t)(a - p));
  if (a + cap < p + cap + huge) munmap(a + cap, (size_t)(p + cap + huge - (a + cap)));
  (void)madvise(a, cap, MADV_HUGEPAGE); /* best effort */
  for (size_t o = 0; o < cap; o += 4096) a[o] = 0;
  s->snap = a, s->snap_cap = cap;
  return 0;
}

uint64_t ckpt_save_chunk = SAVE_CHUNK; /* ckpt_internal.h: tests set a few pages */
int ckpt_save_direct = 1;              /* ckpt_internal.h: tests set 0 or 2 (the buffered fallbacks) */
int ckpt_save_isolate = 0;             /* ckpt_internal.h: bench/ckpt_io.c --isolate */
ckpt_stage_times ckpt_last_stage_times; /* ckpt_internal.h: the last files stage's costs */

/* CPU seconds of the calling thread. */
static double thread_cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

enum { SLOT_FREE = 0, SLOT_FILLED, SLOT_WRITING };

/* One file's pipeline. The fields under mu are shared by the filler and the
 * I/O threads; the others are set before the threads start. */
typedef struct {
  char *ring;            /* slots chunks of `chunk` bytes */
  uint64_t chunk, total; /* bytes per chunk; the file's bytes */
  int nchunks, slots, fd;
  const char *path;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int state[SAVE_SLOTS]; /* SLOT_* of each slot */
  int filled;            /* chunks [0, filled) are filled (or written) */
  int next_write;        /* the next chunk an I/O thread takes */
  bool direct;           /* the fd has O_DIRECT */
  bool refuse;           /* a test (ckpt_save_direct 2): the first direct write fails with EINVAL */
  ts_ckpt_priority prio; /* the saver's, for I/O threads that end up copying (buffered writes) */
  bool lower;            /* a background save on the saver's own thread */
  bool stop;             /* an error: everyone stops */
  char err[1024];        /* the first error */
  double io_cpu_s;       /* the write threads' CPU seconds (each adds its own at its end) */
} save_pipe;

/* The first error wins; everyone stops. Under p->mu. */
static void pipe_fail(save_pipe *p, const char *err) {
  if (!p->stop) snprintf(p->err, sizeof p->err, "%s", err);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
}

/* Whether p's fd still has O_DIRECT (a refused write clears it). */
static bool pipe_direct(save_pipe *p) {
  pthread_mutex_lock(&p->mu);
  bool direct = p->direct;
  pthread_mutex_unlock(&p->mu);
  return direct;
}

/* Writes img[0..n) at offset off. With O_DIRECT img, n and off are multiples
 * of SAVE_ALIGN; a filesystem that refuses a direct write gets the rest
 * through the page cache. */
static int save_put(save_pipe *p, const char *img, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t w = p->refuse && pipe_direct(p) ? (errno = EINVAL, -1) : pwrite(p->fd, img, n, (off_t)off);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL) {
      pthread_mutex_lock(&p->mu);
      bool was = p->direct;
      int fl = was ? fcntl(p->fd, F_GETFL) : 0;
      bool ok = was && fl != -1 && fcntl(p->fd, F_SETFL, fl & ~O_DIRECT) != -1;
      if (ok) p->direct = false;
      pthread_mutex_unlock(&p->mu);
      if (ok) continue; /* again, buffered */
      return set_error("%s: write failed: %s", p->path, strerror(EINVAL));
    }
    if (w <= 0) return set_error("%s: write failed: %s", p->path, w < 0 ? strerror(errno) : "no progress");
    img += w, n -= (size_t)w, off += (uint64_t)w;
  }
  return 0;
}

/* Writes chunk c from its slot: whole chunks are multiples of SAVE_ALIGN;
 * of the last one only the aligned part (save_files writes the tail). */
static int pipe_write_chunk(save_pipe *p, int c) {
  if (ckpt_save_isolate & CKPT_ISOLATE_NOWRITE) return 0;
  uint64_t pos = (uint64_t)c * p->chunk, len = p->total - pos < p->chunk ? p->total - pos : p->chunk;
  uint64_t al = len / SAVE_ALIGN * SAVE_ALIGN;
  int rc = save_put(p, p->ring + (size_t)(c % p->slots) * p->chunk, (size_t)al, pos);
  if (rc == 0 && al > 0 && !pipe_direct(p)) /* buffered: its write-back starts now (best effort) */
    (void)sync_file_range(p->fd, (off_t)pos, (off_t)al, SYNC_FILE_RANGE_WRITE);
  return rc;
}

/* An I/O thread: takes the filled chunks in file order, writes them, frees their slots. */
static void *pipe_io(void *arg) {
  save_pipe *p = arg;
  double cpu0 = thread_cpu_s();
  bool lowered = false;
  pthread_mutex_lock(&p->mu);
  for (;;) {
    if (p->lower && !p->direct && !lowered) { /* buffered writes copy into the page cache: CPU work */
      saver_thread_priority(p->prio);
      lowered = true;
    }
    while (!p->stop && p->next_write < p->nchunks && p->next_write >= p->filled) pthread_cond_wait(&p->cv, &p->mu);
    if (p->stop || p->next_write >= p->nchunks) break;
    int c = p->next_write++;
    p->state[c % p->slots] = SLOT_WRITING;
    pthread_mutex_unlock(&p->mu);
    int rc = pipe_write_chunk(p, c);
    char err[1024] = "";
    if (rc != 0) snprintf(err, sizeof err, "%s", ts_last_error());
    pthread_mutex_lock(&p->mu);
    if (rc != 0) pipe_fail(p, err);
    p->state[c % p->slots] = SLOT_FREE;
    pthread_cond_broadcast(&p->cv);
  }
  p->io_cpu_s += thread_cpu_s() - cpu0;
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* The filler's place in the data part: block k, byte boff of it; the running
 * checksums of the block and of the file. */
typedef struct {
  int k;
  uint64_t boff;
  ckpt_xxh64_state bs, fs;
  uint64_t *bh; /* out: each block's checksum */
  int *last;    /* (n) per hold: the last block that reads it (-1: none) */
  double copy_cpu_s, hash_cpu_s; /* this thread's CPU seconds in the copies and in the checksums (the fused pass: all in copy_cpu_s) */
} fill_cursor;

/* A hold's read failed: the error names the block. */
static int read_error(const st_entry *e, const save_block *b) {
  char err[900];
  snprintf(err, sizeof err, "%s", ts_last_error());
  return set_error("checkpoint: reading %s from device %d: %s", e->name, b->device, err);
}

/* The fused pass's visitor (ts_buffer_hold_visit_range): the held bytes
 * copied into the ring at dst and hashed into the block's and the file's
 * checksums in one pass (copyhash.c). */
typedef struct {
  char *dst;
  fill_cursor *fc;
} fill_visit;
static int fill_visit_run(void *ctx, const void *p, size_t n) {
  fill_visit *v = ctx;
  ckpt_copy_hash2(v->dst, p, n, &v->fc->bs, &v->fc->fs);
  v->dst += n;
  return 0;
}

/* m bytes of block b (hold h) from byte fc->boff into dst, and into the
 * checksums (format 2). Format 2 with nothing isolated: one pass, read in
 * place (visit) and copied with streamed stores while hashed; else the copy
 * (read_range), then the hash of the copy, from cache. */
static int fill_piece(save_job *j, fill_cursor *fc, const ts_buffer_hold *h, int device, char *dst, uint64_t m) {
  double c0 = thread_cpu_s();
  if (j->version >= 2 && !(ckpt_save_isolate & (CKPT_ISOLATE_NOCOPY | CKPT_ISOLATE_NOHASH))) {
    fill_visit v = {.dst = dst, .fc = fc};
    int rc = ts_buffer_hold_visit_range(h, device, (size_t)fc->boff, (size_t)m, fill_visit_run, &v);
    fc->copy_cpu_s += thread_cpu_s() - c0; /* the checksums' CPU included */
    return rc;
  }
  if (!(ckpt_save_isolate & CKPT_ISOLATE_NOCOPY) &&
      ts_buffer_hold_read_range(h, device, (size_t)fc->boff, dst, (size_t)m) < 0)
    return -1;
  double c1 = thread_cpu_s();
  if (j->version >= 2 && !(ckpt_save_isolate & CKPT_ISOLATE_NOHASH)) ckpt_xxh64_update2(&fc->bs, &fc->fs, dst, (size_t)m);
  fc->copy_cpu_s += c1 - c0, fc->hash_cpu_s += thread_cpu_s() - c1;
  return 0;
}

/* Copies data bytes [dpos, dend) (offsets in the data part) into dst and
 * into the checksums, a SAVE_PIECE at a time (fill_piece); a hold is
 * released after its last block. */
static int fill_data(save_job *j, fill_cursor *fc, char *dst, uint64_t dpos, uint64_t dend) {
  while (dpos < dend) {
    const save_block *b = &j->bl[fc->k];
    const st_entry *e = &j->se[fc->k];
    int h = j->same[b->t];
    uint64_t bytes = e->end - e->begin;
    if (fc->boff == 0 && j->version < 2) { /* format 1: util_hash64 of the whole block (not streamed) */
      char *tmp = malloc((size_t)bytes + 1);
      if (!tmp) return set_error("checkpoint: out of memory");
      int rc = ts_buffer_hold_read_range(j->holds[h], b->device, 0, tmp, (size_t)bytes);
      if (rc == 0) fc->bh[fc->k] = util_hash64(tmp, (size_t)bytes, 0);
      free(tmp);
      if (rc != 0) return read_error(e, b);
    }
    uint64_t m = bytes - fc->boff;
    if (m > dend - dpos) m = dend - dpos;
    if (m > SAVE_PIECE) m = SAVE_PIECE;
    if (fill_piece(j, fc, j->holds[h], b->device, dst, m) < 0) return read_error(e, b);
    dst += m, dpos += m, fc->boff += m;
    if (fc->boff == bytes) { /* the block is complete */
      if (j->version >= 2) fc->bh[fc->k] = ckpt_xxh64_digest(&fc->bs);
      ckpt_xxh64_init(&fc->bs);
      if (fc->last[h] == fc->k) { /* nothing more reads this buffer: its memory is its own again */
        ts_buffer_hold_release(j->holds[h]);
        j->holds[h] = NULL;
      }
      fc->k++, fc->boff = 0;
    }
  }
  return 0;
}

/* The pipeline over the file (open, O_DIRECT where allowed): fills chunk
 * after chunk here while the I/O threads write the ones before; then the
 * tail, fsync. j->copy_s: from t0 to the last byte copied (every hold
 * released). 0 or -1 (error set). */
static int save_pipeline(ts_ckpt_saver *s, save_job *j, int fd, bool direct, const char *path, fill_cursor *fc,
                         uint64_t *header_hash, uint64_t *file_hash, double t0) {
  uint64_t H = 8 + j->hlen, total = H + j->data_bytes;
  uint64_t chunk = ckpt_save_chunk && ckpt_save_chunk % SAVE_ALIGN == 0 ? ckpt_save_chunk : SAVE_CHUNK;
  if (chunk > (total + SAVE_ALIGN - 1) / SAVE_ALIGN * SAVE_ALIGN) chunk = (total + SAVE_ALIGN - 1) / SAVE_ALIGN * SAVE_ALIGN;
  int nchunks = (int)((total + chunk - 1) / chunk);
  int slots = nchunks < SAVE_SLOTS ? nchunks : SAVE_SLOTS;
  if (ring_reserve(s, (size_t)(chunk * (uint64_t)slots)) < 0) return -1;
  save_pipe p = {.ring = s->snap, .chunk = chunk, .total = total, .nchunks = nchunks, .slots = slots, .fd = fd,
                 .path = path, .direct = direct, .refuse = direct && ckpt_save_direct == 2, .prio = s->prio,
                 .lower = j->background && j->own_thread};
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  *header_hash = ckpt_sum(j->version, j->hdr, (size_t)H);
  ckpt_xxh64_update(&fc->fs, j->hdr, (size_t)H);
  /* The write threads keep the priority this thread has now (the caller's):
   * they only submit O_DIRECT writes and wait for the disk, and a starved one
   * would leave the disk idle. This thread, which copies and hashes (the
   * CPU work), then drops to the saver's priority (a background save). */
  pthread_t th[SAVE_IO_THREADS];
  int nth = 0;
  while (nth < SAVE_IO_THREADS && nth < nchunks && pthread_create(&th[nth], NULL, pipe_io, &p) == 0) nth++;
  if (j->background && j->own_thread) saver_thread_priority(s->prio);
  double cpu0 = thread_cpu_s();
  int rc = 0;
  for (int c = 0; c < nchunks && rc == 0; c++) {
    int slot = c % slots;
    pthread_mutex_lock(&p.mu);
    while (!p.stop && p.state[slot] != SLOT_FREE) pthread_cond_wait(&p.cv, &p.mu);
    bool stop = p.stop;
    pthread_mutex_unlock(&p.mu);
    if (stop) break;
    char *dst = p.ring + (size_t)slot * chunk;
    uint64_t pos = (uint64_t)c * chunk, end = total - pos < chunk ? total : pos + chunk;
    if (pos < H) memcpy(dst, j->hdr + pos, (size_t)((end < H ? end : H) - pos));
    if (end > H) rc = fill_data(j, fc, dst + (pos < H ? H - pos : 0), pos < H ? 0 : pos - H, end - H);
    if (rc == 0 && c == nchunks - 1) j->copy_s = util_now_s() - t0;
    if (rc == 0 && nth == 0) rc = pipe_write_chunk(&p, c); /* no I/O thread to be had: write here */
    char err[1024] = "";
    if (rc != 0) snprintf(err, sizeof err, "%s", ts_last_error());
    pthread_mutex_lock(&p.mu);
    if (rc != 0) pipe_fail(&p, err);
    else if (nth > 0) p.state[slot] = SLOT_FILLED, p.filled = c + 1;
    else p.filled = p.next_write = c + 1;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    if (rc == 0) ckpt_test_stage("chunk");
  }
  ckpt_last_stage_times.fill_cpu_s = thread_cpu_s() - cpu0;
  for (int t = 0; t < nth; t++) pthread_join(th[t], NULL);
  ckpt_last_stage_times.io_cpu_s = p.io_cpu_s;
  if (p.stop) rc = set_error("%s", p.err);
  uint64_t al = total / SAVE_ALIGN * SAVE_ALIGN;
  if (rc == 0 && al < total) { /* the tail, not a whole page: through the page cache (the ring is kept) */
    int fl = fcntl(fd, F_GETFL);
    if (p.direct && (fl == -1 || fcntl(fd, F_SETFL, fl & ~O_DIRECT) == -1))
      rc = set_error("%s: fcntl failed: %s", path, strerror(errno));
    p.direct = false;
    const char *src = p.ring + (size_t)((nchunks - 1) % slots) * chunk + (al - (uint64_t)(nchunks - 1) * chunk);
    if (rc == 0) rc = save_put(&p, src, (size_t)(total - al), al);
  }
  pthread_mutex_destroy(&p.mu);
  pthread_cond_destroy(&p.cv);
  *file_hash = ckpt_xxh64_digest(&fc->fs);
  return rc;
}

/* The files stage: this process's block file (fsync'ed), from the held
 * buffers, and the description of what it holds (j->side; for P > 0 also
 * written as shard-P-of-Q.json for process 0). The holds are all released
 * when it returns. j->copy_s: the copy (overlapped with the writes);
 * j->write_s: the whole stage, to the fsync. */
int save_files(ts_ckpt_saver *s, save_job *j) {
  double t0 = util_now_s();
  char name[128], path[PATH_MAX_LEN + 256];
  snprintf(name, sizeof name, "shard-%05d-of-%05d.safetensors", j->rank, j->np);
  snprintf(path, sizeof path, "%s/%s", j->tmp, name);
  uint64_t *bh = calloc((size_t)j->nb + 1, sizeof *bh);
  int *last = malloc(((size_t)j->n + 1) * sizeof *last);
  if (!bh || !last) {
    free(bh), free(last);
    job_release(j);
    return set_error("checkpoint: out of memory");
  }
  for (int i = 0; i < j->n; i++) last[i] = -1;
  for (int k = 0; k < j->nb; k++) last[j->same[j->bl[k].t]] = k;
  for (int i = 0; i < j->n; i++) /* buffers with no block here: released now */
    if (last[i] < 0 && j->holds[i]) ts_buffer_hold_release(j->holds[i]), j->holds[i] = NULL;
  bool direct = ckpt_save_direct != 0;
  int rc = 0, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
  if (fd < 0 && direct && errno == EINVAL) {
    direct = false;
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  if (fd < 0) rc = set_error("%s: cannot create: %s", path, strerror(errno));
  uint64_t H = 8 + j->hlen, total = H + j->data_bytes, header_hash = 0, fhash = 0, fbytes = total;
  fill_cursor fc = {.bh = bh, .last = last};
  ckpt_xxh64_init(&fc.bs);
  ckpt_xxh64_init(&fc.fs);
  if (rc == 0) rc = save_pipeline(s, j, fd, direct, path, &fc, &header_hash, &fhash, t0);
  job_release(j); /* after an error: what was not released yet */
  free(last);
  double fs0 = util_now_s();
  if (rc == 0 && fsync(fd) != 0) rc = set_error("%s: fsync failed: %s", path, strerror(errno));
  ckpt_last_stage_times.fsync_s = util_now_s() - fs0;
  ckpt_last_stage_times.copy_cpu_s = fc.copy_cpu_s, ckpt_last_stage_times.hash_cpu_s = fc.hash_cpu_s;
  if (fd >= 0 && close(fd) != 0 && rc == 0) rc = set_error("%s: close failed: %s", path, strerror(errno));
  j->write_s = util_now_s() - t0;
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
