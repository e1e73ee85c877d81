/* ckpt_common.h — shared by the checkpoint tests: a few named tensors of
 * several dtypes, ranks and uneven sizes with deterministic contents, the
 * mesh layouts they are saved and loaded on, and helpers to build the
 * sharded buffers and compare what comes back. Header-only (static). */
#ifndef TS_TEST_CKPT_COMMON_H
#define TS_TEST_CKPT_COMMON_H

#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

typedef struct {
  const char *name;
  ts_dtype dt;
  int rank;
  int64_t shape[4];
  ts_ckpt_kind kind;
} ck_spec;

/* Uneven dims (13, 7, 5) so blocks get padded; every dtype size once. */
static const ck_spec CK_TENSORS[] = {
    {"fc1.weight", TS_F32, 2, {13, 7}, TS_CKPT_PARAM},
    {"fc1.bias", TS_F32, 1, {13}, TS_CKPT_PARAM},
    {"fc1.weight.exp_avg", TS_F32, 2, {13, 7}, TS_CKPT_OPTIMIZER},
    {"conv.weight", TS_BF16, 4, {6, 3, 2, 5}, TS_CKPT_PARAM},
    {"table", TS_F64, 3, {4, 5, 3}, TS_CKPT_BUFFER},
    {"counts", TS_I32, 2, {8, 4}, TS_CKPT_BUFFER},
    {"mask", TS_U8, 1, {9}, TS_CKPT_BUFFER},
    {"scale", TS_F32, 0, {0}, TS_CKPT_PARAM},
};
#define CK_N ((int)(sizeof CK_TENSORS / sizeof CK_TENSORS[0]))

/* A layout: a mesh and, per tensor, the spec on it (NULL = replicated). */
typedef struct {
  const char *label;
  const char *mesh; /* NULL: one device, no mesh */
  const char *spec[CK_N];
} ck_layout;

static const ck_layout CK_LAYOUTS[] = {
    {"1 device", NULL, {0}},
    {"data=2", "data=2", {"data,None", "data", "data,None", "None,None,None,data", "data,None,None", NULL, "data", ""}},
    {"data=2,model=2", "data=2,model=2",
     {"model,data", "model", "model,None", "data+model,None,None,None", "None,model,data", "data,model", NULL, ""}},
    {"fsdp=2", "fsdp=2", {"fsdp,None", NULL, "fsdp,None", "fsdp,None,None,None", "None,fsdp,None", "None,fsdp", "fsdp", ""}},
    {"model=3", "model=3", {"None,model", "model", "model,None", "model,None,None,None", "model,None,None", "model,None", "model", ""}},
};
#define CK_NLAYOUTS ((int)(sizeof CK_LAYOUTS / sizeof CK_LAYOUTS[0]))

static inline int ck_layout_devices(const ck_layout *l) {
  if (!l->mesh) return 1;
  ts_mesh *m = ts_mesh_from_text(l->mesh);
  int n = m ? (int)ts_mesh_num_devices(m) : 1;
  ts_mesh_free(m);
  return n;
}

static inline size_t ck_bytes(int i) {
  const ck_spec *s = &CK_TENSORS[i];
  return (size_t)ts_shape_numel(s->rank, s->shape) * ts_dtype_size(s->dt);
}

/* Deterministic contents of tensor i for version v (bytes from a hash). */
static inline void *ck_values(int i, uint64_t v) {
  size_t n = ck_bytes(i);
  uint8_t *p = malloc(n ? n : 1);
  uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) + v * 0xbf58476d1ce4e5b9ull;
  for (size_t k = 0; k < n; k++) {
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 29;
    p[k] = (uint8_t)(x >> 24);
  }
  /* f32/f64/bf16: keep values finite and ordinary (no NaN payload games) */
  if (CK_TENSORS[i].dt == TS_F32)
    for (size_t k = 0; k < n / 4; k++) ((float *)p)[k] = (float)((int)(((uint32_t *)p)[k] % 20001) - 10000) / 997.0f;
  if (CK_TENSORS[i].dt == TS_F64)
    for (size_t k = 0; k < n / 8; k++) ((double *)p)[k] = (double)(((uint64_t *)p)[k] % 1000003) / 7.0;
  if (CK_TENSORS[i].dt == TS_BF16)
    for (size_t k = 0; k < n / 2; k++) ((uint16_t *)p)[k] = (uint16_t)(0x3c00 + ((uint16_t *)p)[k] % 0x0800);
  return p;
}

/* The sharding of tensor i in layout l on mesh m (NULL = replicated). */
static inline ts_sharding *ck_sharding(const ck_layout *l, const ts_mesh *m, int i) {
  if (!m || !l->spec[i]) return NULL;
  ts_partition_spec ps;
  if (ts_partition_spec_parse(m, l->spec[i], &ps) < 0) return NULL;
  return ts_sharding_new(m, &ps, CK_TENSORS[i].rank);
}

/* Buffers of every tensor in layout l on client c, holding version v (or zeros if zero). */
static inline int ck_make_buffers(ts_client *c, const ck_layout *l, uint64_t v, bool zero, ts_buffer **out) {
  ts_mesh *m = l->mesh ? ts_mesh_from_text(l->mesh) : NULL;
  int rc = 0;
  for (int i = 0; i < CK_N; i++) {
    ts_sharding *s = ck_sharding(l, m, i);
    if (l->spec[i] && m && !s) {
      fprintf(stderr, "layout %s tensor %s: %s\n", l->label, CK_TENSORS[i].name, ts_last_error());
      rc = -1;
    }
    void *data = zero ? calloc(1, ck_bytes(i) + 1) : ck_values(i, v);
    out[i] = ts_buffer_from_host_sharded(c, CK_TENSORS[i].dt, CK_TENSORS[i].rank, CK_TENSORS[i].shape, data, s);
    if (!out[i]) rc = -1;
    free(data);
    ts_sharding_free(s);
  }
  ts_mesh_free(m);
  return rc;
}

static inline void ck_free_buffers(ts_buffer **b) {
  for (int i = 0; i < CK_N; i++) ts_buffer_free(b[i]), b[i] = NULL;
}

static inline void ck_entries(ts_buffer **b, ts_ckpt_entry *e) {
  for (int i = 0; i < CK_N; i++) e[i] = (ts_ckpt_entry){CK_TENSORS[i].name, b[i], CK_TENSORS[i].kind};
}

/* 0 if buffer i holds version v exactly. */
static inline int ck_check_buffer(ts_buffer *b, int i, uint64_t v) {
  size_t n = ck_bytes(i);
  void *want = ck_values(i, v), *got = malloc(n ? n : 1);
  int rc = ts_buffer_read(b, got, n) == 0 && memcmp(want, got, n) == 0 ? 0 : -1;
  free(want);
  free(got);
  return rc;
}

/* A meta with every field set. */
static inline ts_ckpt_meta ck_meta(int64_t step) {
  ts_ckpt_meta m = {.step = step, .epoch = 2, .epoch_step = 17, .has_optim = true,
                    .optim = {.kind = TS_OPTIM_ADAMW, .weight_decay = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8},
                    .has_schedule = true,
                    .schedule = {.kind = TS_LR_COSINE, .base_lr = 1e-3, .warmup_steps = 10, .total_steps = 1000,
                                 .min_lr = 1e-5},
                    .seed = 0xfedcba9876543210ull, .has_loader = true, .program_hash = 0x0123456789abcdefull};
  for (int k = 0; k < TS_LOADER_STATE_BYTES; k++) m.loader[k] = (uint8_t)(k * 7 + 3);
  snprintf(m.config, sizeof m.config, "model=mlp batch=128 \"quoted\" \\ tab\t");
  return m;
}

#endif
