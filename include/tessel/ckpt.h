/* tessel/ckpt.h — sharded checkpoints: save the tensors of a training run
 * (parameters, optimizer state) from their sharded device buffers, load them
 * back onto any mesh and any number of processes, and keep the training
 * state (step, optimizer, schedule, loader position, seeds) beside them.
 *
 * A checkpoint is a directory ROOT/step-NNNNNNNN (8 digits, the step) with
 *   index.json                              what is where (docs/checkpoints.md)
 *   shard-PPPPP-of-QQQQQ.safetensors        process P's blocks (Q processes)
 * and ROOT/latest, a one-line file naming the newest step directory. Each
 * block file is a valid safetensors file (8-byte little-endian header length,
 * JSON header, raw little-endian data); a tensor held whole is stored under
 * its own name, a block of a sharded one as "name[s0:l0,s1:l1]" (global index
 * ranges). Replicas are written once, by the process holding the lowest
 * device id among them. index.json records for every tensor its global dtype
 * and shape, the sharding it was saved with, and for every block its file,
 * byte range and checksum (XXH64; format 2, docs/checkpoints.md; format-1
 * checkpoints still load); for every file its size and checksum.
 *
 * Names are those of ts_params, which are PyTorch's state_dict names and
 * layouts for the built-in models (Linear weight (out, in), Conv2d weight
 * (out, in, kh, kw)); optimizer state is "<param>.exp_avg", ".exp_avg_sq"
 * (AdamW) or ".momentum_buffer" (SGD), the keys of torch.optim's state.
 *
 * Saving is atomic: files go to a temporary directory beside the target,
 * every file is fsync'ed, the directory is renamed into place and the parent
 * fsync'ed, then `latest` is replaced by a rename. A crash at any point leaves
 * the previous checkpoint and `latest` whole. Loading checks every length,
 * offset, dtype, shape and checksum of what it reads; a bad checkpoint is an
 * error naming the file and the tensor. */
#ifndef TESSEL_CKPT_H
#define TESSEL_CKPT_H

#include "tessel/loader.h"  /* TS_LOADER_STATE_BYTES */
#include "tessel/nn.h"      /* ts_params, ts_optim_config, ts_lr_schedule */
#include "tessel/runtime.h" /* ts_client, ts_buffer */

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

typedef enum {
  TS_CKPT_PARAM = 0,  /* model parameter (trainable) */
  TS_CKPT_OPTIMIZER,  /* optimizer state */
  TS_CKPT_BUFFER,     /* other model state (batch-norm running statistics) */
} ts_ckpt_kind;
const char *ts_ckpt_kind_name(ts_ckpt_kind k); /* "param", "optimizer", "buffer" */
/* The kind of a ts_params entry by its name: optimizer state ends in
 * ".exp_avg", ".exp_avg_sq" or ".momentum_buffer"; else a trainable
 * parameter is TS_CKPT_PARAM and the rest TS_CKPT_BUFFER. */
ts_ckpt_kind ts_ckpt_kind_of(const char *name, bool trainable);

#define TS_CKPT_TEXT 1024

/* The training state saved beside the tensors. Zero-initialize; fields the
 * caller leaves zero are saved as zero. */
typedef struct {
  int64_t step;                 /* optimizer steps done */
  int64_t epoch, epoch_step;    /* schedule position: epoch (0-based) and batch within it of the next step */
  bool has_optim;
  ts_optim_config optim;        /* kind and hyperparameters */
  bool has_schedule;
  ts_lr_schedule schedule;
  uint64_t seed;                /* initialization / shuffling / dropout seed */
  bool has_loader;
  uint8_t loader[TS_LOADER_STATE_BYTES]; /* ts_loader_save */
  char config[TS_CKPT_TEXT];    /* model configuration, "key=value key=value ..." */
  uint64_t program_hash;        /* e.g. ts_graph_hash of the training step */
  char mesh[256];               /* the mesh of the run ("data=2,model=2"); on save, "" = the mesh of
                                 * the first sharded tensor, "" if none */
  /* Filled by ts_ckpt_save / ts_ckpt_open (ignored on save): */
  int num_devices, process_count;
  char tessel_version[32];
} ts_ckpt_meta;

/* One tensor to save: its name, device buffer (any sharding) and kind. */
typedef struct {
  const char *name;
  const ts_buffer *buf;
  ts_ckpt_kind kind;
} ts_ckpt_entry;

/* Collective (every process of c calls it with the same arguments): saves
 * the n tensors to ROOT/step-NNNNNNNN (meta->step), then points ROOT/latest
 * at it. Each process reads only its own devices' blocks and writes one file;
 * after a barrier process 0 writes index.json, renames the directory into
 * place and replaces `latest`; a final barrier makes the checkpoint complete
 * on every process when the call returns. An existing directory of the same
 * step is replaced. keep > 0: afterwards, step directories beyond the newest
 * `keep` are deleted (only once the new one is in place). If any process
 * fails, every process returns -1 (the error names the failing rank) and
 * the previous checkpoint is untouched. Debris of saves that crashed
 * (ROOT/.tmp-step-*, .old-step-*) is removed first. */
int ts_ckpt_save(ts_client *c, const char *root, const ts_ckpt_meta *meta, int n, const ts_ckpt_entry *t, int keep);
/* The same for every entry of a parameter set (its buffers on c; kinds by
 * ts_ckpt_kind_of). Collective. */
int ts_ckpt_save_params(ts_client *c, const char *root, ts_params *p, const ts_ckpt_meta *meta, int keep);

/* ---- saving in the background ----
 * A saver writes checkpoints while training goes on. ts_ckpt_saver_save
 * returns once every buffer is held (ts_buffer_hold, tessel/runtime.h: no
 * copy; the caller waits only for the plan of the blocks and the holds); a
 * thread of the saver then writes the block file from the held memory as a
 * pipeline (a chunk is copied into a small ring of host memory and hashed
 * while the chunks before it are written; each buffer's hold is released as
 * soon as its bytes are copied), fsyncs it and,
 * alone or once every process is done, the checkpoint is committed exactly as
 * by ts_ckpt_save (index.json, renames, `latest`, pruning): the same bytes,
 * the same atomicity. The device buffers may change (the next steps) or be
 * freed as soon as ts_ckpt_saver_save returns: a step that updates a held
 * buffer in place computes into other memory instead (the buffer's spare,
 * see ts_buffer_hold); a ts_buffer_write of a held buffer waits until its
 * bytes are copied.
 *
 * At most one save is in flight: ts_ckpt_saver_save first waits for the
 * previous one and finishes it (every requested checkpoint is written; the
 * time it waited is `blocked_s` in the statistics). The error of a
 * background save is never lost: the next poll, save or wait of the saver
 * returns -1 with it (the checkpoint is then not written; the previous one
 * stays intact and `latest` names it).
 *
 * Collective under MPI: every process calls save, poll and wait at the same
 * points with the same arguments (poll: after every training step). With
 * several processes the poll that finds every process's file written (one
 * 8-byte all-gather per poll tells) runs the "files" barrier and process 0
 * starts the commit (index.json, the renames, `latest`, pruning) on a thread
 * of its own; a later poll (when process 0's commit is done) runs the last
 * barrier and completes the save. The checkpoint is thus committed at most
 * one step after the last process's file is written (every step polls), and
 * no step waits for the commit's disk writes; a wait commits inline. Alone,
 * the commit runs on the saver's thread right after the file. Memory: the
 * saver's ring (32 MiB, kept for the next saves); a buffer a step updated
 * while it was held keeps a spare of its size. */
typedef struct ts_ckpt_saver ts_ckpt_saver;
/* Not collective; nothing is allocated for the ring until a save. */
ts_ckpt_saver *ts_ckpt_saver_new(ts_client *c);
/* The CPU priority of the saver's threads that do CPU work (the copy of the
 * held blocks and the checksums, the commit; Linux applies it per thread;
 * the two threads that only submit O_DIRECT writes and wait for the disk
 * keep the caller's priority, so the disk never waits for a starved thread;
 * where the writes are buffered they drop to it too). LOW (the
 * default; nice 19) and IDLE (SCHED_IDLE) let the training threads win every
 * core they want: a step run during a save is barely slowed (memory
 * bandwidth aside), and the save takes the CPU the steps leave, so it takes
 * longer while training runs; it never starves (the kernel still gives it a
 * small share). NORMAL: the caller's priority (fastest save, the step slowed
 * by about the save's CPU work). The default comes from TESSEL_CKPT_PRIORITY
 * (low|idle|normal; README); ts_ckpt_saver_new fails on another value.
 * ts_ckpt_save (the caller waits) always runs at the caller's priority. */
typedef enum { TS_CKPT_PRIORITY_LOW = 0, TS_CKPT_PRIORITY_IDLE = 1, TS_CKPT_PRIORITY_NORMAL = 2 } ts_ckpt_priority;
/* Sets the priority of the next saves (not of one in flight). 0, or -1 for a
 * value out of the enum. */
int ts_ckpt_saver_set_priority(ts_ckpt_saver *s, ts_ckpt_priority p);
/* Waits for the in-flight save (its error is dropped: call ts_ckpt_saver_wait
 * first to see it) and frees the saver. Collective when a save is in flight. */
void ts_ckpt_saver_free(ts_ckpt_saver *s);
/* As ts_ckpt_save / ts_ckpt_save_params, but returns after the snapshot. -1:
 * this save could not start, or the previous one failed (its error). */
int ts_ckpt_saver_save(ts_ckpt_saver *s, const char *root, const ts_ckpt_meta *meta, int n, const ts_ckpt_entry *t,
                       int keep);
int ts_ckpt_saver_save_params(ts_ckpt_saver *s, const char *root, ts_params *p, const ts_ckpt_meta *meta, int keep);
/* 1: a save is in flight; 0: none (a save that finished since the last call
 * is now complete: see ts_ckpt_saver_stats); -1: the save failed (the error
 * says why). Never blocks on the disk; with several processes one 8-byte
 * all-gather while a save is in flight (none otherwise). */
int ts_ckpt_saver_poll(ts_ckpt_saver *s);
/* Blocks until the in-flight save (if any) is complete: 0, or -1 with its error. */
int ts_ckpt_saver_wait(ts_ckpt_saver *s);

typedef struct {
  int64_t step;       /* the step of the last completed save (-1: none yet) */
  int saves;          /* saves completed */
  uint64_t bytes;     /* bytes of this process's block file (header + data) */
  double snapshot_s;  /* the caller's wait inside ts_ckpt_saver_save: plan, holds and the prepare barrier */
  double blocked_s;   /* of that, waiting for the previous save to finish */
  double write_s;     /* the saver's thread: block file copied, hashed, written and fsync'ed (the whole
                       * pipeline; copy_s overlaps it) */
  double total_s;     /* from the start of the save to `latest` naming it (complete and durable; process 0;
                       * the others: to the end of the save) */
  double prune_s;     /* after that: the replaced step and those beyond `keep` deleted (process 0) */
  double copy_s;      /* from the start of write_s to the last held byte copied (every hold released) */
  /* Several processes (0 alone): */
  double commit_lag_s;  /* from the last process's block file written to the poll (or wait) that found every
                         * file written: at most the step it happened in, as every step polls */
  double commit_wait_s; /* the caller's time in the polls (or wait) that ran this save's barriers (and, in a
                         * wait, process 0's commit; a poll leaves it to a thread) */
} ts_ckpt_save_stats;
/* The statistics of the last completed save (metrics: CkptSnapshotTime,
 * CkptCopyTime, CkptWriteTime, CkptSaveTime, CkptBlockedTime, CkptBytes). */
int ts_ckpt_saver_stats(const ts_ckpt_saver *s, ts_ckpt_save_stats *out);
/* The step of the save in flight, -1 if none. */
int64_t ts_ckpt_saver_pending_step(const ts_ckpt_saver *s);

/* ---- loading ---- */
typedef struct ts_ckpt ts_ckpt;

/* Opens a checkpoint: ROOT (follows ROOT/latest), a step directory, or a
 * plain .safetensors file (one file, whole tensors, no checksums: what
 * `tessel ckpt export` and PyTorch's safetensors write). Reads and checks
 * index.json (format, version, every length and offset); block files are
 * opened when first read. Not collective: every process opens on its own.
 * A ts_ckpt is used by one thread at a time. */
ts_ckpt *ts_ckpt_open(const char *path);
void ts_ckpt_close(ts_ckpt *ck);
/* The step directory (or file) opened. */
const char *ts_ckpt_path(const ts_ckpt *ck);
const ts_ckpt_meta *ts_ckpt_get_meta(const ts_ckpt *ck);

typedef struct {
  const char *name;
  ts_dtype dtype;
  int rank;
  int64_t shape[TS_MAX_RANK];
  ts_ckpt_kind kind;
  int num_blocks;        /* blocks stored (replicas once) */
  const char *sharding;  /* OpSharding text it was saved with ("{replicated}") */
  const char *spec;      /* its partition spec on the saved mesh ("data,None"; "" replicated) */
} ts_ckpt_tensor_info;
int ts_ckpt_num_tensors(const ts_ckpt *ck);
int ts_ckpt_tensor(const ts_ckpt *ck, int i, ts_ckpt_tensor_info *out);
int ts_ckpt_find(const ts_ckpt *ck, const char *name); /* index or -1 (no error set) */
int ts_ckpt_num_files(const ts_ckpt *ck);
/* File i's name (relative to the step directory) and size in bytes. */
int ts_ckpt_file(const ts_ckpt *ck, int i, const char **name, uint64_t *bytes);

/* Fills dst, a buffer of client c, with tensor `name`, whatever mesh it was
 * saved on: each of this process's devices reads just the stored blocks
 * that overlap its block of dst (whole, checking their checksums) and keeps
 * the overlap. dst's dtype and global shape must equal the tensor's. Not
 * collective, but every process must load a buffer for it to be whole. */
int ts_ckpt_read(ts_ckpt *ck, ts_client *c, const char *name, ts_buffer *dst);
/* The whole tensor into host memory (bytes = numel * dtype size). */
int ts_ckpt_read_host(ts_ckpt *ck, const char *name, void *dst, size_t bytes);
/* Loads every entry of p from the checkpoint into its buffer on c (after
 * ts_params_buffer: any sharding). Entries of kind TS_CKPT_OPTIMIZER are
 * skipped when model_only (they keep their values); every other entry must
 * be in the checkpoint with its dtype and shape, and with !model_only every
 * checkpoint tensor must be an entry of p: errors list what differs. */
int ts_ckpt_load_params(ts_ckpt *ck, ts_client *c, ts_params *p, bool model_only);
/* Reads every file whole and checks its size and checksum against the index
 * (loading checks only what it reads). */
int ts_ckpt_verify(ts_ckpt *ck);
/* Writes one plain safetensors file `out` with every tensor whole (kinds
 * param and buffer; optimizer state too with with_optimizer), in the
 * checkpoint's order; atomic (temporary file + rename). */
/* Layouts are PyTorch's; the GPT's attention input projection, held by
 * tessel as (3, C, C) weight and (3, C) bias, is written as nanoGPT's
 * c_attn (3C, C) and (3C) (the same bytes), and reading a plain file's
 * tensor into a buffer whose first two dims it merges takes the buffer's
 * shape (ts_ckpt_read, ts_ckpt_load_params: --init-from an export). The
 * tied LM head is transformer.wte.weight (nanoGPT's lm_head.weight is not
 * written). */
int ts_ckpt_export(ts_ckpt *ck, const char *out, bool with_optimizer);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
