/* test_spmd_gpt.c — tensor, vocab and sequence parallelism of a GPT come out
 * of sharding annotations alone. A small GPT training step (token + position
 * embeddings, pre-LN blocks with causal multi-head attention and a GELU MLP,
 * final layer norm, LM head tied to the token embedding, mean cross-entropy,
 * SGD) is built through the public API with its parameters marked the
 * Megatron way on mesh axis "model": c_attn column-parallel by heads, attn
 * c_proj row-parallel, mlp c_fc column-, c_proj row-parallel, wte split on the
 * vocabulary. With sequence parallelism the residual stream is also marked
 * split on the sequence dim over "model" and each layer norm's output whole.
 *
 * Pinned exactly (kind, mesh axes, bytes, how many): per block one all-reduce
 * of the (B, T, D) activations forward and one backward per attention and per
 * MLP; the vocab-parallel embedding one all-reduce forward and none backward;
 * the vocab-parallel cross-entropy three all-reduces of B*T values (max,
 * sum of exponentials, the label's logit) and nothing else — never the full
 * logits; the LM head's input gradient one all-reduce. Under sequence
 * parallelism every one of those activation all-reduces becomes a
 * reduce-scatter and an all-gather of the sequence blocks. Every partitioned
 * step (model=2, data=2,model=2, model=4, and fsdp=2,model=2 with the
 * matrices also split on "fsdp", with and without sequence parallelism)
 * matches the 1-device step in f64 (losses and updated parameters to
 * 1e-10), and no device's memory plan holds a buffer of the full (B*T, V)
 * logits. SHOW=1 prints the collectives (SHOW_SHARDINGS=1 also the
 * shardings of the FSDP runs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "tessel/tessel.h"

enum { B = 4, T = 8, D = 16, NH = 4, DH = D / NH, V = 64, L = 2, F = 4 * D };
enum { NP = 4 + 12 * L }; /* wte wpe ln_f.w ln_f.b + 12 per block */

typedef struct {
  ts_graph *g;
  ts_tensor x, y, lr, p[NP], loss;
  const char *name[NP];
  const char *spec[NP]; /* on axis "model" */
  ts_tensor resid[2 * L + 1]; /* residual stream: embeddings, after each add */
  ts_tensor ln_out[2 * L + 1];
  int n_resid, n_ln;
} gpt;

static const char *pname(int i) {
  static char names[NP][64];
  static const char *blk[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
  static const char *top[4] = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                               "transformer.ln_f.bias"};
  if (i < 4) return top[i];
  snprintf(names[i], sizeof names[i], "transformer.h.%d.%s", (i - 4) / 12, blk[(i - 4) % 12]);
  return names[i];
}

static ts_tensor param(gpt *m, int i, int rank, const int64_t *shape, const char *spec) {
  m->name[i] = pname(i);
  m->spec[i] = spec;
  return m->p[i] = ts_input(m->g, m->name[i], TS_F64, rank, shape);
}

static ts_tensor ln(gpt *m, ts_tensor x, ts_tensor w, ts_tensor b) {
  ts_tensor o = ts_layer_norm(m->g, x, w, b, 1e-5);
  m->ln_out[m->n_ln++] = o;
  return o;
}

/* x (B,T,Din) . W contracting x dim 2 with W dim wc. */
static ts_tensor dot2(ts_graph *g, ts_tensor x, ts_tensor w, int wc) {
  ts_dot_dims dd = {.n_contract = 1, .lhs_contract = {2}, .rhs_contract = {wc}};
  return ts_dot_general(g, x, w, &dd);
}

/* qkv (B,T,3,NH,DH) -> part k as (B,NH,T,DH). */
static ts_tensor head(ts_graph *g, ts_tensor qkv, int k) {
  int64_t st[5] = {0, 0, k, 0, 0}, lim[5] = {B, T, k + 1, NH, DH}, one[5] = {1, 1, 1, 1, 1};
  ts_tensor s = ts_reshape(g, ts_slice(g, qkv, st, lim, one), 4, (int64_t[]){B, T, NH, DH});
  return ts_transpose(g, s, (int[]){0, 2, 1, 3});
}

static ts_tensor attention(gpt *m, ts_tensor a, int l) {
  ts_graph *g = m->g;
  int base = 4 + 12 * l;
  ts_tensor w = param(m, base + 2, 3, (int64_t[]){3, D, D}, "None,model,None");
  ts_tensor bias = param(m, base + 3, 2, (int64_t[]){3, D}, "None,model");
  ts_tensor qkv = ts_add(g, dot2(g, a, w, 2), bias); /* (B,T,3,D) */
  qkv = ts_reshape(g, qkv, 5, (int64_t[]){B, T, 3, NH, DH});
  ts_tensor q = head(g, qkv, 0), k = head(g, qkv, 1), v = head(g, qkv, 2);
  ts_dot_dims sd = {.n_batch = 2, .lhs_batch = {0, 1}, .rhs_batch = {0, 1}, .n_contract = 1,
                    .lhs_contract = {3}, .rhs_contract = {3}};
  ts_tensor s = ts_mul(g, ts_dot_general(g, q, k, &sd), ts_scalar(g, TS_F64, 1.0 / sqrt((double)DH)));
  int64_t tt[2] = {T, T};
  ts_tensor causal = ts_compare(g, ts_iota(g, TS_I32, 2, tt, 0), ts_iota(g, TS_I32, 2, tt, 1), TS_CMP_GE);
  causal = ts_broadcast_in_dim(g, causal, 4, (int64_t[]){B, NH, T, T}, (int[]){2, 3});
  s = ts_select(g, causal, s, ts_scalar(g, TS_F64, -1e30));
  ts_tensor pr = ts_softmax(g, s, 3);
  ts_dot_dims od = {.n_batch = 2, .lhs_batch = {0, 1}, .rhs_batch = {0, 1}, .n_contract = 1,
                    .lhs_contract = {3}, .rhs_contract = {2}};
  ts_tensor y = ts_transpose(g, ts_dot_general(g, pr, v, &od), (int[]){0, 2, 1, 3}); /* (B,T,NH,DH) */
  y = ts_reshape(g, y, 3, (int64_t[]){B, T, D});
  ts_tensor wo = param(m, base + 4, 2, (int64_t[]){D, D}, "None,model");
  ts_tensor bo = param(m, base + 5, 1, (int64_t[]){D}, "None");
  return ts_add(g, dot2(g, y, wo, 1), bo);
}

static ts_tensor mlp(gpt *m, ts_tensor a, int l) {
  ts_graph *g = m->g;
  int base = 4 + 12 * l;
  ts_tensor w1 = param(m, base + 8, 2, (int64_t[]){F, D}, "model,None");
  ts_tensor b1 = param(m, base + 9, 1, (int64_t[]){F}, "model");
  ts_tensor w2 = param(m, base + 10, 2, (int64_t[]){D, F}, "None,model");
  ts_tensor b2 = param(m, base + 11, 1, (int64_t[]){D}, "None");
  ts_tensor h = ts_gelu(g, ts_add(g, dot2(g, a, w1, 1), b1));
  return ts_add(g, dot2(g, h, w2, 1), b2);
}

static void build(gpt *m) {
  memset(m, 0, sizeof *m);
  ts_graph *g = m->g = ts_graph_new();
  int64_t bt[2] = {B, T}, btd[3] = {B, T, D};
  m->x = ts_input(g, "x", TS_I32, 2, bt);
  m->y = ts_input(g, "y", TS_I32, 2, bt);
  m->lr = ts_input(g, "lr", TS_F64, 0, NULL);
  ts_tensor wte = param(m, 0, 2, (int64_t[]){V, D}, "model,None");
  ts_tensor wpe = param(m, 1, 2, (int64_t[]){T, D}, "None,None");
  ts_tensor h = ts_add(g, ts_gather(g, wte, m->x), ts_broadcast_in_dim(g, wpe, 3, btd, (int[]){1, 2}));
  m->resid[m->n_resid++] = h;
  for (int l = 0; l < L; l++) {
    int base = 4 + 12 * l;
    for (int k = 0; k < 2; k++) {
      ts_tensor w = param(m, base + 6 * k, 1, (int64_t[]){D}, "None");
      ts_tensor b = param(m, base + 6 * k + 1, 1, (int64_t[]){D}, "None");
      ts_tensor a = ln(m, h, w, b);
      h = ts_add(g, h, k == 0 ? attention(m, a, l) : mlp(m, a, l));
      m->resid[m->n_resid++] = h;
    }
  }
  ts_tensor hf = ln(m, h, param(m, 2, 1, (int64_t[]){D}, "None"), param(m, 3, 1, (int64_t[]){D}, "None"));
  ts_tensor logits = ts_reshape(g, dot2(g, hf, wte, 1), 2, (int64_t[]){B * T, V});
  m->loss = ts_cross_entropy(g, logits, ts_reshape(g, m->y, 1, (int64_t[]){B * T}));
  ts_tensor grads[NP];
  CHECK_OK(ts_grad(g, m->loss, NP, m->p, grads));
  ts_graph_add_output(g, m->loss);
  for (int i = 0; i < NP; i++) {
    ts_tensor nw = ts_sub(g, m->p[i], ts_mul(g, grads[i], m->lr));
    CHECK_OK(ts_graph_alias_output(g, ts_graph_add_output(g, nw), m->p[i]));
  }
}

static void mark(ts_graph *g, const ts_mesh *mesh, ts_tensor t, const char *spec) {
  ts_partition_spec ps;
  CHECK(ts_partition_spec_parse(mesh, spec, &ps) == 0, "%s: %s", spec, ts_last_error());
  ts_sharding *s = ts_sharding_new(mesh, &ps, ts_tensor_rank(g, t));
  CHECK(s != NULL, "%s", ts_last_error());
  ts_clear_sharding(g, t);
  CHECK_OK(ts_mark_sharding(g, t, s));
  ts_sharding_free(s);
}

/* The annotations: parameters by role, the batch on "data", and with sp the
 * residual stream split on T over "model" and each layer norm's output
 * whole on "model". */
static void mark_gpt(gpt *m, const ts_mesh *mesh, bool sp) {
  bool fsdp = ts_mesh_axis_index(mesh, "fsdp") >= 0;
  ts_clear_error();
  const char *b = ts_mesh_axis_index(mesh, "data") >= 0 ? "data" : fsdp ? "fsdp" : "None";
  char spec[64];
  snprintf(spec, sizeof spec, "%s,None", b);
  mark(m->g, mesh, m->x, spec);
  mark(m->g, mesh, m->y, spec);
  for (int i = 0; i < NP; i++) {
    /* FSDP (ZeRO-3): a matrix's first dim "model" leaves alone, split on "fsdp" */
    const char *ps = m->spec[i];
    char fs[64];
    if (fsdp && ts_tensor_rank(m->g, m->p[i]) >= 2) {
      int used = !strncmp(ps, "model", 5) ? 0 : strstr(ps, "model") ? (strncmp(ps, "None,model", 10) ? 2 : 1) : -1;
      int d = used == 0 ? 1 : 0;
      if (ts_tensor_shape(m->g, m->p[i])[d] % 2) d = 2; /* c_attn (3, D, D) */
      fs[0] = 0;
      for (int k = 0; k < ts_tensor_rank(m->g, m->p[i]); k++)
        snprintf(fs + strlen(fs), sizeof fs - strlen(fs), "%s%s", k ? "," : "", k == d ? "fsdp" : k == used ? "model" : "None");
      ps = fs;
    }
    mark(m->g, mesh, m->p[i], ps);
  }
  snprintf(spec, sizeof spec, "%s,model,None", b);
  for (int i = 0; sp && i < m->n_resid; i++) mark(m->g, mesh, m->resid[i], spec);
  snprintf(spec, sizeof spec, "%s,None,None", b);
  for (int i = 0; sp && i < m->n_ln; i++) mark(m->g, mesh, m->ln_out[i], spec);
}

static void clear_marks(gpt *m) {
  for (int i = 0; i < ts_graph_num_nodes(m->g); i++) ts_clear_sharding(m->g, i);
}

typedef struct {
  double loss;
  double *vals[NP];
} result;

static uint64_t rng = 12345;
static double urand(void) {
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng >> 11) * 0x1p-53;
}

static double *init_vals[NP];
static int32_t tok[B * T], lab[B * T];

static void make_data(const gpt *m) {
  for (int i = 0; i < NP; i++) {
    int64_t n = ts_tensor_numel(m->g, m->p[i]);
    init_vals[i] = malloc((size_t)n * sizeof(double));
    bool is_ln_w = strstr(m->name[i], "ln_") && strstr(m->name[i], "weight");
    for (int64_t k = 0; k < n; k++) init_vals[i][k] = is_ln_w ? 1.0 + 0.1 * (urand() - 0.5) : 0.2 * (urand() - 0.5);
  }
  for (int i = 0; i < B * T; i++) {
    tok[i] = (int32_t)(urand() * V);
    lab[i] = (int32_t)(urand() * V);
  }
}

static int run(ts_client *c, ts_executable *e, const gpt *m, result *r) {
  int n_in = ts_graph_num_inputs(m->g);
  ts_buffer *in[NP + 3] = {0}, *out[NP + 1] = {0};
  double lr = 0.5;
  int rc = 0;
  for (int i = 0; i < n_in; i++) {
    ts_tensor t = ts_graph_input(m->g, i);
    const void *src = t == m->x ? (const void *)tok : t == m->y ? (const void *)lab : t == m->lr ? (const void *)&lr : NULL;
    for (int k = 0; k < NP && !src; k++)
      if (m->p[k] == t) src = init_vals[k];
    in[i] = ts_buffer_from_host(c, ts_tensor_dtype(m->g, t), ts_tensor_rank(m->g, t), ts_tensor_shape(m->g, t), src);
    if (!in[i]) rc = -1;
  }
  if (rc == 0) rc = ts_execute(e, in, out);
  if (rc == 0) rc = ts_buffer_read(out[0], &r->loss, sizeof r->loss);
  for (int k = 0; k < NP && rc == 0; k++) {
    int64_t n = ts_tensor_numel(m->g, m->p[k]);
    r->vals[k] = malloc((size_t)n * sizeof(double));
    for (int i = 0; i < n_in; i++)
      if (ts_graph_input(m->g, i) == m->p[k]) rc = ts_buffer_read(in[i], r->vals[k], (size_t)n * sizeof(double));
  }
  if (out[0]) ts_buffer_free(out[0]);
  for (int i = 0; i < n_in; i++) ts_buffer_free(in[i]);
  (void)c;
  return rc;
}

static void free_result(result *r) {
  for (int k = 0; k < NP; k++) free(r->vals[k]);
}

/* The expected collectives, as (kind, axes, bytes) -> count. */
typedef struct {
  ts_collective_kind kind;
  uint32_t axes;
  size_t bytes; /* 0: any; then their sum is `total` */
  int count;
  size_t total;
} want;

static int cmp_info(const void *a, const void *b) {
  const ts_collective_info *x = a, *y = b;
  if (x->kind != y->kind) return (int)x->kind - (int)y->kind;
  if (x->mesh_axes != y->mesh_axes) return x->mesh_axes < y->mesh_axes ? -1 : 1;
  return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

/* Checks e's collectives are exactly `w` (n entries; count 0 entries are
 * ignored); prints them on failure or with SHOW set. */
static void pin(ts_executable *e, const char *what, const want *w, int n) {
  int nc = ts_executable_num_collectives(e);
  ts_collective_info *ci = calloc((size_t)nc + 1, sizeof *ci);
  for (int i = 0; i < nc; i++) ts_executable_collective(e, i, &ci[i]);
  qsort(ci, (size_t)nc, sizeof *ci, cmp_info);
  int total = 0, bad = 0;
  for (int k = 0; k < n; k++) {
    int got = 0;
    size_t sum = 0;
    for (int i = 0; i < nc; i++)
      if (ci[i].kind == w[k].kind && ci[i].mesh_axes == w[k].axes && (w[k].bytes == 0 || ci[i].bytes == w[k].bytes)) {
        got++;
        sum += ci[i].bytes;
      }
    if (w[k].bytes == 0) { /* any sizes: w[k].total bytes in all */
      CHECK(sum == w[k].total, "%s: %s over axes 0x%x move %zu bytes in all, want %zu", what,
            ts_collective_kind_name(w[k].kind), w[k].axes, sum, w[k].total);
      bad += sum != w[k].total;
    }
    CHECK(got == w[k].count, "%s: %d %s over axes 0x%x of %zu bytes, want %d", what, got,
          ts_collective_kind_name(w[k].kind), w[k].axes, w[k].bytes, w[k].count);
    bad += got != w[k].count;
    total += w[k].count;
  }
  CHECK(nc == total, "%s: %d collectives, want %d", what, nc, total);
  if (bad || nc != total || getenv("SHOW")) {
    char *s = ts_executable_collectives_to_string(e);
    fprintf(stderr, "--- %s\n%s", what, s);
    free(s);
  }
  free(ci);
}

/* Whether e's optimized programs (every device's, with their memory plans)
 * have a value of the full logits' shape, (B*T, V) or (B, T, V) (the text
 * shows one device's program: every device's has the same shapes). */
static bool has_full_logits(ts_executable *e) {
  char *s = ts_executable_to_string(e);
  char full[64], full3[64];
  snprintf(full, sizeof full, "[%d,%d]", B * T, V);
  snprintf(full3, sizeof full3, "[%d,%d,%d]", B, T, V);
  bool has = !s || strstr(s, full) != NULL || strstr(s, full3) != NULL;
  free(s);
  return has;
}

static void check_no_full_logits(ts_executable *e, const char *what) {
  CHECK(!has_full_logits(e), "%s: a device program has a value of the full logits' shape", what);
}

static void compare(const result *a, const result *b, const gpt *m, const char *what) {
  double worst = fabs(a->loss - b->loss) / fabs(a->loss);
  for (int k = 0; k < NP; k++) {
    int64_t n = ts_tensor_numel(m->g, m->p[k]);
    double mx = 0, d = 0;
    for (int64_t i = 0; i < n; i++) {
      mx = fmax(mx, fabs(a->vals[k][i]));
      d = fmax(d, fabs(a->vals[k][i] - b->vals[k][i]));
    }
    worst = fmax(worst, mx > 0 ? d / mx : d);
  }
  CHECK(worst <= 1e-10, "%s: differs from 1 device by %.3g (loss %.12g vs %.12g)", what, worst, b->loss, a->loss);
  printf("%-26s loss %.12g, worst relative difference from 1 device %.3g\n", what, b->loss, worst);
}

int main(void) {
  ts_test_init("spmd_gpt", 1);
  gpt m;
  build(&m);
  make_data(&m);
  ts_client *c1 = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = 1});
  ts_executable *e1 = ts_compile(c1, m.g, NULL);
  CHECK(e1 != NULL, "%s", ts_last_error());
  CHECK(e1 && has_full_logits(e1), "1 device: the program text does not show the logits (the check below would be vacuous)");
  result ref = {0};
  CHECK_OK(run(c1, e1, &m, &ref));
  ts_executable_free(e1);

  const size_t act = (size_t)B * T * D * 8, rows = (size_t)B * T * 8;
  struct {
    const char *mesh;
    bool sp;
  } cases[] = {{"model=2", false}, {"model=2", true}, {"data=2,model=2", false}, {"data=2,model=2", true},
               {"model=4", false}, {"model=4", true}, {"fsdp=2,model=2", false}, {"fsdp=2,model=2", true}};
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    ts_mesh *mesh = ts_mesh_from_text(cases[ci].mesh);
    int nd = (int)ts_mesh_num_devices(mesh);
    int model_axis = ts_mesh_axis_index(mesh, "model"), data_axis = ts_mesh_axis_index(mesh, "data");
    int64_t mp = ts_mesh_axis_size(mesh, model_axis), dp = data_axis >= 0 ? ts_mesh_axis_size(mesh, data_axis) : 1;
    uint32_t MA = 1u << model_axis, DA = data_axis >= 0 ? 1u << data_axis : 0;
    char what[64];
    snprintf(what, sizeof what, "%s%s", cases[ci].mesh, cases[ci].sp ? " sequence-parallel" : "");
    mark_gpt(&m, mesh, cases[ci].sp);
    ts_client *c = ts_client_new(&(ts_client_options){.num_threads = 1, .num_devices = nd});
    ts_executable *e = ts_compile(c, m.g, &(ts_compile_options){.mesh = mesh});
    CHECK(e != NULL, "%s: %s", what, ts_last_error());
    if (e) {
      size_t a = act / (size_t)dp, r = rows / (size_t)dp;
      /* over "data": each parameter's gradient block once (wte's too: the
       * head's and the lookup's partial sums are added before it), and the
       * loss */
      size_t grad_bytes = 8;
      for (int i = 0; i < NP; i++)
        grad_bytes += (size_t)ts_tensor_numel(m.g, m.p[i]) * 8 / (strstr(m.spec[i], "model") ? (size_t)mp : 1);
      want dw = {TS_COLLECTIVE_ALL_REDUCE, DA, 0, DA ? NP + 1 : 0, DA ? grad_bytes : 0};
      if (strstr(cases[ci].mesh, "fsdp")) {
        /* FSDP gathers weights and scatters gradients on top: numbers only */
        if (getenv("SHOW")) {
          char *t = ts_executable_collectives_to_string(e);
          fprintf(stderr, "--- %s\n%s", what, t);
          free(t);
          if (getenv("SHOW_SHARDINGS")) {
            t = ts_executable_shardings_to_string(e);
            fprintf(stderr, "%s", t);
            free(t);
          }
        }
      } else if (!cases[ci].sp) {
        want w[] = {
            dw,
            /* per block: attention and MLP, forward and backward; the LM head's
             * input gradient; the embedding's lookup */
            {TS_COLLECTIVE_ALL_REDUCE, MA, a, 4 * L + 2, 0},
            /* the cross-entropy: max, sum of exponentials, the label's logit */
            {TS_COLLECTIVE_ALL_REDUCE, MA, r, 3, 0},
        };
        pin(e, what, w, 3);
      } else {
        /* the norms' and the replicated biases' gradients are sums over the
         * sequence blocks too (over data+model), and the position
         * embedding's gradient is gathered from them */
        size_t nb = 6 * L + 2, dbytes = (size_t)D * 8;
        want ds = {TS_COLLECTIVE_ALL_REDUCE, DA, 0, DA ? NP + 1 - (int)nb : 0,
                   DA ? grad_bytes - nb * dbytes - (size_t)T * D * 8 / (size_t)mp : 0};
        want w[] = {
            ds,
            /* per block: the normed sequence gathered before attention and
             * before the MLP, forward; their output gradients gathered
             * backward; the final norm before the head; the embedding's
             * gradient */
            {TS_COLLECTIVE_ALL_GATHER, MA, a, 4 * L + 2, 0},
            /* attention and MLP outputs forward and their input gradients
             * backward, scattered to sequence blocks; the embedding lookup;
             * the head's input gradient */
            {TS_COLLECTIVE_REDUCE_SCATTER, MA, a, 4 * L + 2, 0},
            {TS_COLLECTIVE_ALL_REDUCE, MA, r, 3, 0},
            {TS_COLLECTIVE_ALL_REDUCE, MA | DA, dbytes, (int)nb, 0},
            {TS_COLLECTIVE_ALL_GATHER, MA, (size_t)T * D * 8, 1, 0},
        };
        pin(e, what, w, 6);
      }
      check_no_full_logits(e, what);
      result got = {0};
      CHECK(run(c, e, &m, &got) == 0, "%s: %s", what, ts_last_error());
      compare(&ref, &got, &m, what);
      free_result(&got);
      ts_executable_free(e);
    }
    ts_client_free(c);
    ts_mesh_free(mesh);
    clear_marks(&m);
  }
  free_result(&ref);
  for (int i = 0; i < NP; i++) free(init_vals[i]);
  ts_client_free(c1);
  ts_graph_free(m.g);
  return ts_test_finish();
}
