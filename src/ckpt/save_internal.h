/* save_internal.h — what save.c (the saver: planning, threads, barriers,
 * the API) and save_write.c (the files stage: copying the held blocks into
 * the file's image, checksums, O_DIRECT writes) share. Not installed. */
#ifndef TESSEL_CKPT_SAVE_INTERNAL_H
#define TESSEL_CKPT_SAVE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "ckpt/ckpt_internal.h"

#define PATH_MAX_LEN 4096
#define SAVE_CHUNK (8u << 20) /* bytes of the file copied, then written, as one piece of the pipeline */
#define SAVE_SLOTS 4           /* chunks in the ring: the filler runs up to SAVE_SLOTS - 1 ahead of the writes */
#define SAVE_IO_THREADS 2      /* threads writing chunks (two writes in flight keep the disk busy) */
#define SAVE_ALIGN 4096u    /* O_DIRECT: offsets, lengths and memory in multiples of this */
#define SAVE_PIECE (256u << 10) /* bytes hashed into the block's and the file's checksum in turn (stays in L2) */

/* A block this process writes: tensor t, range [start, limit) read from device. */
typedef struct {
  int t, device;
  int64_t start[TS_MAX_RANK], limit[TS_MAX_RANK];
} save_block;

/* One save: what the snapshot captured and what the writer produced. Owned
 * by the saver; the writer thread touches only the fields after `data`
 * markers below while the caller's thread leaves the job alone. */
typedef struct {
  char root[PATH_MAX_LEN], tmp[PATH_MAX_LEN];
  ts_ckpt_meta meta;
  int keep, rank, np, version;
  bool background;     /* a saver's save (else ts_ckpt_save's) */
  bool own_thread;     /* the writer runs on the saver's thread (not the caller's): it may lower its priority */
  int n;
  ck_tensor *t;        /* each tensor's name, dtype, shape, kind, sharding, spec (no blocks): for the index */
  int nb;
  save_block *bl;      /* this process's blocks, in file order */
  st_entry *se;        /* their header entries (offsets into the data) */
  char *hdr;           /* the 8-byte length prefix and the JSON header */
  size_t hlen;         /* bytes of the JSON header */
  uint64_t data_bytes; /* bytes of the data part */
  ts_buffer_hold **holds; /* (n) each tensor's buffer held (tessel/runtime.h) until the writer copied it; NULL
                           * where an earlier entry holds the same buffer (same[i]) */
  int *same;           /* (n) the entry whose hold tensor i reads */
  double t_start, snapshot_s, blocked_s;
  /* written by the writer: */
  char *side;          /* the description of what this process wrote (JSON) */
  int rc;
  char err[1024];
  double copy_s, write_s;
  double written_at;   /* util_now_s when this process's block file was done */
  struct timespec published; /* when `latest` named it (ckpt_commit) */
  double committed_at; /* util_now_s after ckpt_commit (pruning included) */
  /* Several processes, on the caller's thread: */
  int phase;           /* PHASE_FILES: files being written; PHASE_COMMIT: every file agreed written,
                        * process 0 commits on the saver's commit thread */
  double found_at;     /* the poll that found every process's file written */
  double lag_s;        /* from the last process's file written to found_at */
  double commit_wait_s; /* the caller's time in the polls/wait that ran the barriers and the commit */
  int commit_rc;       /* the commit thread's verdict (process 0) */
  char commit_err[1024];
} save_job;

enum { PHASE_FILES = 0, PHASE_COMMIT = 1, PHASE_FAILED = 2 /* the "files" barrier failed in a poll (err) */ };

struct ts_ckpt_saver {
  ts_client *c;
  save_job *job;       /* the save in flight; NULL if none */
  pthread_t th;
  bool threaded;       /* job's writer runs on th (else it ran inline) */
  atomic_int done;     /* the writer finished (its verdict is in job->rc) */
  pthread_t cth;       /* several processes, process 0: the commit (PHASE_COMMIT) */
  bool cthreaded;
  atomic_int cdone;    /* the commit finished (job->commit_rc) */
  char *snap;          /* the ring of the files stage's pipeline (SAVE_SLOTS chunks), kept for the next saves */
  size_t snap_cap;
  ts_ckpt_priority prio; /* of the writer and commit threads (and the copy and hash threads they start) */
  ts_ckpt_save_stats stats;
};

/* save.c: the calling thread (a saver's own, never the caller's) to the
 * saver's priority p (nice 19 or SCHED_IDLE; NORMAL: unchanged). Best effort. */
void saver_thread_priority(ts_ckpt_priority p);
/* save.c: releases the holds not released yet. */
void job_release(save_job *j);
/* save_write.c, on the writer's thread: the job's block file written from
 * the held buffers through a pipeline (copy + XXH64 of a chunk into the ring
 * s->snap while the chunks before are written with O_DIRECT; each hold
 * released once its bytes are copied), fsync'ed, and j->side; every hold is
 * released when it returns. Sets j->copy_s, j->write_s. 0 or -1 (error set). */
int save_files(ts_ckpt_saver *s, save_job *j);

#endif
