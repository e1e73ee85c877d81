/* tools.c — whole-checkpoint operations on top of load.c: loading a
 * parameter set (with a list of every difference between the checkpoint and
 * the program), verifying every file's checksum, and exporting one plain
 * safetensors file (PyTorch's state_dict format). */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "util/error.h"

#define LOAD_AHEAD (64u << 20)         /* bytes announced to the kernel ahead of the reads */
#define LOAD_THREADS 4                 /* most threads reading tensors at once */
#define LOAD_MIN_PER_THREAD (8u << 20) /* bytes: below, fewer threads */

/* A byte range this process will read: block bytes of parameter `param`. */
typedef struct {
  int param, file;
  uint64_t begin, end;
} load_need;

/* The blocks the devices of this process need, in the order
 * ts_ckpt_load_params reads them (each block once per parameter). */
static int load_plan(ts_ckpt *ck, ts_client *c, ts_params *p, bool model_only, load_need **out, int *n) {
  int cap = 0, nd = ts_client_num_devices(c);
  *out = NULL, *n = 0;
  for (int i = 0; i < ts_params_count(p); i++) {
    const char *name = ts_params_name(p, i);
    if (model_only && ts_ckpt_kind_of(name, ts_params_trainable(p, i)) == TS_CKPT_OPTIMIZER) continue;
    const ck_tensor *t = &ck->t[ts_ckpt_find(ck, name)];
    ts_buffer *b = ts_params_buffer(p, c, i);
    int first = *n;
    for (int d = 0; d < nd; d++) {
      int64_t st[TS_MAX_RANK] = {0}, li[TS_MAX_RANK] = {0};
      if (!ts_client_is_local_device(c, d)) continue;
      if (ts_buffer_shard_range(b, d, st, li) < 0) return -1;
      for (int k = 0; k < t->nb; k++) {
        const ck_block *bk = &t->b[k];
        bool overlap = bk->end > bk->begin, seen = false;
        for (int e = 0; overlap && e < t->rank; e++)
          overlap = (bk->start[e] > st[e] ? bk->start[e] : st[e]) < (bk->limit[e] < li[e] ? bk->limit[e] : li[e]);
        for (int q = first; overlap && q < *n && !seen; q++)
          seen = (*out)[q].file == bk->file && (*out)[q].begin == bk->begin;
        if (!overlap || seen) continue;
        if (*n == cap) {
          cap = cap ? 2 * cap : 256;
          load_need *nn = realloc(*out, (size_t)cap * sizeof *nn);
          if (!nn) return set_error("ts_ckpt_load_params: out of memory");
          *out = nn;
        }
        (*out)[(*n)++] = (load_need){.param = i, .file = bk->file, .begin = bk->begin, .end = bk->end};
      }
    }
  }
  return 0;
}

/* ts_ckpt_load_params's workers: the parameters still to read (in order),
 * the read-ahead cursor over `need`, the first error. */
typedef struct {
  ts_ckpt *ck;
  ts_client *c;
  int np;
  ts_buffer **buf;       /* per parameter (NULL: not loaded) */
  const char **name;
  uint64_t *need_bytes;  /* per parameter: block bytes it reads */
  load_need *need;
  int nneed;
  uint64_t total;
  pthread_mutex_t mu;    /* guards what follows, and opening files (ckpt_prefetch) */
  int next, ahead;
  uint64_t advised, consumed;
  int rc;
  char err[1024];
} load_pool;

static void *load_worker(void *arg) {
  load_pool *lp = arg;
  ckpt_scratch scratch = {0}; /* this thread's O_DIRECT memory, reused tensor after tensor */
  for (;;) {
    pthread_mutex_lock(&lp->mu);
    int i = lp->next;
    while (i < lp->np && !lp->buf[i]) i++;
    lp->next = i + 1;
    /* read-ahead: this tensor's blocks (its files opened here, under the
     * lock) and up to LOAD_AHEAD bytes beyond what is read */
    while (lp->rc == 0 && i < lp->np && lp->ahead < lp->nneed &&
           (lp->need[lp->ahead].param <= i || lp->advised < lp->consumed + LOAD_AHEAD)) {
      const load_need *nd = &lp->need[lp->ahead];
      if (ckpt_prefetch(lp->ck, nd->file, nd->begin, nd->end) < 0) {
        lp->rc = -1;
        snprintf(lp->err, sizeof lp->err, "%s", ts_last_error());
      }
      lp->advised += nd->end - nd->begin;
      lp->ahead++;
    }
    bool stop = lp->rc != 0 || i >= lp->np;
    pthread_mutex_unlock(&lp->mu);
    if (stop) break;
    int rc = ckpt_read_buffer(lp->ck, lp->c, lp->name[i], lp->buf[i], &scratch);
    pthread_mutex_lock(&lp->mu);
    lp->consumed += lp->need_bytes[i];
    if (rc != 0 && lp->rc == 0) {
      lp->rc = -1;
      snprintf(lp->err, sizeof lp->err, "%s", ts_last_error());
    }
    pthread_mutex_unlock(&lp->mu);
  }
  ckpt_scratch_free(&scratch);
  return NULL;
}

int ts_ckpt_load_params(ts_ckpt *ck, ts_client *c, ts_params *p, bool model_only) {
  if (!ck || !c || !p) return set_error("ts_ckpt_load_params: NULL checkpoint, client or parameter set");
  int np = ts_params_count(p);
  ts_strbuf diff = {0};
  int ndiff = 0;
  bool *used = calloc((size_t)ck->nt + 1, sizeof *used);
  if (!used) return set_error("ts_ckpt_load_params: out of memory");
  /* First every difference, so the error lists them all; nothing is loaded unless none. */
  for (int i = 0; i < np; i++) {
    const char *name = ts_params_name(p, i);
    if (model_only && ts_ckpt_kind_of(name, ts_params_trainable(p, i)) == TS_CKPT_OPTIMIZER) continue;
    int k = ts_ckpt_find(ck, name);
    ts_buffer *b = ts_params_buffer(p, c, i);
    if (!b) {
      free(used);
      free(diff.buf);
      return -1;
    }
    if (k < 0) {
      sb_printf(&diff, "%s%s: missing from the checkpoint", ndiff++ ? "; " : "", name);
      continue;
    }
    used[k] = true;
    ckpt_plain_view(ck, k, b); /* nanoGPT's merged c_attn */
    const ck_tensor *t = &ck->t[k];
    bool same = t->dt == ts_buffer_dtype(b) && t->rank == ts_buffer_rank(b);
    for (int d = 0; same && d < t->rank; d++) same = t->shape[d] == ts_buffer_shape(b)[d];
    if (!same) {
      sb_printf(&diff, "%s%s: checkpoint %s[", ndiff++ ? "; " : "", name, ts_dtype_name(t->dt));
      for (int d = 0; d < t->rank; d++) sb_printf(&diff, d ? ",%lld" : "%lld", (long long)t->shape[d]);
      sb_printf(&diff, "], program %s[", ts_dtype_name(ts_buffer_dtype(b)));
      for (int d = 0; d < ts_buffer_rank(b); d++)
        sb_printf(&diff, d ? ",%lld" : "%lld", (long long)ts_buffer_shape(b)[d]);
      sb_printf(&diff, "]");
    }
  }
  for (int k = 0; k < ck->nt; k++)
    if (!used[k] && !(model_only && ck->t[k].kind == TS_CKPT_OPTIMIZER))
      sb_printf(&diff, "%s%s: in the checkpoint but not in the program", ndiff++ ? "; " : "", ck->t[k].name);
  free(used);
  char *text = sb_finish(&diff, "ts_ckpt_load_params");
  if (!text) return -1;
  if (ndiff) {
    set_error("checkpoint %s does not match the program (%d difference%s): %s", ck->path, ndiff,
                 ndiff > 1 ? "s" : "", text);
    free(text);
    return -1;
  }
  free(text);
  load_pool lp = {.ck = ck, .c = c, .np = np};
  lp.buf = calloc((size_t)np + 1, sizeof *lp.buf);
  lp.name = calloc((size_t)np + 1, sizeof *lp.name);
  lp.need_bytes = calloc((size_t)np + 1, sizeof *lp.need_bytes);
  int rc = lp.buf && lp.name && lp.need_bytes ? 0 : set_error("ts_ckpt_load_params: out of memory");
  for (int i = 0; i < np && rc == 0; i++) { /* on this thread: ts_params_buffer may move values */
    const char *name = ts_params_name(p, i);
    if (model_only && ts_ckpt_kind_of(name, ts_params_trainable(p, i)) == TS_CKPT_OPTIMIZER) continue;
    lp.name[i] = name;
    if (!(lp.buf[i] = ts_params_buffer(p, c, i))) rc = -1;
  }
  if (rc == 0) rc = load_plan(ck, c, p, model_only, &lp.need, &lp.nneed);
  for (int k = 0; rc == 0 && k < lp.nneed; k++) {
    lp.need_bytes[lp.need[k].param] += lp.need[k].end - lp.need[k].begin;
    lp.total += lp.need[k].end - lp.need[k].begin;
  }
  if (rc == 0) {
    /* Workers take the parameters in order; the copies and checksums of
     * several tensors run at once while the kernel reads ahead. */
    int nt = ts_client_num_threads(c);
    if (nt > LOAD_THREADS) nt = LOAD_THREADS;
    if ((uint64_t)nt > lp.total / LOAD_MIN_PER_THREAD) nt = (int)(lp.total / LOAD_MIN_PER_THREAD);
    if (nt < 1) nt = 1;
    pthread_t th[LOAD_THREADS];
    bool started[LOAD_THREADS] = {false};
    pthread_mutex_init(&lp.mu, NULL);
    for (int w = 1; w < nt; w++) started[w] = pthread_create(&th[w], NULL, load_worker, &lp) == 0;
    load_worker(&lp);
    for (int w = 1; w < nt; w++)
      if (started[w]) pthread_join(th[w], NULL);
    pthread_mutex_destroy(&lp.mu);
    if (lp.rc != 0) rc = set_error("%s", lp.err);
  }
  free(lp.need);
  free(lp.buf);
  free(lp.name);
  free(lp.need_bytes);
  return rc;
}

int ts_ckpt_verify(ts_ckpt *ck) {
  if (!ck) return set_error("ts_ckpt_verify: NULL checkpoint");
  for (int i = 0; i < ck->nf; i++) {
    ck_file *f = &ck->f[i];
    char path[4096];
    if (ck->plain) snprintf(path, sizeof path, "%s", ck->path);
    else snprintf(path, sizeof path, "%s/%s", ck->path, f->name);
    uint64_t h = 0, size = 0;
    if (ckpt_file_hash(path, ck->version, &h, &size) < 0) {
      if (!ck->plain) set_error("checkpoint %s: file %s: %s", ck->path, f->name, ts_last_error());
      return -1;
    }
    if (size != f->bytes)
      return set_error("%s: %llu bytes but the index says %llu (truncated or replaced)", path,
                          (unsigned long long)size, (unsigned long long)f->bytes);
    if (!ck->plain && h != f->hash)
      return set_error("%s: checksum mismatch (the file is corrupted)", path);
  }
  /* Headers and every block's own checksum: read each tensor once. */
  for (int i = 0; i < ck->nt; i++) {
    const ck_tensor *t = &ck->t[i];
    size_t bytes = (size_t)ts_shape_numel(t->rank, t->shape) * ts_dtype_size(t->dt);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) return set_error("ts_ckpt_verify: out of memory (tensor %s)", t->name);
    int rc = ts_ckpt_read_host(ck, t->name, buf, bytes);
    free(buf);
    if (rc < 0) return -1;
  }
  return 0;
}

/* The GPT's c_attn (tessel/nn.h ts_model_gpt): tessel holds nanoGPT's (3C, C)
 * weight as (3, C, C) and its (3C) bias as (3, C); the export writes
 * nanoGPT's shapes (ckpt_plain_view reads them back). */
static bool export_merged(const ck_tensor *t) {
  size_t n = strlen(t->name);
  bool w = n > 19 && strcmp(t->name + n - 19, ".attn.c_attn.weight") == 0 && t->rank == 3;
  bool b = n > 17 && strcmp(t->name + n - 17, ".attn.c_attn.bias") == 0 && t->rank == 2;
  return (w || b) && t->shape[0] == 3;
}

int ts_ckpt_export(ts_ckpt *ck, const char *out, bool with_optimizer) {
  if (!ck || !out || !out[0]) return set_error("ts_ckpt_export: NULL checkpoint or output path");
  st_entry *e = calloc((size_t)ck->nt + 1, sizeof *e);
  int *which = calloc((size_t)ck->nt + 1, sizeof *which);
  int n = 0, rc = e && which ? 0 : set_error("ts_ckpt_export: out of memory");
  uint64_t off = 0;
  for (int i = 0; i < ck->nt && rc == 0; i++) {
    const ck_tensor *t = &ck->t[i];
    if (t->kind == TS_CKPT_OPTIMIZER && !with_optimizer) continue;
    st_entry *s = &e[n];
    which[n++] = i;
    s->name = t->name; /* borrowed */
    s->dt = t->dt;
    s->rank = t->rank;
    memcpy(s->shape, t->shape, sizeof s->shape);
    if (export_merged(t)) { /* PyTorch's layout: nanoGPT's c_attn (3C, C) / (3C), the same bytes */
      s->rank = t->rank - 1;
      s->shape[0] = t->shape[0] * t->shape[1];
      for (int d = 1; d < s->rank; d++) s->shape[d] = t->shape[d + 1];
    }
    s->begin = off;
    off += (uint64_t)ts_shape_numel(t->rank, t->shape) * ts_dtype_size(t->dt);
    s->end = off;
  }
  size_t hlen = 0;
  char *hdr = rc == 0 ? st_header_build(n, e, &hlen) : NULL;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", out);
  int fd = -1;
  if (rc == 0 && !hdr) rc = -1;
  if (rc == 0 && (fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644)) < 0)
    rc = set_error("%s: cannot create: %s", tmp, strerror(errno));
  if (rc == 0) {
    uint8_t pre[8];
    for (int k = 0; k < 8; k++) pre[k] = (uint8_t)((uint64_t)hlen >> (8 * k));
    rc = ckpt_write_all(fd, pre, 8, tmp);
    if (rc == 0) rc = ckpt_write_all(fd, hdr, hlen, tmp);
  }
  for (int k = 0; k < n && rc == 0; k++) {
    size_t bytes = (size_t)(e[k].end - e[k].begin);
    void *buf = malloc(bytes ? bytes : 1);
    if (!buf) rc = set_error("ts_ckpt_export: out of memory (tensor %s)", e[k].name);
    else if (ts_ckpt_read_host(ck, ck->t[which[k]].name, buf, bytes) < 0) rc = -1;
    else rc = ckpt_write_all(fd, buf, bytes, tmp);
    free(buf);
  }
  if (rc == 0 && fsync(fd) != 0) rc = set_error("%s: fsync failed: %s", tmp, strerror(errno));
  if (fd >= 0 && close(fd) != 0 && rc == 0) rc = set_error("%s: close failed: %s", tmp, strerror(errno));
  if (rc == 0 && rename(tmp, out) != 0) rc = set_error("%s: rename to %s failed: %s", tmp, out, strerror(errno));
  if (rc != 0 && fd >= 0) unlink(tmp);
  free(hdr);
  free(e);
  free(which);
  return rc;
}
