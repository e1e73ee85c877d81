/* ckpt_internal.h — the pieces of src/ckpt/ shared between its files: the
 * safetensors header (safetensors.c), the in-memory index (index.c), the
 * file helpers (fileio.c) and the ts_ckpt handle. */
#ifndef TS_CKPT_INTERNAL_H
#define TS_CKPT_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "ckpt/json.h"
#include "tessel/ckpt.h"

#define CKPT_FORMAT "tessel-checkpoint"
#define CKPT_FORMAT_VERSION 2        /* written; version 1 (util_hash64 checksums) is still read */
#define CKPT_MAX_HEADER (100u << 20) /* safetensors' own limit on the JSON header */
#define CKPT_HASH_PIECE (1u << 20)   /* format 1: file checksums chain util_hash64 over 1 MiB pieces */

/* ---- checksums ---- */
/* XXH64, seed 0 (xxh64.c), streaming. Format 2's checksum of blocks, headers
 * and whole files. */
typedef struct {
  uint64_t v[4], total;
  unsigned char buf[32];
  unsigned nbuf;
} ckpt_xxh64_state;
void ckpt_xxh64_init(ckpt_xxh64_state *s);
void ckpt_xxh64_update(ckpt_xxh64_state *s, const void *data, size_t n);
/* = ckpt_xxh64_update(s, ..) then (t, ..), in one pass (a block's and its
 * file's checksum: the same bytes at different stripe phases). */
void ckpt_xxh64_update2(ckpt_xxh64_state *s, ckpt_xxh64_state *t, const void *data, size_t n);
uint64_t ckpt_xxh64_digest(const ckpt_xxh64_state *s);
uint64_t ckpt_xxh64(const void *data, size_t n);
/* copyhash.c: the save's filler copy. ckpt_copy_hash2: dst[0..n) = src[0..n)
 * and = ckpt_xxh64_update2(s, t, src, n), in one pass over src (a slice
 * copied, then hashed from L1); ckpt_copy_stream: the copy alone. Both store
 * dst's 64-byte aligned lines non-temporally (ckpt_copy_nt: -1, the default,
 * streams on x86 with AVX-512F or SSE2 by the CPU's flags at run time; 0
 * plain stores; 2 streamed with SSE2 even where AVX-512F is there: tests
 * compare the three) and fence them before returning. */
void ckpt_copy_hash2(void *dst, const void *src, size_t n, ckpt_xxh64_state *s, ckpt_xxh64_state *t);
void ckpt_copy_stream(void *dst, const void *src, size_t n);
extern int ckpt_copy_nt;
/* The checksum of bytes (a block, a header) in format `version`: 1
 * util_hash64(data, n, 0), 2 XXH64. */
uint64_t ckpt_sum(int version, const void *data, size_t n);

/* ---- safetensors ---- */
typedef struct {
  char *name;
  ts_dtype dt;
  int rank;
  int64_t shape[TS_MAX_RANK];
  uint64_t begin, end; /* data_offsets: relative to the data (after the header) */
} st_entry;

typedef struct {
  uint64_t header_len; /* bytes of the JSON header */
  int n;
  st_entry *e;
} st_header;

/* "F32", "BF16", ... (safetensors' dtype codes) and back (-1: unknown). */
const char *st_dtype_code(ts_dtype dt);
int st_dtype_from_code(const char *code, ts_dtype *out);
/* Parses header JSON text[0..len) of a file whose data part has data_bytes
 * bytes: every entry's dtype, shape and offsets checked (begin <= end <=
 * data_bytes, end - begin = numel * size, no two entries overlapping).
 * `file` names the file in errors. */
int st_header_parse(const char *text, size_t len, uint64_t data_bytes, const char *file, st_header *out);
void st_header_free(st_header *h);
const st_entry *st_header_find(const st_header *h, const char *name);
/* The header JSON for entries e[0..n) (offsets as given), padded with spaces
 * so that 8 + length is a multiple of 8. malloc'd; *len its length. */
char *st_header_build(int n, const st_entry *e, size_t *len);

/* ---- files ---- */
/* Writes all of buf at the current position (retrying short writes). */
int ckpt_write_all(int fd, const void *buf, size_t n, const char *path);
/* Reads exactly n bytes at offset off. */
int ckpt_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path);
/* fsync of a file / of a directory by path. */
int ckpt_fsync_dir(const char *dir);
/* Writes text to path atomically enough for small files (path.tmp, fsync,
 * rename); the caller fsyncs the directory. */
int ckpt_write_small(const char *path, const char *text, size_t n);
/* Reads a whole small file (at most max bytes) into a malloc'd buffer. */
char *ckpt_read_small(const char *path, size_t max, size_t *n);
/* rm -r of a directory that holds files only. */
int ckpt_remove_dir(const char *dir);
/* Checksum of a whole file in format `version` (2: XXH64 of its bytes; 1:
 * util_hash64 chained over CKPT_HASH_PIECE pieces); *size its size. */
/* load.c: a plain file's tensor k stored with dst's first two dims merged
 * (nanoGPT's c_attn) takes dst's shape (same bytes); else nothing changes. */
void ckpt_plain_view(ts_ckpt *ck, int k, const ts_buffer *dst);
int ckpt_file_hash(const char *path, int version, uint64_t *hash, uint64_t *size);
/* The format version a save writes: CKPT_FORMAT_VERSION; tests set 1 to
 * write a format-1 checkpoint (util_hash64 checksums) and check that it
 * still loads. Nothing in the library or the CLI changes it. */
extern int ckpt_write_version;

/* Bytes of a chunk of the save's pipeline (save_write.c): SAVE_CHUNK; tests
 * set a few pages (a multiple of 4096) to cross many chunk boundaries with
 * small tensors. Nothing in the library or the CLI changes it. */
extern uint64_t ckpt_save_chunk;

/* Page-aligned memory one loading thread reuses for its O_DIRECT reads
 * (load.c): grown to the largest block it read, its pages faulted in once
 * instead of once per tensor. {0} is empty; ckpt_scratch_free releases it. */
typedef struct {
  void *mem;
  size_t cap;
} ckpt_scratch;
void ckpt_scratch_free(ckpt_scratch *s);
/* ts_ckpt_read with the calling thread's scratch (tools.c's workers keep one
 * each across tensors; NULL: a fresh allocation per block, as before). */
int ckpt_read_buffer(ts_ckpt *ck, ts_client *c, const char *name, ts_buffer *dst, ckpt_scratch *scratch);

/* Loads read a block that is a device's whole range with O_DIRECT (into
 * the memory handed to the device; no page cache) when 1 (the default);
 * tests set 0 to cover the buffered reads. Nothing in the library or the
 * CLI changes it. */
extern int ckpt_load_direct;

/* Saves write the block file with O_DIRECT where the filesystem allows it
 * (1, the default). Tests set 0 (opened without O_DIRECT: the buffered path
 * of a filesystem that refuses it at open, tmpfs) or 2 (opened with
 * O_DIRECT, but its first write refused with EINVAL as some filesystems do:
 * the rest of the file goes through the page cache) to cover both fallbacks.
 * Nothing in the library or the CLI changes it. */
extern int ckpt_save_direct;

/* Benchmark isolation (bench/ckpt_io.c --isolate): bits that switch off one
 * part of the save's files stage to see what slows a step run beside it.
 * CKPT_ISOLATE_NOHASH: no XXH64 (the checksums written are those of no
 * bytes: the checkpoint does not verify); _NOWRITE: the chunks are not
 * written (the file is left sparse; only its last partial page is written); _NOCOPY: the ring is not filled from
 * the held buffers (garbage is written and hashed). Any bit makes a
 * checkpoint that must not be loaded. 0 (the default): nothing is switched
 * off. Nothing in the library or the CLI changes it. */
enum { CKPT_ISOLATE_NOHASH = 1, CKPT_ISOLATE_NOWRITE = 2, CKPT_ISOLATE_NOCOPY = 4 };
extern int ckpt_save_isolate;

/* Per-stage costs of this process's last files stage (save_write.c; set by
 * the thread that ran it, before the save completes): CPU seconds of the
 * filler thread (of it: copying from the held buffers, hashing; the fused
 * pass of format 2 with nothing isolated counts both in copy_cpu_s and
 * leaves hash_cpu_s 0), of the
 * write threads together, and the wall seconds of the final fsync. For
 * benchmarks (bench/ckpt_io.c); read after the save is waited for. */
typedef struct {
  double fill_cpu_s, copy_cpu_s, hash_cpu_s, io_cpu_s, fsync_s;
} ckpt_stage_times;
extern ckpt_stage_times ckpt_last_stage_times;

/* Testing hook (tests/test_ckpt_crash.c): when a program sets it, a save
 * calls it with the name of each stage just completed — "chunk" (a chunk
 * of the block file copied and handed to the writes; once per chunk), "files" (this
 * process's block file written), "index" (index.json written), "rename"
 * (the directory in place), "latest" (`latest` replaced), "prune" — so a
 * test can kill the process there. NULL otherwise: nothing in the library or
 * the CLI sets it, and no environment variable does. */
extern void (*ckpt_test_hook)(const char *stage);
/* Calls ckpt_test_hook (if set) with `stage`. */
void ckpt_test_stage(const char *stage);

/* ---- saving (save.c, commit.c) ---- */
/* Process 0, before anyone writes: ROOT and its parents exist, debris of
 * crashed saves (ROOT/.tmp-step-*, .old-step-*) is gone. */
int ckpt_prepare_root(const char *root);
/* Process 0, after every process wrote its block file into tmp: index.json
 * (format `version`; tensors t[0..n) without blocks; own: process 0's file
 * description, the others' from shard-P-of-Q.json), tmp renamed to
 * ROOT/step-N, `latest`, pruning to `keep`. *published (if not NULL): the
 * CLOCK_MONOTONIC time `latest` named the new checkpoint durably. */
struct ck_tensor;
struct timespec;
int ckpt_commit(const char *root, const char *tmp, const ts_ckpt_meta *meta, int version, int n,
                const struct ck_tensor *t, int np, const char *own, int keep, struct timespec *published);

/* ---- the index ---- */
typedef struct {
  int file;                                      /* index into ts_ckpt.f */
  int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK]; /* global index range */
  uint64_t begin, end;                           /* absolute byte range in the file */
  uint64_t hash;                                 /* ckpt_sum(version, block bytes) */
} ck_block;

typedef struct ck_tensor {
  char *name;
  ts_dtype dt;
  int rank;
  int64_t shape[TS_MAX_RANK];
  ts_ckpt_kind kind;
  char *sharding;    /* OpSharding text */
  char *spec;        /* partition spec with axis names ("data,None"; "" replicated) */
  int nb;
  ck_block *b;
} ck_tensor;

typedef struct {
  char *name;
  uint64_t bytes, hash, header_hash;
  int fd;            /* -1 until opened */
  int dfd;           /* once loaded: the file opened with O_DIRECT (-1: the filesystem refuses it) */
  bool loaded;       /* header read and checked */
  st_header hdr;
} ck_file;

struct ts_ckpt {
  char *path;        /* the step directory, or the plain file */
  bool plain;        /* a bare safetensors file: no index, no checksums */
  int version;       /* format_version: 1 util_hash64 checksums, 2 XXH64 */
  ts_ckpt_meta meta;
  int nt, nf;
  ck_tensor *t;
  ck_file *f;
};

/* Parses and checks index.json text (path names it in errors) into ck. */
int ckpt_index_parse(ts_ckpt *ck, const char *text, size_t len, const char *path);
/* Appends the index JSON of ck (meta, files, tensors) to sb. */
void ckpt_index_write(ts_strbuf *sb, const ts_ckpt *ck);
/* Checks the blocks of every tensor tile it exactly and byte ranges of a
 * file never overlap (used on load and, by process 0, before writing). */
int ckpt_index_check(const ts_ckpt *ck, const char *path);
void ckpt_free_contents(ts_ckpt *ck);

/* Opens and checks file `file` (once), then asks the kernel to start reading
 * bytes [begin, end) of it (posix_fadvise WILLNEED): ts_ckpt_load_params
 * announces the blocks it will need a few tens of MB ahead, so the disk
 * reads while the blocks before are checked and copied. */
int ckpt_prefetch(ts_ckpt *ck, int file, uint64_t begin, uint64_t end);

/* "fc1.weight[0:256,0:784]" (block) or "fc1.weight" (whole) into buf. */
void ckpt_block_name(const ck_tensor *t, const ck_block *b, char *buf, size_t n);
int64_t ckpt_block_numel(int rank, const int64_t *start, const int64_t *limit);

#endif
