/* tessel/loader.h — the input pipeline: datasets behind one interface,
 * augmentation, a prefetching loader that places each batch by input
 * sharding, and a progress display for long loops.
 *
 * A ts_source is any dataset that can produce sample i (u8 pixels (c, h, w)
 * and a label) from any thread: an in-memory ts_dataset (IDX, CIFAR-10) or a
 * generated one (the synthetic ImageNet-shaped benchmark data). A token
 * source (seq > 0) produces sample i as seq + 1 tokens instead: byte-level
 * text from any file (ts_source_text) or seeded random tokens
 * (ts_source_synthetic_tokens), for language models.
 *
 * A ts_loader walks a source in a deterministic order — the permutation of
 * (seed, epoch) — cutting it into global batches of `batch` samples; global
 * batch k of epoch e is the same for every mesh and process count. Worker
 * threads decode and augment samples into a ring of aligned host batches
 * (prefetch depth configurable), so the next batch is ready while a step runs.
 * Augmentation randomness is drawn per sample from (seed, epoch, sample index),
 * never from worker timing, so a restored loader replays exactly.
 *
 * Each batch holds three inputs, all row-major f32/i32 host arrays:
 *   "x"    (B, C, H, W) f32  normalized (and augmented) pixels
 *   "y"    (B)          i32  labels
 *   "mask" (B)          f32  1 for a real sample, 0 for padding
 * Over a token source (seq T > 0) the inputs are instead
 *   "x"    (B, T)       i32  tokens [0, T) of each sample
 *   "y"    (B, T)       i32  tokens [1, T + 1): the next token of each x
 *   "mask" (B)          f32  as above
 * (no augmentation; the per-sample key may move a text window, see
 * ts_source_text), and ts_batch_local_tokens reads them on the host.
 * With a mesh, each input has a sharding; the loader cuts, for every device of
 * this process, exactly the block ts_sharding_shard_range gives that device
 * (padded right: rows past the block's limit are zero, their mask 0).
 *
 * The last partial batch of an epoch is dropped (default) or padded: padded
 * rows repeat nothing (x and y are 0) and have mask 0. A model keeps loss and
 * metrics exact on a padded batch by weighting per-sample terms with the mask:
 *   loss    = sum_i mask[i] * ce(logits[i], y[i]) / sum_i mask[i]
 *   correct = sum_i mask[i] * (argmax(logits[i]) == y[i])
 * (the mean over the real samples only; for a full batch mask is all ones and
 * this is the ordinary mean). */
#ifndef TESSEL_LOADER_H
#define TESSEL_LOADER_H

#include <stdio.h> /* FILE: progress output */

#include "tessel/data.h"
#include "tessel/runtime.h" /* ts_buffer: ts_batch_upload */
#include "tessel/spmd.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

/* ---- sources: one dataset interface ---- */

typedef struct ts_source ts_source;
struct ts_source {
  const char *name;  /* "fashion-mnist train", "cifar10 test", "synthetic", ... */
  int64_t n;         /* samples */
  int c, h, w;       /* sample shape (c, h, w), u8 pixels */
  int num_classes;
  /* Writes sample i (0 <= i < n): pixels (c, h, w) to pixels, its label
   * (0 <= label < num_classes) to *label. Called concurrently from worker
   * threads: must be thread-safe. Returns 0, or -1 (with the error set, or
   * the loader names the sample). */
  int (*get)(const ts_source *s, int64_t i, uint8_t *pixels, int32_t *label);
  void (*destroy)(ts_source *s); /* optional: frees ctx and s itself */
  void *ctx;
  /* Token sources: seq > 0 (c, h, w, num_classes and get unused). Sample i
   * is seq + 1 tokens in [0, vocab): the loader's x row is tokens [0, seq),
   * its y row tokens [1, seq + 1). get_tokens writes them to tokens; key is
   * the sample's random key ts_loader_augment_key(seed, epoch, i), which a
   * source may use (a text window's offset) or ignore. Thread-safe like get.
   * Image sources leave these zero. */
  int seq;
  int vocab;
  int (*get_tokens)(const ts_source *s, int64_t i, uint64_t key, int32_t *tokens);
};

/* Sources from these two are the caller's (ts_source_free, after every loader
 * over them). A source reading the in-memory dataset d (borrowed: d must
 * outlive it). */
ts_source *ts_source_from_dataset(const ts_dataset *d, const char *name);
/* The synthetic ImageNet-shaped dataset: n samples (c, h, w) (e.g. 3x224x224)
 * in num_classes classes, generated on the fly from (seed, i): label = a hash
 * of (seed, i); pixels = a per-class colour (channel means) + a per-class
 * stripe pattern + uniform noise, so the labels are learnable. */
ts_source *ts_source_synthetic(int64_t n, int c, int h, int w, int num_classes, uint64_t seed);
void ts_source_free(ts_source *s);

/* ---- text: byte-level token sources ----
 * Any file is a corpus: its bytes are the tokens (vocab 256; not UTF-8
 * aware: bytes are bytes). Its split: train = the first n * 9 / 10 bytes
 * (integer division, n the file's size), validation = the last n - that.
 *
 * TS_TEXT_TRAIN: the split's L bytes are cut into slots of seq start
 * positions, n = (L - 1) / seq samples; sample i is the window of seq + 1
 * bytes starting at i * seq + (key mod m), m = min(seq, L - seq - i * seq)
 * the slot's valid starts (key: the loader's per-sample key of (seed, epoch,
 * i)). So every epoch sees each slot once in the loader's shuffled order,
 * each time at a fresh offset, and every start in [0, L - seq) is
 * reachable; a restored loader replays the same windows.
 *
 * TS_TEXT_VALID: `windows` samples at fixed positions of the split's L
 * bytes: sample i starts at ts_text_valid_start(seed, i, L, seq) whatever
 * the epoch or key (use a loader with no_shuffle: batch k then holds
 * samples [k * batch, (k + 1) * batch), the same at every evaluation).
 *
 * Errors (before any sample is read; each names the file and its size):
 * unreadable, empty, or a split shorter than seq + 1 bytes ("F: 1000 bytes
 * is too short: its validation split (the last 10%, 100 bytes) is shorter
 * than one sample of seq + 1 = 129 bytes; with seq 128 the file needs at
 * least 1281 bytes"). */
typedef enum { TS_TEXT_TRAIN = 0, TS_TEXT_VALID } ts_text_split;

typedef struct {
  const char *path;    /* any file */
  int seq;             /* tokens per sample T (a window is T + 1 bytes), >= 1 */
  ts_text_split split;
  int64_t windows;     /* TS_TEXT_VALID: samples (eval batches x batch), >= 1 */
  uint64_t seed;       /* TS_TEXT_VALID: the positions' seed */
} ts_text_options;

/* The corpus bytes are read once into the source (name: "F train" or
 * "F valid"); the source is the caller's (ts_source_free). */
ts_source *ts_source_text(const ts_text_options *o);
/* The split point of an n-byte file: n * 9 / 10 (the training bytes). */
int64_t ts_text_train_bytes(int64_t file_bytes);
/* Where validation window i starts in a split of L bytes, so that the
 * window [start, start + seq + 1) fits: x = seed ^ (i * 0xd1b54a32d192ed03),
 * start = splitmix64(x) mod (L - seq) (splitmix64: x += 0x9e3779b97f4a7c15,
 * then the usual two xor-shift-multiply rounds and a final xor-shift). */
int64_t ts_text_valid_start(uint64_t seed, int64_t i, int64_t L, int seq);

/* The King James Bible as one verse per line (4137850 bytes, ASCII), made
 * from Debian's bible-kjv package by scripts/install-deps.sh:
 *   bible -f "Genesis 1:1-Revelation 22:21" | sed 's/^[^ ]* //'
 * (each line's verse reference, the text up to the first space, dropped). */
#define TS_KJV_TEXT "/usr/local/share/tessel/kjv.txt"

/* Seeded random tokens for benchmarks: n samples of seq + 1 tokens uniform
 * in [0, vocab), sample i a function of (seed, i) only. */
ts_source *ts_source_synthetic_tokens(int64_t n, int seq, int vocab, uint64_t seed);

/* ---- CIFAR-10 (binary version) ----
 * Files data_batch_1.bin .. data_batch_5.bin (train, 50000) and test_batch.bin
 * (test, 10000): records of 1 label byte (0..9) + 3072 pixel bytes (3, 32, 32),
 * channel planes R, G, B, rows top to bottom. */
#define TS_CIFAR10_RECORD 3073

/* Appends the records of one file to out (out zeroed first if out->n == 0 and
 * out->images == NULL). Errors name the file and the byte offset: a size that
 * is not a multiple of 3073 (truncated record), a label byte > 9. */
int ts_cifar10_read_file(const char *path, ts_dataset *out);
/* Loads split "train" (data_batch_1..5.bin) or "test" (test_batch.bin) from
 * dir (also accepted: dir/cifar-10-batches-bin/). */
int ts_cifar10_load(const char *dir, const char *split, ts_dataset *out);

/* CIFAR-10 training-set channel statistics (of pixel/255). */
#define TS_CIFAR10_MEAN {0.4914f, 0.4822f, 0.4465f}
#define TS_CIFAR10_STD {0.2470f, 0.2435f, 0.2616f}

/* ---- augmentation ---- */

#define TS_AUG_MAX_CHANNELS 4

/* Applied per sample in this order, as torchvision's RandomCrop(size, padding)
 * + RandomHorizontalFlip + ToTensor + Normalize: zero-pad by crop_pad pixels
 * on every side and take a random (h, w) window; flip left-right with
 * probability 1/2; out = (pixel/255 - mean[ch]) / std[ch]. */
typedef struct {
  int crop_pad;                     /* 0: no crop */
  bool hflip;
  float mean[TS_AUG_MAX_CHANNELS];  /* per channel; a single channel uses [0] */
  float std[TS_AUG_MAX_CHANNELS];   /* 0 means 1 */
} ts_augment;

/* dst (c, h, w) f32 from src (c, h, w) u8, the crop offsets and flip drawn
 * from `key` (any 64-bit value: the loader passes a hash of (seed, epoch,
 * sample index)). c <= TS_AUG_MAX_CHANNELS. */
void ts_augment_apply(const ts_augment *a, const uint8_t *src, int c, int h, int w, uint64_t key,
                      float *dst);
/* The choices made for key: crop offsets dy, dx in [0, 2*crop_pad] and flip. */
void ts_augment_draw(const ts_augment *a, uint64_t key, int *dy, int *dx, bool *flip);

/* ---- the loader ---- */

typedef enum {
  TS_LAST_BATCH_DROP = 0, /* default: an epoch has floor(n / batch) batches */
  TS_LAST_BATCH_PAD,      /* ceil(n / batch) batches; padding rows get mask 0 */
} ts_last_batch;

typedef enum {
  /* Default: every process decodes the whole global batch and keeps the
   * blocks of its own devices. Works for any sharding; costs P times the
   * decoding with P processes. */
  TS_LOAD_GLOBAL = 0,
  /* Each process decodes only the batch rows its own devices hold: the span
   * of their blocks of the batch dim (of x, y and mask). With the devices
   * shared evenly and the batch dim sharded over them in process order, that
   * is process p's equal share, rows [p*B/P, (p+1)*B/P) (torch_xla's
   * minibatch input); with an uneven split (4 devices over 3 processes: 2,
   * 1, 1) a process decodes its devices' rows (x sharded 4 ways: B/2, B/4,
   * B/4 rows; sharded over "data" of a data=2,model=2 mesh: B/2 rows each,
   * processes 1 and 2 decoding the same half). Requires batch % P == 0,
   * every device's batch block full (batch divisible by the number of blocks
   * the batch dim of each input is cut into), and no process needing the
   * whole batch (a batch dim sharded within a process's devices, or a
   * replicated mask: use TS_LOAD_GLOBAL then). Every process reaches the same
   * verdict. */
  TS_LOAD_MINIBATCH,
} ts_load_mode;

/* The sharding of one named input ("x", "y" or "mask"). */
typedef struct {
  const char *name;
  const ts_sharding *sharding; /* borrowed for the loader's lifetime */
} ts_input_sharding;

typedef struct {
  int64_t batch;          /* global batch size (required) */
  int prefetch;           /* batches prepared ahead of the consumer [2] */
  int workers;            /* background threads [1] */
  uint64_t seed;          /* shuffling and augmentation */
  bool no_shuffle;        /* identity order (evaluation) */
  ts_last_batch last_batch;
  ts_augment augment;     /* zero: no crop/flip, mean 0, std 1 */
  /* Placement. mesh NULL: no sharding, one "device" (index 0) holds the whole
   * batch. Otherwise either n_inputs shardings by name — "x" and "y" are
   * required, "mask" defaults to y's — or n_inputs == 1 with name NULL: one
   * spec for x whose batch-dim entry also shards y and mask. Over a token
   * source, y (B, T) takes x's whole spec in the one-spec form, and a
   * missing "mask" takes y's batch-dim entry. */
  const ts_mesh *mesh;
  int n_inputs;
  const ts_input_sharding *inputs;
  /* Per-host loading: this process is process_index of process_count [0 of
   * 1] (ts_client_process_index / _count). It owns the devices the runtime
   * gives it: the N mesh devices shared out as evenly as possible, the first
   * N % P processes taking one more, numbered process-major — process p owns
   * global ids [p*(N/P) + min(p, N%P), that + N/P + (p < N%P)) (e.g. 4
   * devices over 3 processes: {0,1}, {2}, {3}). N >= P. */
  int process_index, process_count;
  ts_load_mode mode;
} ts_loader_options;

typedef struct ts_loader ts_loader;
typedef struct ts_loader_batch ts_loader_batch;

/* Starts the workers. src is borrowed (free the loader first); opts is read
 * during the call, except the input shardings it points to, which are
 * borrowed for the loader's lifetime. The loader is the caller's
 * (ts_loader_free); its functions are called from one thread at a time (its
 * workers are internal). Errors: a missing input name, a spec whose rank
 * differs from the input's, minibatch divisibility. */
ts_loader *ts_loader_new(const ts_source *src, const ts_loader_options *opts);
/* Stops and joins the workers; frees every batch. */
void ts_loader_free(ts_loader *l);

/* Batches per epoch (floor or ceil of n / batch). */
int64_t ts_loader_steps_per_epoch(const ts_loader *l);
/* The next batch in order (blocks until it is ready; epochs follow each other
 * without end). Valid until the next call to ts_loader_next, ts_loader_seek,
 * ts_loader_restore or ts_loader_free. NULL and the error set when a sample
 * could not be read (and again on every later call: the error is sticky). */
const ts_loader_batch *ts_loader_next(ts_loader *l);

/* Position of a batch: epoch (0-based) and batch index within it. */
int64_t ts_batch_epoch(const ts_loader_batch *b);
int64_t ts_batch_step(const ts_loader_batch *b);
/* Real samples in the global batch (batch, or fewer for a padded last batch). */
int64_t ts_batch_valid(const ts_loader_batch *b);
/* Dataset index of global batch row r, -1 for padding. Every process knows
 * the whole global order even in minibatch mode. */
int64_t ts_batch_sample_index(const ts_loader_batch *b, int64_t row);
/* This process's decoded rows [row_start, row_start + rows) of the global
 * batch: x (rows, C, H, W), y (rows), mask (rows); NULL where not wanted. */
int64_t ts_batch_local_rows(const ts_loader_batch *b, int64_t *row_start, const float **x,
                            const int32_t **y, const float **mask);

/* Over a token source: this process's rows of x (rows, T) and y (rows, T)
 * tokens and mask (rows), as ts_batch_local_rows (which gives x NULL for a
 * token source). Returns rows, or -1 (error set) for an image source. */
int64_t ts_batch_local_tokens(const ts_loader_batch *b, int64_t *row_start, const int32_t **x,
                              const int32_t **y, const float **mask);

/* The host staging block of input `name` for mesh device `device` (must be
 * one of this process's devices; without a mesh, device 0): data is the
 * padded block (shape[] = ts_sharding_shard_shape), start/limit its global
 * index range per dim (rows past limit - start are zero). The memory is the
 * batch's and 64-byte aligned. ts_buffer_write_shard takes the block without
 * padding (its [start, limit) part only); ts_batch_upload does that. */
typedef struct {
  const void *data;
  ts_dtype dtype;
  int rank;
  int64_t shape[TS_MAX_RANK];
  int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK];
  size_t bytes;
} ts_shard_view;
int ts_batch_shard(const ts_loader_batch *b, const char *name, int device, ts_shard_view *out);

/* Copies input `name` of b into the device buffer dst (dtype and global
 * shape of the input: x (B, C, H, W) f32, y (B) i32, mask (B) f32), this
 * process's devices' blocks only: with several processes every process calls
 * it for the same buffer (a token source: x and y (B, T) i32). When this
 * process holds the whole global batch
 * (TS_LOAD_GLOBAL, or one process) dst may have any sharding (the runtime
 * cuts each local device's block). With TS_LOAD_MINIBATCH over several
 * processes dst must have the loader's sharding for `name` (the loader cannot
 * reshard rows it did not decode; the error names the input and both
 * shardings): each local device's block is written with
 * ts_buffer_write_shard. */
int ts_batch_upload(const ts_loader_batch *b, const char *name, ts_buffer *dst);

/* The augmentation key of dataset sample `index` in epoch `epoch` (what the
 * loader passes to ts_augment_apply): a hash of (seed, epoch, index). */
uint64_t ts_loader_augment_key(uint64_t seed, int64_t epoch, int64_t index);

/* The devices this process owns (ids in global order; borrowed from l) and
 * their count. */
int ts_loader_local_devices(const ts_loader *l, const int **ids);

/* ---- resumable state ----
 * The state is (seed, epoch, position of the next batch ts_loader_next will
 * return) plus checks (dataset size, batch, last-batch mode). Augmentation
 * randomness is derived from it, so restoring replays the same batches. */
#define TS_LOADER_STATE_BYTES 64
int ts_loader_save(const ts_loader *l, uint8_t state[TS_LOADER_STATE_BYTES]);
/* Drops the prefetched batches and continues from the saved position. The
 * state must come from a loader over a source of the same size with the same
 * batch size, seed and last-batch mode (errors say which differs). */
int ts_loader_restore(ts_loader *l, const uint8_t state[TS_LOADER_STATE_BYTES]);
int ts_loader_save_file(const ts_loader *l, const char *path);
int ts_loader_restore_file(ts_loader *l, const char *path);
/* Moves to batch `step` of epoch `epoch`, dropping prefetched batches (as
 * restore does). */
int ts_loader_seek(ts_loader *l, int64_t epoch, int64_t step);

/* ---- metrics ---- */
typedef struct {
  int64_t batches, samples; /* delivered by ts_loader_next (real samples, this process) */
  double wait_s;            /* total time ts_loader_next blocked waiting for a batch */
  double elapsed_s;         /* from the first ts_loader_next to the last return */
  double samples_per_s;     /* samples / elapsed_s */
  double produce_s;         /* worker time spent reading, decoding, augmenting, placing */
} ts_loader_stats;
void ts_loader_get_stats(const ts_loader *l, ts_loader_stats *out);
void ts_loader_reset_stats(ts_loader *l);

/* ---- progress ----
 * On a terminal: one line redrawn in place ("epoch 2 [#####     ] 3.2k/60k
 * 4.1k samples/s eta 12s loss 0.31"); otherwise (CI logs) a plain line every
 * interval_s seconds and at the end. */
typedef enum { TS_PROGRESS_AUTO = 0, TS_PROGRESS_BAR, TS_PROGRESS_LINES } ts_progress_mode;
typedef struct ts_progress ts_progress;

/* out: where to draw (AUTO picks BAR when out is a terminal and the process
 * was not started by an MPI launcher, whose forwarded stdout is a
 * pseudo-terminal wherever mpirun's own output goes); label: "epoch 3";
 * total: units of work (samples); interval_s: LINES period [10]. */
ts_progress *ts_progress_new(FILE *out, ts_progress_mode mode, const char *label, int64_t total,
                             double interval_s);
/* done: units finished so far; extra: text appended ("loss 0.3124") or NULL. */
void ts_progress_update(ts_progress *p, int64_t done, const char *extra);
/* Final line (a newline after the bar); frees p. */
void ts_progress_finish(ts_progress *p, const char *extra);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
