/* gpt.c — a nanoGPT-style decoder (tessel/nn.h ts_model_gpt): token +
 * learned position embeddings, pre-LN blocks of causal multi-head
 * self-attention and a GELU MLP (4x), a final layer norm and an LM head tied
 * to the token embedding. Parameter names, shapes ((out, in) Linear weights)
 * and initialization are nanoGPT's (model.py, bias=True), so weights and runs
 * compare with PyTorch one to one. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tessel/nn.h"
#include "tessel/spmd.h"
#include "util/error.h"

#define GPT_LN_EPS 1e-5

/* Index of mesh axis `name`, or -1 (no mesh, or no such axis). */
static int gpt_axis(const ts_mesh *m, const char *name) {
  for (int a = 0; m && a < ts_mesh_rank(m); a++) {
    const char *n = ts_mesh_axis_name(m, a);
    if (n && strcmp(n, name) == 0) return a;
  }
  return -1;
}

int ts_gpt_config_check(const ts_gpt_config *c) {
  if (!c) return set_error("gpt: NULL config");
  if (c->layers < 1) return set_error("gpt: layers = %lld (need >= 1)", (long long)c->layers);
  if (c->d_model < 1) return set_error("gpt: d_model = %lld (need >= 1)", (long long)c->d_model);
  if (c->heads < 1) return set_error("gpt: heads = %lld (need >= 1)", (long long)c->heads);
  if (c->d_model % c->heads)
    return set_error("gpt: heads = %lld does not divide d_model = %lld", (long long)c->heads,
                     (long long)c->d_model);
  if (c->seq < 1) return set_error("gpt: seq = %lld (need >= 1)", (long long)c->seq);
  if (c->vocab < 1) return set_error("gpt: vocab = %lld (need >= 1)", (long long)c->vocab);
  if (!(c->dropout >= 0 && c->dropout < 1)) return set_error("gpt: dropout = %g is outside [0, 1)", c->dropout);
  int model = gpt_axis(c->mesh, "model");
  int64_t k = model >= 0 ? ts_mesh_axis_size(c->mesh, model) : 1;
  if (k > 1 && c->heads % k)
    return set_error("gpt: heads = %lld do not split over mesh axis 'model' of size %lld (tensor parallelism "
                     "gives each device whole heads: use a model axis that divides the heads)",
                     (long long)c->heads, (long long)k);
  if (k > 1 && c->vocab % k)
    return set_error("gpt: vocab = %lld does not split over mesh axis 'model' of size %lld (the embedding and the "
                     "logits are split on the vocabulary: use a vocab that the model axis divides)",
                     (long long)c->vocab, (long long)k);
  if (k > 1 && c->sequence_parallel && c->seq % k)
    return set_error("gpt: seq = %lld does not split over mesh axis 'model' of size %lld (sequence parallelism "
                     "splits the sequence)", (long long)c->seq, (long long)k);
  if (c->sequence_parallel && k <= 1)
    return set_error("gpt: sequence parallelism needs a mesh with an axis 'model' of size > 1");
  return 0;
}

/* Marks x (B, T, C) split on the batch over "data" and "fsdp" and, with
 * seq_split, on the sequence over "model" (sequence parallelism). */
static ts_tensor gpt_mark_act(const ts_gpt_config *c, ts_graph *g, ts_tensor x, bool seq_split) {
  if (x == TS_NONE || !c->sequence_parallel) return x;
  ts_partition_spec s;
  int data = gpt_axis(c->mesh, "data"), fsdp = gpt_axis(c->mesh, "fsdp"), model = gpt_axis(c->mesh, "model");
  if (ts_partition_spec_init(&s, 3) < 0 || (data >= 0 && ts_partition_spec_add_axis(&s, 0, data) < 0) ||
      (fsdp >= 0 && ts_partition_spec_add_axis(&s, 0, fsdp) < 0) ||
      (seq_split && ts_partition_spec_add_axis(&s, 1, model) < 0))
    return TS_NONE;
  ts_sharding *sh = ts_sharding_new(c->mesh, &s, 3);
  int rc = sh ? ts_mark_sharding(g, x, sh) : -1;
  ts_sharding_free(sh);
  return rc < 0 ? TS_NONE : x;
}

bool ts_gpt_param_decays(int rank) { return rank >= 2; }

typedef struct {
  ts_nn *m;
  const ts_gpt_config *c;
  ts_dtype dt;
} gpt;

static const char *gpt_name(char *buf, size_t n, const char *prefix, const char *what) {
  snprintf(buf, n, "%s.%s", prefix, what);
  return buf;
}

static ts_tensor gpt_param(gpt *G, const char *name, int rank, const int64_t *shape, ts_init init) {
  return ts_params_use(G->m->p, G->m->g, name, G->dt, rank, shape, init, true);
}

/* nanoGPT's Linear: weight (out, in) ~ N(0, std), bias (out) zeros; x (..., in) -> (..., out). */
static ts_tensor gpt_linear(gpt *G, const char *prefix, ts_tensor x, int64_t in, int64_t out, double std) {
  if (x == TS_NONE) return TS_NONE;
  char pn[128];
  int64_t ws[2] = {out, in};
  ts_tensor w = gpt_param(G, gpt_name(pn, sizeof pn, prefix, "weight"), 2, ws, (ts_init){TS_INIT_NORMAL, std, 0});
  ts_tensor b = gpt_param(G, gpt_name(pn, sizeof pn, prefix, "bias"), 1, &out, (ts_init){TS_INIT_ZEROS, 0, 0});
  if (w == TS_NONE || b == TS_NONE) return TS_NONE;
  int r = ts_tensor_rank(G->m->g, x);
  ts_dot_dims dd = {.n_contract = 1, .lhs_contract = {r - 1}, .rhs_contract = {1}};
  return ts_add(G->m->g, ts_dot_general(G->m->g, x, w, &dd), b);
}

static ts_tensor gpt_ln(gpt *G, const char *prefix, ts_tensor x) {
  if (x == TS_NONE) return TS_NONE;
  char pn[128];
  int64_t d = G->c->d_model;
  ts_tensor w = gpt_param(G, gpt_name(pn, sizeof pn, prefix, "weight"), 1, &d, (ts_init){TS_INIT_ONES, 0, 0});
  ts_tensor b = gpt_param(G, gpt_name(pn, sizeof pn, prefix, "bias"), 1, &d, (ts_init){TS_INIT_ZEROS, 0, 0});
  if (w == TS_NONE || b == TS_NONE) return TS_NONE;
  return gpt_mark_act(G->c, G->m->g, ts_layer_norm(G->m->g, x, w, b, GPT_LN_EPS), false);
}

static ts_tensor gpt_dropout(gpt *G, ts_tensor x) {
  if (x == TS_NONE || G->c->dropout == 0) return x;
  return ts_nn_dropout(G->m, x, G->c->dropout);
}

/* x (B, T, C) -> (B, T, C): c_attn to q, k, v (B, H, T, Dh), causal attention,
 * heads merged back, c_proj. */
static ts_tensor gpt_attn(gpt *G, const char *prefix, ts_tensor x, int64_t B, int64_t T, double proj_std) {
  ts_graph *g = G->m->g;
  int64_t C = G->c->d_model, H = G->c->heads, Dh = C / H;
  char pn[128];
  /* c_attn's weight is nanoGPT's (3C, C) held as (3, C, C) (the same bytes),
   * bias (3, C): split on dim 1 over a "model" mesh axis, each device holds
   * whole heads of q, k and v (a (3C, C) split would cut q | k instead) */
  int64_t ws[3] = {3, C, C}, bs[2] = {3, C};
  ts_tensor w = gpt_param(G, gpt_name(pn, sizeof pn, prefix, "c_attn.weight"), 3, ws, (ts_init){TS_INIT_NORMAL, 0.02, 0});
  ts_tensor b = gpt_param(G, gpt_name(pn, sizeof pn, prefix, "c_attn.bias"), 2, bs, (ts_init){TS_INIT_ZEROS, 0, 0});
  if (x == TS_NONE || w == TS_NONE || b == TS_NONE) return TS_NONE;
  ts_dot_dims cd = {.n_contract = 1, .lhs_contract = {2}, .rhs_contract = {2}};
  ts_tensor qkv = ts_add(g, ts_dot_general(g, x, w, &cd), b); // (B, T, 3, C)
  int64_t s5[5] = {B, T, 3, H, Dh};
  qkv = ts_reshape(g, qkv, 5, s5);
  /* q, k, v read in place from the packed projection (B, T, 3, H, Dh); the
   * heads come back as (B, T, H, Dh), c_proj's input with no transpose */
  ts_tensor y = ts_causal_attention_qkv(g, qkv, 1.0 / sqrt((double)Dh)); // (B, T, H, Dh)
  int64_t s3[3] = {B, T, C};
  y = ts_reshape(g, y, 3, s3);
  y = gpt_linear(G, gpt_name(pn, sizeof pn, prefix, "c_proj"), y, C, C, proj_std);
  return gpt_dropout(G, y);
}

static ts_tensor gpt_mlp(gpt *G, const char *prefix, ts_tensor x, double proj_std) {
  int64_t C = G->c->d_model;
  char pn[128];
  ts_tensor h = gpt_linear(G, gpt_name(pn, sizeof pn, prefix, "c_fc"), x, C, 4 * C, 0.02);
  h = h == TS_NONE ? TS_NONE : ts_gelu(G->m->g, h);
  h = gpt_linear(G, gpt_name(pn, sizeof pn, prefix, "c_proj"), h, 4 * C, C, proj_std);
  return gpt_dropout(G, h);
}

ts_tensor ts_model_gpt(ts_nn *m, const ts_gpt_config *c, ts_tensor x) {
  if (!m || !m->g || !m->p) {
    set_error("gpt: the ts_nn context has no graph or parameter set (call ts_nn_init)");
    return TS_NONE;
  }
  if (ts_gpt_config_check(c) < 0 || x == TS_NONE) return TS_NONE;
  ts_graph *g = m->g;
  ts_dtype it = ts_tensor_dtype(g, x);
  if (ts_tensor_rank(g, x) != 2 || (it != TS_I32 && it != TS_I64)) {
    set_error("gpt: expects tokens x (B, T) of i32 or i64, got rank %d %s", ts_tensor_rank(g, x), ts_dtype_name(it));
    return TS_NONE;
  }
  int64_t B = ts_tensor_shape(g, x)[0], T = ts_tensor_shape(g, x)[1], C = c->d_model;
  if (T > c->seq) {
    set_error("gpt: sequence length %lld is longer than the position table (seq = %lld)", (long long)T,
              (long long)c->seq);
    return TS_NONE;
  }
  gpt G = {m, c, TS_F32};
  int64_t wte_s[2] = {c->vocab, C}, wpe_s[2] = {c->seq, C};
  ts_init emb = {TS_INIT_NORMAL, 0.02, 0};
  ts_tensor wte = gpt_param(&G, "transformer.wte.weight", 2, wte_s, emb);
  ts_tensor wpe = gpt_param(&G, "transformer.wpe.weight", 2, wpe_s, emb);
  if (wte == TS_NONE || wpe == TS_NONE) return TS_NONE;
  int64_t lo[2] = {0, 0}, hi[2] = {T, C};
  ts_tensor pos = T == c->seq ? wpe : ts_slice(g, wpe, lo, hi, NULL); // (T, C)
  ts_tensor h = ts_add(g, ts_gather(g, wte, x), pos);                 // (B, T, C)
  h = gpt_mark_act(c, g, gpt_dropout(&G, h), true);
  double proj_std = 0.02 / sqrt(2.0 * (double)c->layers);
  for (int64_t l = 0; l < c->layers && h != TS_NONE; l++) {
    char p[64], q[96];
    snprintf(p, sizeof p, "transformer.h.%lld", (long long)l);
    ts_tensor a = gpt_attn(&G, gpt_name(q, sizeof q, p, "attn"), gpt_ln(&G, gpt_name(q, sizeof q, p, "ln_1"), h), B, T,
                           proj_std);
    h = a == TS_NONE ? TS_NONE : gpt_mark_act(c, g, ts_add(g, h, a), true);
    ts_tensor f = gpt_mlp(&G, gpt_name(q, sizeof q, p, "mlp"), gpt_ln(&G, gpt_name(q, sizeof q, p, "ln_2"), h), proj_std);
    h = f == TS_NONE ? TS_NONE : gpt_mark_act(c, g, ts_add(g, h, f), true);
  }
  h = gpt_ln(&G, "transformer.ln_f", h);
  if (h == TS_NONE) return TS_NONE;
  /* the LM head tied to wte: logits = h wte^T (B, T, V) */
  ts_dot_dims dd = {.n_contract = 1, .lhs_contract = {2}, .rhs_contract = {1}};
  return ts_dot_general(g, h, wte, &dd);
}

ts_tensor ts_gpt_loss(ts_graph *g, ts_tensor logits, ts_tensor y) {
  if (logits == TS_NONE || y == TS_NONE) return TS_NONE;
  if (ts_tensor_rank(g, logits) != 3 || ts_tensor_rank(g, y) != 2) {
    set_error("gpt_loss: expects logits (B, T, V) and targets (B, T), got ranks %d and %d", ts_tensor_rank(g, logits),
              ts_tensor_rank(g, y));
    return TS_NONE;
  }
  const int64_t *ls = ts_tensor_shape(g, logits);
  int64_t s2[2] = {ls[0] * ls[1], ls[2]}, n = ls[0] * ls[1];
  ts_tensor l2 = ts_reshape(g, logits, 2, s2);
  return ts_cross_entropy(g, l2, ts_reshape(g, y, 1, &n));
}
