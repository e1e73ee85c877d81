/* index.c — index.json: the checkpoint's table of contents (format, training
 * state, files with sizes and checksums, tensors with their blocks). Written
 * by process 0 of a save; parsed strictly on load, every field type- and
 * range-checked, then the blocks checked to tile each tensor exactly and
 * never to share file bytes. docs/checkpoints.md shows an example. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"
#include "util/error.h"

static const char *const kind_names[] = {"param", "optimizer", "buffer"};
static const char *const optim_names[] = {"sgd", "adamw"};
static const char *const sched_names[] = {"constant", "cosine"};

const char *ts_ckpt_kind_name(ts_ckpt_kind k) { return (unsigned)k < 3 ? kind_names[k] : "?"; }

int64_t ckpt_block_numel(int rank, const int64_t *start, const int64_t *limit) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= limit[d] - start[d];
  return n;
}

void ckpt_block_name(const ck_tensor *t, const ck_block *b, char *buf, size_t n) {
  bool whole = true;
  for (int d = 0; d < t->rank; d++) whole = whole && b->start[d] == 0 && b->limit[d] == t->shape[d];
  int o = snprintf(buf, n, "%s", t->name);
  if (whole) return;
  for (int d = 0; d < t->rank && o > 0 && (size_t)o < n; d++)
    o += snprintf(buf + o, n - (size_t)o, "%c%lld:%lld", d ? ',' : '[', (long long)b->start[d],
                  (long long)b->limit[d]);
  if (o > 0 && (size_t)o < n) snprintf(buf + o, n - (size_t)o, "]");
}

void ckpt_free_contents(ts_ckpt *ck) {
  for (int i = 0; i < ck->nt; i++) {
    free(ck->t[i].name);
    free(ck->t[i].sharding);
    free(ck->t[i].spec);
    free(ck->t[i].b);
  }
  for (int i = 0; i < ck->nf; i++) {
    free(ck->f[i].name);
    st_header_free(&ck->f[i].hdr);
  }
  free(ck->t);
  free(ck->f);
  ck->t = NULL, ck->f = NULL, ck->nt = ck->nf = 0;
}

/* ---- writing ---- */

static void w_double(ts_strbuf *sb, const char *key, double v, bool comma) {
  sb_printf(sb, "%s\"%s\":", comma ? "," : "", key);
  if (isfinite(v)) sb_printf(sb, "%.17g", v);
  else sb_printf(sb, "null");
}

static void w_ints(ts_strbuf *sb, int n, const int64_t *v) {
  sb_printf(sb, "[");
  for (int d = 0; d < n; d++) sb_printf(sb, d ? ",%lld" : "%lld", (long long)v[d]);
  sb_printf(sb, "]");
}

void ckpt_index_write(ts_strbuf *sb, const ts_ckpt *ck) {
  const ts_ckpt_meta *m = &ck->meta;
  int ver = ck->version ? ck->version : CKPT_FORMAT_VERSION;
  sb_printf(sb, "{\n  \"format\": \"%s\",\n  \"format_version\": %d,\n", CKPT_FORMAT, ver);
  if (ver >= 2) sb_printf(sb, "  \"checksum\": \"xxh64\",\n");
  sb_printf(sb, "  \"tessel_version\": ");
  json_write_string(sb, TS_VERSION_STRING);
  sb_printf(sb, ",\n  \"step\": %lld,\n  \"mesh\": ", (long long)m->step);
  json_write_string(sb, m->mesh);
  sb_printf(sb, ",\n  \"num_devices\": %d,\n  \"process_count\": %d,\n", m->num_devices, m->process_count);
  sb_printf(sb, "  \"state\": {\"epoch\":%lld,\"epoch_step\":%lld,\"seed\":\"%016" PRIx64 "\",",
               (long long)m->epoch, (long long)m->epoch_step, m->seed);
  sb_printf(sb, "\"program_hash\":\"%016" PRIx64 "\",\n    \"config\":", m->program_hash);
  json_write_string(sb, m->config);
  sb_printf(sb, ",\n    \"optimizer\":");
  if (m->has_optim) {
    const ts_optim_config *o = &m->optim;
    sb_printf(sb, "{\"kind\":\"%s\",\"nesterov\":%s", optim_names[o->kind == TS_OPTIM_ADAMW],
                 o->nesterov ? "true" : "false");
    w_double(sb, "momentum", o->momentum, true);
    w_double(sb, "weight_decay", o->weight_decay, true);
    w_double(sb, "beta1", o->beta1, true);
    w_double(sb, "beta2", o->beta2, true);
    w_double(sb, "eps", o->eps, true);
    sb_printf(sb, "}");
  } else {
    sb_printf(sb, "null");
  }
  sb_printf(sb, ",\n    \"schedule\":");
  if (m->has_schedule) {
    const ts_lr_schedule *s = &m->schedule;
    sb_printf(sb, "{\"kind\":\"%s\",\"warmup_steps\":%lld,\"total_steps\":%lld", sched_names[s->kind == TS_LR_COSINE],
                 (long long)s->warmup_steps, (long long)s->total_steps);
    w_double(sb, "base_lr", s->base_lr, true);
    w_double(sb, "min_lr", s->min_lr, true);
    sb_printf(sb, "}");
  } else {
    sb_printf(sb, "null");
  }
  sb_printf(sb, ",\n    \"loader\":");
  if (m->has_loader) {
    sb_printf(sb, "\"");
    for (int k = 0; k < TS_LOADER_STATE_BYTES; k++) sb_printf(sb, "%02x", m->loader[k]);
    sb_printf(sb, "\"");
  } else {
    sb_printf(sb, "null");
  }
  sb_printf(sb, "},\n  \"files\": [");
  for (int i = 0; i < ck->nf; i++) {
    const ck_file *f = &ck->f[i];
    sb_printf(sb, "%s\n    {\"name\":", i ? "," : "");
    json_write_string(sb, f->name);
    sb_printf(sb, ",\"bytes\":%llu,\"hash\":\"%016" PRIx64 "\",\"header_hash\":\"%016" PRIx64 "\"}",
                 (unsigned long long)f->bytes, f->hash, f->header_hash);
  }
  sb_printf(sb, "\n  ],\n  \"tensors\": [");
  for (int i = 0; i < ck->nt; i++) {
    const ck_tensor *t = &ck->t[i];
    sb_printf(sb, "%s\n    {\"name\":", i ? "," : "");
    json_write_string(sb, t->name);
    sb_printf(sb, ",\"dtype\":\"%s\",\"shape\":", st_dtype_code(t->dt));
    w_ints(sb, t->rank, t->shape);
    sb_printf(sb, ",\"kind\":\"%s\",\"sharding\":", ts_ckpt_kind_name(t->kind));
    json_write_string(sb, t->sharding ? t->sharding : "{replicated}");
    sb_printf(sb, ",\"spec\":");
    json_write_string(sb, t->spec ? t->spec : "");
    sb_printf(sb, ",\"blocks\":[");
    for (int k = 0; k < t->nb; k++) {
      const ck_block *b = &t->b[k];
      sb_printf(sb, "%s\n      {\"file\":%d,\"start\":", k ? "," : "", b->file);
      w_ints(sb, t->rank, b->start);
      sb_printf(sb, ",\"limit\":");
      w_ints(sb, t->rank, b->limit);
      sb_printf(sb, ",\"byte_range\":[%llu,%llu],\"hash\":\"%016" PRIx64 "\"}", (unsigned long long)b->begin,
                   (unsigned long long)b->end, b->hash);
    }
    sb_printf(sb, "]}");
  }
  sb_printf(sb, "\n  ]\n}\n");
}

/* ---- parsing: getters that name the field in their errors ---- */

typedef struct {
  const char *path; /* the file, for errors */
  char where[160];  /* "tensors[3].blocks[1]" */
} ix_ctx;

static const json_val *ix_get(ix_ctx *c, const json_val *o, const char *key, json_type type) {
  const json_val *v = json_get(o, key);
  static const char *const tn[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
  if (!v) {
    set_error("%s: %s%s'%s' is missing", c->path, c->where, c->where[0] ? ": " : "", key);
    return NULL;
  }
  if (v->type != type) {
    set_error("%s: %s%s'%s' must be %s", c->path, c->where, c->where[0] ? ": " : "", key, tn[type]);
    return NULL;
  }
  return v;
}

static int ix_int(ix_ctx *c, const json_val *o, const char *key, int64_t min, int64_t max, int64_t *out) {
  const json_val *v = ix_get(c, o, key, JSON_NUMBER);
  if (!v) return -1;
  if (!v->is_int || v->i < min || v->i > max)
    return set_error("%s: %s%s'%s' must be an integer in [%lld, %lld]", c->path, c->where,
                        c->where[0] ? ": " : "", key, (long long)min, (long long)max);
  *out = v->i;
  return 0;
}

static int ix_double(ix_ctx *c, const json_val *o, const char *key, double *out) {
  const json_val *v = ix_get(c, o, key, JSON_NUMBER);
  if (!v) return -1;
  *out = v->num;
  return 0;
}

static int ix_hex(ix_ctx *c, const json_val *v, const char *key, uint8_t *out, size_t n) {
  if (!v)
    return set_error("%s: %s%s'%s' is missing", c->path, c->where, c->where[0] ? ": " : "", key);
  if ( v->type != JSON_STRING || v->len != 2 * n)
    return set_error("%s: %s%s'%s' must be a string of %zu hex digits", c->path, c->where,
                        c->where[0] ? ": " : "", key, 2 * n);
  for (size_t k = 0; k < 2 * n; k++) {
    char ch = v->str[k];
    int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
    if (d < 0)
      return set_error("%s: %s%s'%s' must be lowercase hex digits", c->path, c->where, c->where[0] ? ": " : "",
                          key);
    if (k % 2 == 0) out[k / 2] = (uint8_t)(d << 4);
    else out[k / 2] |= (uint8_t)d;
  }
  return 0;
}

static int ix_hash(ix_ctx *c, const json_val *o, const char *key, uint64_t *out) {
  uint8_t b[8];
  if (ix_hex(c, json_get(o, key), key, b, 8) < 0) return -1;
  uint64_t h = 0;
  for (int k = 0; k < 8; k++) h = h << 8 | b[k];
  *out = h;
  return 0;
}

static int ix_choice(ix_ctx *c, const json_val *o, const char *key, const char *const *names, int n, int *out) {
  const json_val *v = ix_get(c, o, key, JSON_STRING);
  if (!v) return -1;
  for (int k = 0; k < n; k++)
    if (strcmp(v->str, names[k]) == 0) {
      *out = k;
      return 0;
    }
  return set_error("%s: %s%s'%s' has unknown value '%s'", c->path, c->where, c->where[0] ? ": " : "", key, v->str);
}

static int ix_copy_str(ix_ctx *c, const json_val *o, const char *key, char *dst, size_t n) {
  const json_val *v = ix_get(c, o, key, JSON_STRING);
  if (!v) return -1;
  if (v->len >= n || strlen(v->str) != v->len)
    return set_error("%s: '%s' is too long or holds a NUL", c->path, key);
  memcpy(dst, v->str, v->len + 1);
  return 0;
}

/* An int array of exactly n entries in [min, max]. */
static int ix_ints(ix_ctx *c, const json_val *o, const char *key, int n, int64_t min, int64_t max, int64_t *out) {
  const json_val *v = ix_get(c, o, key, JSON_ARRAY);
  if (!v) return -1;
  if (v->n != n)
    return set_error("%s: %s: '%s' has %d entries, expected %d", c->path, c->where, key, v->n, n);
  for (int k = 0; k < n; k++) {
    const json_val *x = &v->items[k];
    if (x->type != JSON_NUMBER || !x->is_int || x->i < min || x->i > max)
      return set_error("%s: %s: '%s'[%d] must be an integer in [%lld, %lld]", c->path, c->where, key, k,
                          (long long)min, (long long)max);
    out[k] = x->i;
  }
  return 0;
}

static int ix_state(ix_ctx *c, const json_val *st, ts_ckpt_meta *m) {
  snprintf(c->where, sizeof c->where, "state");
  if (ix_int(c, st, "epoch", 0, INT64_MAX, &m->epoch) < 0 || ix_int(c, st, "epoch_step", 0, INT64_MAX, &m->epoch_step) < 0 ||
      ix_hash(c, st, "seed", &m->seed) < 0 || ix_hash(c, st, "program_hash", &m->program_hash) < 0 ||
      ix_copy_str(c, st, "config", m->config, sizeof m->config) < 0)
    return -1;
  const json_val *o = json_get(st, "optimizer");
  if (o && o->type != JSON_NULL) {
    int kind = 0;
    const json_val *nes;
    snprintf(c->where, sizeof c->where, "state.optimizer");
    if (o->type != JSON_OBJECT) return set_error("%s: state: 'optimizer' must be an object or null", c->path);
    if (ix_choice(c, o, "kind", optim_names, 2, &kind) < 0 || !(nes = ix_get(c, o, "nesterov", JSON_BOOL)) ||
        ix_double(c, o, "momentum", &m->optim.momentum) < 0 ||
        ix_double(c, o, "weight_decay", &m->optim.weight_decay) < 0 || ix_double(c, o, "beta1", &m->optim.beta1) < 0 ||
        ix_double(c, o, "beta2", &m->optim.beta2) < 0 || ix_double(c, o, "eps", &m->optim.eps) < 0)
      return -1;
    m->has_optim = true;
    m->optim.kind = kind ? TS_OPTIM_ADAMW : TS_OPTIM_SGD;
    m->optim.nesterov = nes->boolean;
  }
  const json_val *s = json_get(st, "schedule");
  if (s && s->type != JSON_NULL) {
    int kind = 0;
    snprintf(c->where, sizeof c->where, "state.schedule");
    if (s->type != JSON_OBJECT) return set_error("%s: state: 'schedule' must be an object or null", c->path);
    if (ix_choice(c, s, "kind", sched_names, 2, &kind) < 0 ||
        ix_int(c, s, "warmup_steps", 0, INT64_MAX, &m->schedule.warmup_steps) < 0 ||
        ix_int(c, s, "total_steps", 0, INT64_MAX, &m->schedule.total_steps) < 0 ||
        ix_double(c, s, "base_lr", &m->schedule.base_lr) < 0 || ix_double(c, s, "min_lr", &m->schedule.min_lr) < 0)
      return -1;
    m->has_schedule = true;
    m->schedule.kind = kind ? TS_LR_COSINE : TS_LR_CONSTANT;
  }
  const json_val *l = json_get(st, "loader");
  if (l && l->type != JSON_NULL) {
    snprintf(c->where, sizeof c->where, "state");
    if (ix_hex(c, l, "loader", m->loader, TS_LOADER_STATE_BYTES) < 0) return -1;
    m->has_loader = true;
  }
  return 0;
}

static int ix_tensor(ix_ctx *c, const json_val *tv, int i, int nf, ck_tensor *t) {
  snprintf(c->where, sizeof c->where, "tensors[%d]", i);
  if (tv->type != JSON_OBJECT) return set_error("%s: tensors[%d] is not an object", c->path, i);
  const json_val *nm = ix_get(c, tv, "name", JSON_STRING), *dt, *sh, *shd, *bl;
  if (!nm) return -1;
  if (nm->len == 0 || strlen(nm->str) != nm->len || nm->len > 1000)
    return set_error("%s: tensors[%d] has an empty, too long or NUL-holding name", c->path, i);
  if (!(t->name = strdup(nm->str))) return set_error("out of memory");
  snprintf(c->where, sizeof c->where, "tensor %s", t->name);
  int kind = 0;
  if (!(dt = ix_get(c, tv, "dtype", JSON_STRING)) || !(sh = ix_get(c, tv, "shape", JSON_ARRAY)) ||
      !(shd = ix_get(c, tv, "sharding", JSON_STRING)) || !(bl = ix_get(c, tv, "blocks", JSON_ARRAY)) ||
      ix_choice(c, tv, "kind", kind_names, 3, &kind) < 0)
    return -1;
  t->kind = (ts_ckpt_kind)kind;
  if (st_dtype_from_code(dt->str, &t->dt) < 0)
    return set_error("%s: tensor %s has unknown dtype '%s'", c->path, t->name, dt->str);
  if (sh->n > TS_MAX_RANK) return set_error("%s: tensor %s has rank %d (at most %d)", c->path, t->name, sh->n, TS_MAX_RANK);
  t->rank = sh->n;
  if (ix_ints(c, tv, "shape", t->rank, 0, (int64_t)1 << 48, t->shape) < 0) return -1;
  int64_t nonzero = 1; /* the product of the non-zero dims, bounded before each step: no overflow anywhere later */
  for (int d = 0; d < t->rank; d++) {
    if (t->shape[d] > 0 && nonzero > (((int64_t)1 << 48) / t->shape[d]))
      return set_error("%s: tensor %s is too large", c->path, t->name);
    if (t->shape[d] > 0) nonzero *= t->shape[d];
  }
  if (!(t->sharding = strdup(shd->str))) return set_error("out of memory");
  const json_val *spec = json_get(tv, "spec"); /* optional: what the sharding was made from */
  if (spec && spec->type != JSON_STRING) return set_error("%s: tensor %s: 'spec' must be a string", c->path, t->name);
  if (!(t->spec = strdup(spec ? spec->str : ""))) return set_error("out of memory");
  if (bl->n > 65536) return set_error("%s: tensor %s has %d blocks (at most 65536)", c->path, t->name, bl->n);
  if (!(t->b = calloc((size_t)bl->n + 1, sizeof *t->b))) return set_error("out of memory");
  t->nb = bl->n;
  for (int k = 0; k < bl->n; k++) {
    const json_val *b = &bl->items[k];
    ck_block *cb = &t->b[k];
    snprintf(c->where, sizeof c->where, "tensor %s block %d", t->name, k);
    if (b->type != JSON_OBJECT) return set_error("%s: %s is not an object", c->path, c->where);
    int64_t f, br[2];
    if (ix_int(c, b, "file", 0, nf - 1, &f) < 0 || ix_ints(c, b, "start", t->rank, 0, (int64_t)1 << 48, cb->start) < 0 ||
        ix_ints(c, b, "limit", t->rank, 0, (int64_t)1 << 48, cb->limit) < 0 ||
        ix_ints(c, b, "byte_range", 2, 0, INT64_MAX, br) < 0 || ix_hash(c, b, "hash", &cb->hash) < 0)
      return -1;
    cb->file = (int)f;
    cb->begin = (uint64_t)br[0], cb->end = (uint64_t)br[1];
  }
  return 0;
}

int ckpt_index_parse(ts_ckpt *ck, const char *text, size_t len, const char *path) {
  json_val *root = json_parse(text, len, path);
  if (!root) return -1;
  ix_ctx c = {.path = path};
  int rc = -1;
  ts_ckpt_meta *m = &ck->meta;
  const json_val *fmt, *files, *tensors, *st;
  int64_t ver, v;
  if (root->type != JSON_OBJECT) {
    set_error("%s: not a JSON object (not a tessel checkpoint index)", path);
    goto done;
  }
  if (!(fmt = ix_get(&c, root, "format", JSON_STRING))) goto done;
  if (strcmp(fmt->str, CKPT_FORMAT) != 0) {
    set_error("%s: format is '%s', not '%s'", path, fmt->str, CKPT_FORMAT);
    goto done;
  }
  if (ix_int(&c, root, "format_version", 0, INT32_MAX, &ver) < 0) goto done;
  if (ver < 1 || ver > CKPT_FORMAT_VERSION) {
    set_error("%s: format version %lld; this tessel reads versions 1 to %d", path, (long long)ver,
              CKPT_FORMAT_VERSION);
    goto done;
  }
  ck->version = (int)ver;
  if (ver >= 2) { /* the checksum algorithm, named (version 1: util_hash64, implied) */
    const json_val *sum = ix_get(&c, root, "checksum", JSON_STRING);
    if (!sum) goto done;
    if (strcmp(sum->str, "xxh64") != 0) {
      set_error("%s: checksum '%s' is unknown (this tessel checks xxh64)", path, sum->str);
      goto done;
    }
  }
  if (ix_copy_str(&c, root, "tessel_version", m->tessel_version, sizeof m->tessel_version) < 0 ||
      ix_int(&c, root, "step", 0, INT64_MAX, &m->step) < 0 || ix_copy_str(&c, root, "mesh", m->mesh, sizeof m->mesh) < 0)
    goto done;
  if (ix_int(&c, root, "num_devices", 0, 1 << 20, &v) < 0) goto done;
  m->num_devices = (int)v;
  if (ix_int(&c, root, "process_count", 1, 1 << 20, &v) < 0) goto done;
  m->process_count = (int)v;
  if (!(st = ix_get(&c, root, "state", JSON_OBJECT)) || ix_state(&c, st, m) < 0) goto done;
  c.where[0] = 0;
  if (!(files = ix_get(&c, root, "files", JSON_ARRAY)) || !(tensors = ix_get(&c, root, "tensors", JSON_ARRAY))) goto done;
  if (files->n > 1 << 20 || tensors->n > 1 << 20) {
    set_error("%s: too many files or tensors", path);
    goto done;
  }
  if (!(ck->f = calloc((size_t)files->n + 1, sizeof *ck->f)) || !(ck->t = calloc((size_t)tensors->n + 1, sizeof *ck->t))) {
    set_error("%s: out of memory", path);
    goto done;
  }
  for (int i = 0; i < files->n; i++) {
    const json_val *fv = &files->items[i];
    ck_file *f = &ck->f[i];
    f->fd = -1;
    ck->nf++;
    snprintf(c.where, sizeof c.where, "files[%d]", i);
    const json_val *nm;
    if (fv->type != JSON_OBJECT) {
      set_error("%s: files[%d] is not an object", path, i);
      goto done;
    }
    if (!(nm = ix_get(&c, fv, "name", JSON_STRING))) goto done;
    /* A file name inside the step directory: nothing that leaves it. */
    if (nm->len == 0 || nm->len > 255 || strlen(nm->str) != nm->len || strchr(nm->str, '/') || nm->str[0] == '.') {
      set_error("%s: files[%d] has an unsafe name '%s'", path, i, nm->str);
      goto done;
    }
    for (int j = 0; j < i; j++)
      if (strcmp(ck->f[j].name, nm->str) == 0) {
        set_error("%s: file '%s' is listed twice", path, nm->str);
        goto done;
      }
    if (!(f->name = strdup(nm->str))) goto done;
    int64_t bytes;
    if (ix_int(&c, fv, "bytes", 8, INT64_MAX, &bytes) < 0 || ix_hash(&c, fv, "hash", &f->hash) < 0 ||
        ix_hash(&c, fv, "header_hash", &f->header_hash) < 0)
      goto done;
    f->bytes = (uint64_t)bytes;
  }
  for (int i = 0; i < tensors->n; i++) {
    ck->nt++;
    if (ix_tensor(&c, &tensors->items[i], i, ck->nf, &ck->t[i]) < 0) goto done;
    for (int j = 0; j < i; j++)
      if (strcmp(ck->t[j].name, ck->t[i].name) == 0) {
        set_error("%s: tensor %s is listed twice", path, ck->t[i].name);
        goto done;
      }
  }
  rc = ckpt_index_check(ck, path);
done:
  json_free(root);
  return rc;
}

/* ---- consistency ---- */

typedef struct {
  uint64_t begin, end;
  int t, b;
} ix_range;

static int ix_range_cmp(const void *a, const void *b) {
  const ix_range *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

int ckpt_index_check(const ts_ckpt *ck, const char *path) {
  size_t nr = 0;
  for (int i = 0; i < ck->nt; i++) nr += (size_t)ck->t[i].nb;
  ix_range *r = malloc((nr + 1) * sizeof *r);
  if (!r) return set_error("%s: out of memory", path);
  nr = 0;
  int rc = 0;
  for (int i = 0; i < ck->nt && rc == 0; i++) {
    const ck_tensor *t = &ck->t[i];
    int64_t sum = 0, numel = ts_shape_numel(t->rank, t->shape);
    for (int k = 0; k < t->nb && rc == 0; k++) {
      const ck_block *b = &t->b[k];
      for (int d = 0; d < t->rank && rc == 0; d++)
        if (b->start[d] > b->limit[d] || b->limit[d] > t->shape[d])
          rc = set_error("%s: tensor %s block %d: range [%lld, %lld) of dim %d is outside its size %lld", path,
                            t->name, k, (long long)b->start[d], (long long)b->limit[d], d, (long long)t->shape[d]);
      if (rc) break;
      int64_t bn = ckpt_block_numel(t->rank, b->start, b->limit);
      if (b->file < 0 || b->file >= ck->nf) {
        rc = set_error("%s: tensor %s block %d: file %d does not exist", path, t->name, k, b->file);
        break;
      }
      if (b->begin > b->end || b->end - b->begin != (uint64_t)bn * ts_dtype_size(t->dt)) {
        rc = set_error("%s: tensor %s block %d: byte range [%llu, %llu) does not hold its %lld %s values", path,
                          t->name, k, (unsigned long long)b->begin, (unsigned long long)b->end, (long long)bn,
                          ts_dtype_name(t->dt));
        break;
      }
      if (b->begin < 8 || b->end > ck->f[b->file].bytes) {
        rc = set_error("%s: tensor %s block %d: byte range [%llu, %llu) is outside file %s (%llu bytes)", path,
                          t->name, k, (unsigned long long)b->begin, (unsigned long long)b->end, ck->f[b->file].name,
                          (unsigned long long)ck->f[b->file].bytes);
        break;
      }
      for (int j = 0; j < k && rc == 0; j++) { /* blocks must not overlap */
        bool overlap = bn > 0;
        for (int d = 0; d < t->rank && overlap; d++) {
          int64_t lo = b->start[d] > t->b[j].start[d] ? b->start[d] : t->b[j].start[d];
          int64_t hi = b->limit[d] < t->b[j].limit[d] ? b->limit[d] : t->b[j].limit[d];
          overlap = lo < hi;
        }
        if (overlap) rc = set_error("%s: tensor %s: blocks %d and %d overlap", path, t->name, j, k);
      }
      sum += bn;
      r[nr++] = (ix_range){b->begin, b->end, i, k};
    }
    if (rc == 0 && sum != numel)
      rc = set_error("%s: tensor %s: its blocks hold %lld of its %lld values (missing blocks)", path, t->name,
                        (long long)sum, (long long)numel);
  }
  /* Per file, block byte ranges must not share bytes. */
  for (int f = 0; f < ck->nf && rc == 0; f++) {
    size_t m = 0;
    for (size_t k = 0; k < nr; k++)
      if (ck->t[r[k].t].b[r[k].b].file == f) r[m++] = r[k];
    qsort(r, m, sizeof *r, ix_range_cmp);
    for (size_t k = 1; k < m && rc == 0; k++)
      if (r[k].begin < r[k - 1].end)
        rc = set_error("%s: file %s: tensors %s and %s overlap in bytes [%llu, %llu)", path, ck->f[f].name,
                          ck->t[r[k - 1].t].name, ck->t[r[k].t].name, (unsigned long long)r[k].begin,
                          (unsigned long long)r[k - 1].end);
    /* compacting removed other files' ranges: rebuild for the next file */
    nr = 0;
    for (int i = 0; i < ck->nt; i++)
      for (int k = 0; k < ck->t[i].nb; k++) r[nr++] = (ix_range){ck->t[i].b[k].begin, ck->t[i].b[k].end, i, k};
  }
  free(r);
  return rc;
}
