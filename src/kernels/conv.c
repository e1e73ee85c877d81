/* conv.c — 2-D convolution: TS_OP_CONV (forward), TS_OP_CONV_BWD_DATA (dx from
 * dy and w, the adjoint of forward) and TS_OP_CONV_BWD_FILTER (dw from x, dy).
 *   x (N, C, H, W), w (O, C/groups, KH, KW), y (N, O, OH, OW)
 *   layout NHWC: x (N, H, W, C), y (N, OH, OW, O), w as above
 * f32 and bf16 run on oneDNN: the convolution picks its own (blocked) layouts
 * (format_tag any) and cached reorders move data from/to NCHW / OIHW (bf16
 * activations to and from nChw16c by blk16.c's transposition: is_blk16) — except
 * 1x1 convolutions without padding (on planes above 14x14; their filter
 * gradients on any; bf16 ones with 64+ input channels), which run on NCHW
 * itself (plain_fits).
 * NHWC activations go to oneDNN as they are (its nxc kernels): only the
 * weights are reordered (to the layout the primitive picks) and back; f32
 * forwards with few input channels or a narrow output skip brgconv for the
 * next kernel oneDNN lists (nhwc_jit_fits). The
 * primitives, reorders and blocked buffers are created once per node and kept
 * in its ts_kstate. A filter gradient of bf16 x and dy may be f32 (autocast's:
 * oneDNN writes its f32 accumulation as is, wide_dw). f64 and other types use
 * direct loops in double. A 1x1 NHWC f32 filter gradient over few output
 * positions runs as one GEMM instead (conv_gemm.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <oneapi/dnnl/dnnl.h> /* convolution, reorder primitives */

#include "kernels/kernels_internal.h"

typedef struct {
  int64_t N, C, H, W, O, OH, OW, KH, KW, G;
  int64_t s[2], pl[2], ph[2], d[2];
  bool nhwc; /* activations (N, H, W, C) */
} geom_t;

static void geom_of(const ts_graph *g, const ts_node *n, geom_t *q) {
  const ts_node *x, *w, *y;
  if (n->op == TS_OP_CONV) x = tk_operand(g, n, 0), w = tk_operand(g, n, 1), y = n;
  else if (n->op == TS_OP_CONV_BWD_DATA) y = tk_operand(g, n, 0), w = tk_operand(g, n, 1), x = n;
  else x = tk_operand(g, n, 0), y = tk_operand(g, n, 1), w = n;
  const ts_conv_params *p = &n->attr.conv;
  int cd = ir_chan_dim(p->layout), sd = ir_space_dim(p->layout);
  q->nhwc = p->layout == TS_LAYOUT_NHWC;
  q->N = x->shape[0], q->C = x->shape[cd], q->H = x->shape[sd], q->W = x->shape[sd + 1];
  q->O = w->shape[0], q->KH = w->shape[2], q->KW = w->shape[3];
  q->OH = y->shape[sd], q->OW = y->shape[sd + 1];
  q->G = p->groups > 0 ? p->groups : 1;
  for (int i = 0; i < 2; i++) {
    q->s[i] = p->stride[i] > 0 ? p->stride[i] : 1;
    q->d[i] = p->dilation[i] > 0 ? p->dilation[i] : 1;
    q->pl[i] = p->pad_lo[i], q->ph[i] = p->pad_hi[i];
  }
}

/* ---- direct loops in double (any dtype) ---- */
/* The offset of activation element (n, c, h, w) of a (N, C, H, W) tensor. */
static inline int64_t act_at(bool nhwc, int64_t n, int64_t c, int64_t h, int64_t w, int64_t C, int64_t H, int64_t W) {
  return nhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

static void conv_loops(ts_op op, const geom_t *q, const double *x, const double *w,
                       const double *y, double *out, int nt) {
  int64_t Cg = q->C / q->G, Og = q->O / q->G;
  int64_t outer = op == TS_OP_CONV_BWD_FILTER ? q->O : q->N;
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < outer; t++) {
    int64_t n0 = op == TS_OP_CONV_BWD_FILTER ? 0 : t, n1 = op == TS_OP_CONV_BWD_FILTER ? q->N : t + 1;
    int64_t o0 = op == TS_OP_CONV_BWD_FILTER ? t : 0, o1 = op == TS_OP_CONV_BWD_FILTER ? t + 1 : q->O;
    for (int64_t n = n0; n < n1; n++)
      for (int64_t o = o0; o < o1; o++) {
        int64_t gi = o / Og;
        for (int64_t oh = 0; oh < q->OH; oh++)
          for (int64_t ow = 0; ow < q->OW; ow++) {
            int64_t yi = act_at(q->nhwc, n, o, oh, ow, q->O, q->OH, q->OW);
            double acc = 0, dy = op == TS_OP_CONV ? 0 : y[yi];
            for (int64_t c = 0; c < Cg; c++)
              for (int64_t kh = 0; kh < q->KH; kh++) {
                int64_t ih = oh * q->s[0] - q->pl[0] + kh * q->d[0];
                if (ih < 0 || ih >= q->H) continue;
                for (int64_t kw = 0; kw < q->KW; kw++) {
                  int64_t iw = ow * q->s[1] - q->pl[1] + kw * q->d[1];
                  if (iw < 0 || iw >= q->W) continue;
                  int64_t xi = act_at(q->nhwc, n, gi * Cg + c, ih, iw, q->C, q->H, q->W);
                  int64_t wi = ((o * Cg + c) * q->KH + kh) * q->KW + kw;
                  if (op == TS_OP_CONV) acc += x[xi] * w[wi];
                  else if (op == TS_OP_CONV_BWD_DATA) out[xi] += dy * w[wi];
                  else out[wi] += dy * x[xi];
                }
              }
            if (op == TS_OP_CONV) out[yi] = acc;
          }
      }
  }
}

static double *to_f64(ts_dtype dt, const void *p, int64_t n) {
  double *d = malloc((size_t)(n ? n : 1) * sizeof *d);
  if (d)
    for (int64_t i = 0; i < n; i++) d[i] = tk_load_f64(dt, p, i);
  return d;
}

static int conv_generic(const ts_graph *g, const ts_node *n, const geom_t *q, tk_in in, void *out, int nt) {
  const ts_node *a = tk_operand(g, n, 0), *b = tk_operand(g, n, 1);
  int64_t on = tk_numel(n);
  double *da = to_f64(a->dtype, in[0], tk_numel(a)), *db = to_f64(b->dtype, in[1], tk_numel(b));
  double *o = calloc((size_t)(on ? on : 1), sizeof *o);
  int rc = 0;
  if (!da || !db || !o) {
    rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", ir_op_name(n->op));
  } else {
    if (n->op == TS_OP_CONV) conv_loops(n->op, q, da, db, NULL, o, nt);
    else if (n->op == TS_OP_CONV_BWD_DATA) conv_loops(n->op, q, NULL, db, da, o, nt);
    else conv_loops(n->op, q, da, NULL, db, o, nt);
    if (n->dtype == TS_F64) memcpy(out, o, (size_t)on * sizeof *o);
    else
      for (int64_t i = 0; i < on; i++) tk_store_f64(n->dtype, out, i, o[i]);
  }
  free(da), free(db), free(o);
  return rc;
}

/* ---- oneDNN ---- */
typedef struct {
  dnnl_memory_t user;    /* plain NCHW / OIHW view of the caller's buffer */
  dnnl_memory_t prim;    /* the primitive's layout (== user when no reorder) */
  dnnl_primitive_t reorder;
  bool is_output;
  bool in_scratch;       /* prim lives in the thread's conv scratch (set per call) */
  bool blk16;            /* bf16 NCHW <-> nChw16c: blk16.c moves it, not `reorder` */
  int arg;
  int64_t dims[4];       /* the activation's (N, C, H, W) */
} conv_arg;

typedef struct {
  ts_kstate base;
  dnnl_primitive_t prim;
  dnnl_memory_t scratch_mem; /* oneDNN's scratchpad, in the thread's conv scratch */
  size_t out_bytes, pad_bytes, wei_bytes; /* blocked output, scratchpad, blocked weights: thread's conv scratch */
  conv_arg args[3]; /* in[0], in[1], out */
  bool plain;       /* NCHW / OIHW throughout (plain_fits below): no reorders */
  char impl[48];    /* oneDNN's implementation name (tk_conv_state_impl) */
} conv_state;

/* The blocked output, the scratchpad and the blocked weights (forward and
 * backward-data pick different weight layouts, so no later conv reads them)
 * live only inside one conv call, so every conv of a thread shares one
 * growing buffer for them (a ResNet-50 step has ~160 conv nodes: a blocked
 * output and a scratchpad of its own per node held ~2 activations per node
 * for nothing; the weights' copies ~2 copies of the model). Blocked
 * activation inputs stay per node: later convs of the run may read them
 * (shared reorders below). */
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static int g_scratch_ok = -1;
typedef struct {
  void *p;
  size_t cap;
} conv_scratch;

static void scratch_destroy(void *v) {
  conv_scratch *c = v;
  free(c->p);
  free(c);
}

static void scratch_init(void) { g_scratch_ok = pthread_key_create(&g_scratch_key, scratch_destroy); }

static void *thread_scratch(size_t bytes) {
  pthread_once(&g_scratch_once, scratch_init);
  if (g_scratch_ok) return NULL;
  conv_scratch *c = pthread_getspecific(g_scratch_key);
  if (!c) {
    if (!(c = calloc(1, sizeof *c))) return NULL;
    if (pthread_setspecific(g_scratch_key, c)) {
      free(c);
      return NULL;
    }
  }
  if (c->cap < bytes) {
    free(c->p);
    c->cap = 0;
    if (!(c->p = aligned_alloc(64, bytes))) return NULL;
    c->cap = bytes;
  }
  return c->p;
}

static size_t up64(size_t n) { return (n + 63) / 64 * 64; }

static uint64_t g_free_gen;

static void conv_state_free(ts_kstate *s) {
  conv_state *c = (conv_state *)s;
  __atomic_add_fetch(&g_free_gen, 1, __ATOMIC_ACQ_REL); /* shared reorders (below) may point here */
  for (int i = 0; i < 3; i++) {
    if (c->args[i].reorder) dnnl_primitive_destroy(c->args[i].reorder);
    if (c->args[i].prim && c->args[i].prim != c->args[i].user) dnnl_memory_destroy(c->args[i].prim);
    if (c->args[i].user) dnnl_memory_destroy(c->args[i].user);
  }
  if (c->prim) dnnl_primitive_destroy(c->prim);
  if (c->scratch_mem) dnnl_memory_destroy(c->scratch_mem);
  free(c);
}

/* NHWC activations are given as they are, never `any`: no reorders. */
static void md_act(dnnl_memory_desc_t *md, dnnl_data_type_t t, const geom_t *q, int64_t C, int64_t H, int64_t W,
                   bool any) {
  dnnl_dims_t dims = {q->N, C, H, W};
  dnnl_memory_desc_init_by_tag(md, 4, dims, t, q->nhwc ? dnnl_nhwc : any ? dnnl_format_tag_any : dnnl_nchw);
}

static void md_wei(dnnl_memory_desc_t *md, dnnl_data_type_t t, const geom_t *q, bool any) {
  if (q->G == 1) {
    dnnl_dims_t dims = {q->O, q->C, q->KH, q->KW};
    dnnl_memory_desc_init_by_tag(md, 4, dims, t, any ? dnnl_format_tag_any : dnnl_oihw);
  } else {
    dnnl_dims_t dims = {q->G, q->O / q->G, q->C / q->G, q->KH, q->KW};
    dnnl_memory_desc_init_by_tag(md, 5, dims, t, any ? dnnl_format_tag_any : dnnl_goihw);
  }
}

static bool g_blk16 = true;

void tk_conv_set_blk16(bool on) { __atomic_store_n(&g_blk16, on, __ATOMIC_RELAXED); }

/* A bf16 activation whose user layout is NCHW and primitive layout nChw16c
 * with C a multiple of 16 (no padded channels): blk16.c's case. */
static bool is_blk16(const dnnl_memory_desc_t *umd, const dnnl_memory_desc_t *pmd) {
  if (umd->ndims != 4 || umd->data_type != dnnl_bf16 || umd->dims[1] % 16) return false;
  dnnl_memory_desc_t nchw, blk;
  return dnnl_memory_desc_init_by_tag(&nchw, 4, umd->dims, dnnl_bf16, dnnl_nchw) == dnnl_success &&
         dnnl_memory_desc_init_by_tag(&blk, 4, umd->dims, dnnl_bf16, dnnl_nChw16c) == dnnl_success &&
         dnnl_memory_desc_equal(umd, &nchw) && dnnl_memory_desc_equal(pmd, &blk);
}

/* Binds argument slot i: user layout `umd`, primitive layout queried by `what`. */
static int bind_arg(conv_state *s, int i, dnnl_engine_t eng, const dnnl_primitive_desc_t pd,
                    dnnl_query_t what, const dnnl_memory_desc_t *umd, int arg, bool is_output) {
  conv_arg *a = &s->args[i];
  a->arg = arg, a->is_output = is_output;
  const dnnl_memory_desc_t *pmd = dnnl_primitive_desc_query_md(pd, what, 0);
  if (!pmd || dnnl_memory_create(&a->user, umd, eng, DNNL_MEMORY_NONE) != dnnl_success) return -1;
  if (dnnl_memory_desc_equal(umd, pmd)) {
    a->prim = a->user;
    return 0;
  }
  /* an output's or the weights' blocked copy lives in the thread's scratch (set per call) */
  a->in_scratch = is_output || arg == DNNL_ARG_WEIGHTS;
  if (dnnl_memory_create(&a->prim, pmd, eng, a->in_scratch ? DNNL_MEMORY_NONE : DNNL_MEMORY_ALLOCATE) != dnnl_success)
    return -1;
  if (is_output) s->out_bytes = dnnl_memory_desc_get_size(pmd);
  else if (a->in_scratch) s->wei_bytes = dnnl_memory_desc_get_size(pmd);
  a->blk16 = is_blk16(umd, pmd);
  memcpy(a->dims, umd->dims, sizeof a->dims);
  dnnl_primitive_desc_t rpd;
  const dnnl_memory_desc_t *src = is_output ? pmd : umd, *dst = is_output ? umd : pmd;
  if (dnnl_reorder_primitive_desc_create(&rpd, src, eng, dst, eng, NULL) != dnnl_success) return -1;
  dnnl_status_t st = dnnl_primitive_create(&a->reorder, rpd);
  dnnl_primitive_desc_destroy(rpd);
  return st == dnnl_success ? 0 : -1;
}

/* A 1x1 convolution without padding or dilation is a matrix product per
 * image on the plain NCHW layout (y[n] = W (O x C) . x[n] (C x H*W); stride 2
 * only subsamples x): oneDNN's gemm implementation runs it on the caller's
 * buffers with no reorder at all, where the blocked kernels need the input
 * reordered in and the result reordered out — as many bytes moved as the
 * matrix product reads (two of the three convolutions of a ResNet-50
 * bottleneck, and every projection shortcut, are 1x1). Except on small
 * output planes (<= 14x14: ResNet-50's last two stages and the stride-2
 * projections into them): there the gemm convolution's forward and
 * backward-data run up to 3x slower than the blocked kernels, more than the
 * reorders cost, while its filter gradient stays ahead on every ResNet shape.
 * A one-off per-shape timing of ResNet-50 b8's 1x1 convolutions (oneDNN 2.6,
 * one thread, CPU time, reorders included; not kept in bench/) put the gain
 * at 30 (bf16) / 40 (f32) ms per step; the reproducible measurement is the
 * whole step, `build/bench_convnet_step --model resnet50 --amp bf16` against
 * the previous build (README: 765 / 757 -> 590 / 616 ms). */
static bool g_plain_1x1 = true;

void tk_conv_set_plain_1x1(bool on) { __atomic_store_n(&g_plain_1x1, on, __ATOMIC_RELAXED); }

#define PLAIN_MIN_PLANE (14 * 14)

/* bf16 with fewer than 64 input channels (ResNet-20's projections 16->32 and
 * 32->64): the gemm convolution is far behind the blocked kernels there, in
 * all three directions. oneDNN verbose least times, 1 thread, b128 32x32
 * (bench/run_onednn_least.sh's header, stop 33, loaded host): 16->32 1x1/2
 * forward 1.958 ms on the gemm path against 0.272 for the blocked
 * jit_bf16_1x1 (PyTorch's), backward-data 0.975 / 0.327, filter gradient
 * 2.055 / 0.243; 32->64 filter gradient 0.460 / 0.142. f32 keeps the plain
 * path on every shape (its results stay bit-identical to before). */
#define PLAIN_MIN_BF16_CHANNELS 64

static bool plain_fits(const geom_t *q, ts_op op, dnnl_data_type_t t) {
  return __atomic_load_n(&g_plain_1x1, __ATOMIC_RELAXED) && !q->nhwc && q->KH == 1 && q->KW == 1 && q->G == 1 &&
         q->d[0] == 1 && q->d[1] == 1 && !q->pl[0] && !q->pl[1] && !q->ph[0] && !q->ph[1] &&
         (t != dnnl_bf16 || q->C >= PLAIN_MIN_BF16_CHANNELS) &&
         (op == TS_OP_CONV_BWD_FILTER || q->OH * q->OW > PLAIN_MIN_PLANE);
}

/* Channels-last f32 forward: oneDNN 2.6 lists brgconv (brgconv_1x1) first
 * for nxc activations, and it loses to the next one (jit / jit_1x1 avx512)
 * on 3x3 convolutions of few input channels and where the output is 4
 * wide — its padded borders and short rows. Least CPU ms, 1 thread, conv +
 * its weight reorder, brgconv vs the first other, two runs of
 * `build/bench_conv_impls 1 R 3` (stop 35, R = 5 at load 3, R = 7 at load
 * 8): ResNet-20 b128 3->16 32x32 1.21 / 0.87 and 0.98 / 0.70, 16->16 (x6)
 * 5.21 / 4.70 and 3.79 / 3.87, 16->32 3x3/2 2.35 / 1.69 and 1.92 / 1.49,
 * 32->32 16x16 (x5) 3.51 / 3.39 and 3.15 / 3.02; ResNet-18 b32 512->512 4x4
 * (x3) 21.16 / 15.16 and 20.15 / 12.93, 256->512 3x3/2 to 4x4 11.64 / 7.58
 * and 10.86 / 6.28, its 1x1/2 0.90 / 0.77 and 0.79 / 0.68. Elsewhere brgconv
 * is ahead or level and stays: 1x1s of few channels (ResNet-20 16->32 1x1/2
 * 0.50 / 0.60 and 0.52 / 0.62 against jit_1x1), ResNet-20 64->64 8x8 3.27 /
 * 3.44, ResNet-18 128->128 16x16 13.27 / 14.22, ResNet-50 b8's 1x1s (up to
 * 12.2 / 17.7) and its 7x7 stem on 3 channels (12.76 / 13.00). A different
 * kernel sums in another order: the results move by rounding. */
static bool g_nhwc_jit = true;

void tk_conv_set_nhwc_jit(bool on) { __atomic_store_n(&g_nhwc_jit, on, __ATOMIC_RELAXED); }

static bool nhwc_jit_fits(const geom_t *q, ts_op op, dnnl_data_type_t t) {
  return __atomic_load_n(&g_nhwc_jit, __ATOMIC_RELAXED) && op == TS_OP_CONV && q->nhwc && t == dnnl_f32 &&
         q->G == 1 && ((q->C <= 32 && q->KH == 3 && q->KW == 3) || q->OW <= 4);
}

/* The first implementation of `cd` that is not a brgconv (nor a reference
 * loop), else the first one oneDNN lists. */
static dnnl_status_t pd_without_brgconv(dnnl_primitive_desc_t *pd, const_dnnl_op_desc_t cd,
                                        const_dnnl_primitive_attr_t attr, dnnl_engine_t eng) {
  dnnl_primitive_desc_iterator_t it;
  dnnl_status_t st = dnnl_primitive_desc_iterator_create(&it, cd, attr, eng, NULL);
  if (st != dnnl_success) return st;
  *pd = NULL;
  do {
    dnnl_primitive_desc_t p = dnnl_primitive_desc_iterator_fetch(it);
    const char *impl = NULL;
    if (!p) break;
    if (dnnl_primitive_desc_query(p, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl &&
        strncmp(impl, "brgconv", 7) && strncmp(impl, "ref", 3)) {
      *pd = p;
      break;
    }
    dnnl_primitive_desc_destroy(p);
  } while (dnnl_primitive_desc_iterator_next(it) == dnnl_success);
  dnnl_primitive_desc_iterator_destroy(it);
  return *pd ? dnnl_success : dnnl_primitive_desc_create(pd, cd, attr, eng, NULL);
}

/* oneDNN's reference implementations are loops: the blocked path is better. */
static bool is_ref_impl(const_dnnl_primitive_desc_t pd) {
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl) return true;
  return strncmp(impl, "ref", 3) == 0;
}

bool tk_conv_state_is_plain(const ts_kstate *st) {
  const conv_state *s = (const conv_state *)st;
  return s && s->plain;
}

const char *tk_conv_state_impl(const ts_kstate *st) { return st ? ((const conv_state *)st)->impl : ""; }

/* tw: the result's type when it is the filter gradient (f32 from bf16 x and
 * dy: oneDNN's bf16 backward-weights writes f32 diff_weights), else t. */
static int conv_setup(conv_state *s, const ts_node *n, const geom_t *q, dnnl_data_type_t t, dnnl_data_type_t tw,
                      bool plain) {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  if (tk_dnnl_engine(&eng, &stream)) return -1;
  dnnl_memory_desc_t xa, wa, ya, xu, wu, yu, dwa, dwu;
  md_act(&xa, t, q, q->C, q->H, q->W, !plain);
  md_act(&ya, t, q, q->O, q->OH, q->OW, !plain);
  md_wei(&wa, t, q, !plain);
  md_act(&xu, t, q, q->C, q->H, q->W, false);
  md_act(&yu, t, q, q->O, q->OH, q->OW, false);
  md_wei(&wu, t, q, false);
  md_wei(&dwa, tw, q, !plain);
  md_wei(&dwu, tw, q, false);
  dnnl_dims_t strides = {q->s[0], q->s[1]}, dil = {q->d[0] - 1, q->d[1] - 1};
  dnnl_dims_t pl = {q->pl[0], q->pl[1]}, pr = {q->ph[0], q->ph[1]};
  dnnl_primitive_attr_t attr;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return -1;
  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  dnnl_convolution_desc_t fd, bd;
  dnnl_primitive_desc_t fpd = NULL, pd = NULL;
  int rc = -1;
  if (dnnl_dilated_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                                 &xa, &wa, NULL, &ya, strides, dil, pl, pr) != dnnl_success)
    goto done;
  if ((nhwc_jit_fits(q, n->op, t) ? pd_without_brgconv(&fpd, &fd, attr, eng)
                                    : dnnl_primitive_desc_create(&fpd, &fd, n->op == TS_OP_CONV ? attr : NULL, eng,
                                                                 NULL)) != dnnl_success)
    goto done;
  if (n->op == TS_OP_CONV) {
    pd = fpd, fpd = NULL;
  } else {
    dnnl_status_t st = n->op == TS_OP_CONV_BWD_DATA
        ? dnnl_dilated_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &xa, &wa, &ya,
                                                           strides, dil, pl, pr)
        : dnnl_dilated_convolution_backward_weights_desc_init(&bd, dnnl_convolution_direct, &xa, &dwa,
                                                              NULL, &ya, strides, dil, pl, pr);
    if (st != dnnl_success || dnnl_primitive_desc_create(&pd, &bd, attr, eng, fpd) != dnnl_success) goto done;
  }
  if (plain && is_ref_impl(pd)) goto done;
  s->plain = plain;
  const char *impl = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
    snprintf(s->impl, sizeof s->impl, "%s", impl);
  if (dnnl_primitive_create(&s->prim, pd) != dnnl_success) goto done;
  const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  size_t sb = smd ? dnnl_memory_desc_get_size(smd) : 0;
  if (sb) {
    s->pad_bytes = sb;
    if (dnnl_memory_create(&s->scratch_mem, smd, eng, DNNL_MEMORY_NONE) != dnnl_success) goto done;
  }
  if (n->op == TS_OP_CONV)
    rc = bind_arg(s, 0, eng, pd, dnnl_query_src_md, &xu, DNNL_ARG_SRC, false) ||
         bind_arg(s, 1, eng, pd, dnnl_query_weights_md, &wu, DNNL_ARG_WEIGHTS, false) ||
         bind_arg(s, 2, eng, pd, dnnl_query_dst_md, &yu, DNNL_ARG_DST, true);
  else if (n->op == TS_OP_CONV_BWD_DATA)
    rc = bind_arg(s, 0, eng, pd, dnnl_query_diff_dst_md, &yu, DNNL_ARG_DIFF_DST, false) ||
         bind_arg(s, 1, eng, pd, dnnl_query_weights_md, &wu, DNNL_ARG_WEIGHTS, false) ||
         bind_arg(s, 2, eng, pd, dnnl_query_diff_src_md, &xu, DNNL_ARG_DIFF_SRC, true);
  else
    rc = bind_arg(s, 0, eng, pd, dnnl_query_src_md, &xu, DNNL_ARG_SRC, false) ||
         bind_arg(s, 1, eng, pd, dnnl_query_diff_dst_md, &yu, DNNL_ARG_DIFF_DST, false) ||
         bind_arg(s, 2, eng, pd, dnnl_query_diff_weights_md, &dwu, DNNL_ARG_DIFF_WEIGHTS, true);
  rc = rc ? -1 : 0;
done:
  dnnl_primitive_attr_destroy(attr);
  if (fpd) dnnl_primitive_desc_destroy(fpd);
  if (pd) dnnl_primitive_desc_destroy(pd);
  return rc;
}

/* Moves slot a between its user and primitive layouts (into the primitive's
 * for an input, out of it for the output). */
static int reorder(const conv_arg *a, dnnl_stream_t stream, int nt) {
  dnnl_memory_t from = a->is_output ? a->prim : a->user, to = a->is_output ? a->user : a->prim;
  if (a->blk16 && __atomic_load_n(&g_blk16, __ATOMIC_RELAXED)) {
    void *s, *d;
    if (dnnl_memory_get_data_handle(from, &s) != dnnl_success || dnnl_memory_get_data_handle(to, &d) != dnnl_success)
      return -1;
    tk_blk16_convert(s, d, a->dims[0], a->dims[1], a->dims[2] * a->dims[3], !a->is_output, nt);
    return 0;
  }
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
  return dnnl_primitive_execute(a->reorder, stream, 2, args) == dnnl_success ? 0 : -1;
}

/* ---- reorders shared between the convolutions of one run ----
 * A training step reorders the same tensor into the same blocked layout
 * several times: the forward conv's input again for the backward-filter conv,
 * the incoming gradient dy for both backward convs. The first reorder of a
 * tensor (graph node) in a run is remembered here, per thread, and a later
 * conv of the same run that needs that tensor in that layout reads the blocked
 * copy (owned by the first conv's state, left untouched until that conv runs
 * again) instead of reordering it again: the same bits, less memory traffic.
 * A run is the sequence of kernel calls with increasing node ids on one
 * thread: a conv whose id is not above the previous one's (or of another
 * graph) starts a new epoch. Any conv state freed anywhere invalidates every
 * entry (g_free_gen), so an entry never points into freed memory. */
typedef struct {
  const ts_graph *g;
  int32_t src;     /* node id of the tensor */
  const void *user; /* its buffer */
  dnnl_memory_t prim; /* its blocked copy (owned by another conv's state) */
  uint64_t epoch, free_gen;
} rc_entry;

#define RC_SLOTS 1024
static _Thread_local rc_entry rc_tab[RC_SLOTS];
static _Thread_local const ts_graph *rc_last_g;
static _Thread_local int32_t rc_last_id = -1;
static _Thread_local uint64_t rc_epoch;

static void rc_begin(const ts_graph *g, int32_t id) {
  if (g != rc_last_g || id <= rc_last_id) rc_epoch++;
  rc_last_g = g, rc_last_id = id;
}

static rc_entry *rc_find(const ts_graph *g, int32_t src, const void *user, dnnl_memory_t want_layout) {
  rc_entry *e = &rc_tab[(uint32_t)src % RC_SLOTS];
  if (e->g != g || e->src != src || e->user != user || e->epoch != rc_epoch || !e->prim ||
      e->free_gen != __atomic_load_n(&g_free_gen, __ATOMIC_ACQUIRE))
    return NULL;
  const dnnl_memory_desc_t *a, *b;
  if (dnnl_memory_get_memory_desc(e->prim, &a) != dnnl_success ||
      dnnl_memory_get_memory_desc(want_layout, &b) != dnnl_success || !dnnl_memory_desc_equal(a, b))
    return NULL;
  return e;
}

static void rc_put(const ts_graph *g, int32_t src, const void *user, dnnl_memory_t prim) {
  rc_entry *e = &rc_tab[(uint32_t)src % RC_SLOTS];
  *e = (rc_entry){g, src, user, prim, rc_epoch, __atomic_load_n(&g_free_gen, __ATOMIC_ACQUIRE)};
}

static size_t scratch_bytes(const conv_state *s) {
  return up64(s->out_bytes) + up64(s->pad_bytes) + up64(s->wei_bytes);
}

static int conv_run(conv_state *s, const ts_graph *g, const ts_node *n, tk_in in, void *out, int nt) {
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  if (tk_dnnl_engine(&eng, &stream)) return -1;
  rc_begin(g, (int32_t)(n - g->nodes));
  size_t pad_at = up64(s->out_bytes), wei_at = pad_at + up64(s->pad_bytes);
  if (s->out_bytes || s->pad_bytes || s->wei_bytes) {
    char *buf = thread_scratch(scratch_bytes(s));
    if (!buf) return -2;
    if (s->out_bytes) dnnl_memory_set_data_handle(s->args[2].prim, buf);
    if (s->pad_bytes) dnnl_memory_set_data_handle(s->scratch_mem, buf + pad_at);
    if (s->wei_bytes) dnnl_memory_set_data_handle(s->args[1].prim, buf + wei_at);
  }
  dnnl_exec_arg_t args[4];
  int na = 0;
  for (int i = 0; i < 3; i++) {
    conv_arg *a = &s->args[i];
    dnnl_memory_t use = a->prim;
    dnnl_memory_set_data_handle(a->user, i < 2 ? (void *)in[i] : out);
    if (!a->is_output && a->reorder && a->in_scratch) {
      if (reorder(a, stream, nt)) return -1;
    } else if (!a->is_output && a->reorder) {
      rc_entry *e = rc_find(g, n->in[i], in[i], a->prim);
      if (e) {
        use = e->prim;
      } else {
        if (reorder(a, stream, nt)) return -1;
        rc_put(g, n->in[i], in[i], a->prim);
      }
    }
    args[na++] = (dnnl_exec_arg_t){a->arg, use};
  }
  if (s->scratch_mem) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, s->scratch_mem};
  if (dnnl_primitive_execute(s->prim, stream, na, args) != dnnl_success) return -1;
  if (s->args[2].reorder && reorder(&s->args[2], stream, nt)) return -1;
  return dnnl_stream_wait(stream) == dnnl_success ? 0 : -1;
}

/* The oneDNN state of node n: the plain path where it fits and oneDNN has a
 * real (non-reference) kernel for it, else the blocked one; NULL when oneDNN
 * takes neither (the loops run), with *oom set when memory ran out. */
static conv_state *conv_state_new(const ts_node *n, ts_dtype in_dt, const geom_t *q, bool *oom) {
  dnnl_data_type_t t = in_dt == TS_F32 ? dnnl_f32 : dnnl_bf16, tw = n->dtype == TS_F32 ? dnnl_f32 : dnnl_bf16;
  for (int plain = plain_fits(q, n->op, t); plain >= 0; plain--) {
    conv_state *s = calloc(1, sizeof *s);
    if (!s) {
      *oom = true;
      return NULL;
    }
    s->base.free = conv_state_free;
    if (!conv_setup(s, n, q, t, tw, plain)) return s;
    conv_state_free(&s->base);
  }
  return NULL;
}

/* autocast's bf16 filter gradient: bf16 x and dy, the f32 sum written as is */
static bool wide_dw(const ts_node *n, const ts_node *x) {
  return n->op == TS_OP_CONV_BWD_FILTER && n->dtype == TS_F32 && x->dtype == TS_BF16;
}

int tk_conv(const ts_graph *g, const ts_node *n, tk_in in, void *out, ts_kstate **st,
            const ts_kctx *ctx) {
  if (tk_conv_gemm_fits(g, n)) return tk_conv_gemm(g, n, in, out, st, ctx->num_threads);
  geom_t q;
  geom_of(g, n, &q);
  const ts_node *a = tk_operand(g, n, 0), *b = tk_operand(g, n, 1);
  bool dnnl_ok = (n->dtype == TS_F32 || n->dtype == TS_BF16) && (a->dtype == n->dtype || wide_dw(n, a)) &&
                 b->dtype == a->dtype && tk_numel(n) > 0 && tk_numel(a) > 0 && tk_numel(b) > 0;
  if (dnnl_ok) {
    conv_state *s = (conv_state *)*st;
    if (!s) {
      bool oom = false;
      s = conv_state_new(n, a->dtype, &q, &oom);
      if (oom) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory", ir_op_name(n->op));
      *st = s ? &s->base : NULL;
    }
    if (s) {
      int rc = conv_run(s, g, n, in, out, ctx->num_threads);
      if (rc == -2)
        return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu bytes of conv scratch",
                              ir_op_name(n->op), scratch_bytes(s));
      if (rc)
        return set_error_code(TS_ERR_INTERNAL, "%s: oneDNN execution failed (N=%lld C=%lld H=%lld W=%lld O=%lld)",
                                 ir_op_name(n->op), (long long)q.N, (long long)q.C, (long long)q.H, (long long)q.W,
                                 (long long)q.O);
      return 0;
    }
  }
  return conv_generic(g, n, &q, in, out, ctx->num_threads);
}
