/* infer.c — shape and dtype inference (and operand checking) for every IR op.
 * Builders call ir_infer before appending a node; ts_graph_verify calls it
 * again for every node and compares. Messages start with the op name and
 * name the offending sizes: "reshape: cannot reshape f32[2,3] (6 elements)
 * to [4,2] (8 elements)". */
#include <stdio.h>
#include <string.h>

#include "ir/infer.h"

#define ERR(...) set_error(__VA_ARGS__)

/* "[2,3]" */
static const char *dims_str(int rank, const int64_t *shape, char *buf, size_t len) {
  size_t o = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
  return buf;
}

/* "f32[2,3]" */
static const char *node_str(const ts_node *n, char *buf, size_t len) { return ir_shape_str(n, buf, len); }

static bool valid_dtype(ts_dtype dt) { return (unsigned)dt < TS_DTYPE_COUNT; }

bool ir_infer_result_given(ts_op op) { return ir_op_has(op, TS_OPF_RESULT_GIVEN); }

static int check_shape(const char *who, int rank, const int64_t *shape) {
  if (rank < 0 || rank > TS_MAX_RANK) return ERR("%s: rank %d is outside [0, %d]", who, rank, TS_MAX_RANK);
  for (int i = 0; i < rank; i++)
    if (shape[i] < 0) return ERR("%s: dim %d has negative size %lld", who, i, (long long)shape[i]);
  return 0;
}

static void set_like(const ts_node *x, ts_dtype *dt, int *rank, int64_t *shape) {
  *dt = x->dtype;
  *rank = x->rank;
  memcpy(shape, x->shape, sizeof x->shape);
}

static bool same_shape(const ts_node *a, const ts_node *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

/* ---- elementwise ---- */

static int infer_unary(const char *who, ts_op op, const ts_node *x, ts_dtype *dt, int *rank, int64_t *shape) {
  bool ok = ts_dtype_is_float(x->dtype) ||
            ((op == TS_OP_NEG || op == TS_OP_ABS) && (x->dtype == TS_I32 || x->dtype == TS_I64));
  if (!ok)
    return ERR("%s: operand dtype %s is not supported (float dtypes only%s)", who, ts_dtype_name(x->dtype),
               (op == TS_OP_NEG || op == TS_OP_ABS) ? ", or i32/i64" : "");
  set_like(x, dt, rank, shape);
  return 0;
}

static int check_same(const char *who, const char *na, const ts_node *a, const char *nb, const ts_node *b) {
  char sa[96], sb[96];
  if (a->dtype != b->dtype)
    return ERR("%s: %s is %s but %s is %s (dtypes must match; no implicit promotion, use ts_convert)", who, na,
               node_str(a, sa, sizeof sa), nb, node_str(b, sb, sizeof sb));
  if (!same_shape(a, b))
    return ERR("%s: %s is %s but %s is %s (shapes must be equal in the IR)", who, na, node_str(a, sa, sizeof sa),
               nb, node_str(b, sb, sizeof sb));
  return 0;
}

static int infer_binary(const char *who, ts_op op, const ts_node *a, const ts_node *b, ts_dtype *dt, int *rank,
                        int64_t *shape) {
  if (check_same(who, "lhs", a, "rhs", b)) return -1;
  if (a->dtype == TS_BOOL)
    return ERR("%s: bool operands are not supported (convert to a numeric dtype first)", who);
  if (op == TS_OP_POW && !ts_dtype_is_float(a->dtype))
    return ERR("%s: operand dtype %s is not supported (float dtypes only)", who, ts_dtype_name(a->dtype));
  set_like(a, dt, rank, shape);
  return 0;
}

/* ---- shape ops ---- */

static int infer_broadcast(const char *who, const ts_node *x, const ts_attr *at, int rank, const int64_t *shape) {
  char sx[96], so[96];
  if (at->n_dims != x->rank)
    return ERR("%s: operand %s has rank %d but %d broadcast dims were given", who, node_str(x, sx, sizeof sx),
               x->rank, at->n_dims);
  if (rank < x->rank)
    return ERR("%s: cannot broadcast %s to the lower rank shape %s", who, node_str(x, sx, sizeof sx),
               dims_str(rank, shape, so, sizeof so));
  for (int i = 0; i < x->rank; i++) {
    int d = at->dims[i];
    if (d < 0 || d >= rank) return ERR("%s: dims[%d] = %d is outside [0, %d)", who, i, d, rank);
    if (i > 0 && d <= at->dims[i - 1])
      return ERR("%s: dims must be strictly increasing but dims[%d] = %d follows %d", who, i, d, at->dims[i - 1]);
  }
  for (int i = 0; i < x->rank; i++) {
    int d = at->dims[i];
    if (x->shape[i] != 1 && x->shape[i] != shape[d])
      return ERR("%s: operand dim %d has size %lld but output dim %d has size %lld (must be 1 or equal)", who, i,
                 (long long)x->shape[i], d, (long long)shape[d]);
  }
  return 0;
}

static int infer_transpose(const char *who, const ts_node *x, const ts_attr *at, int *rank, int64_t *shape) {
  if (at->n_dims != x->rank)
    return ERR("%s: perm has %d entries but the operand is rank %d", who, at->n_dims, x->rank);
  bool seen[TS_MAX_RANK] = {false};
  for (int i = 0; i < x->rank; i++) {
    int p = at->dims[i];
    if (p < 0 || p >= x->rank) return ERR("%s: perm[%d] = %d is outside [0, %d)", who, i, p, x->rank);
    if (seen[p]) return ERR("%s: perm repeats dim %d", who, p);
    seen[p] = true;
    shape[i] = x->shape[p];
  }
  *rank = x->rank;
  return 0;
}

static int infer_slice(const char *who, const ts_node *x, const ts_attr *at, int *rank, int64_t *shape) {
  for (int d = 0; d < x->rank; d++) {
    int64_t s = at->start[d], l = at->limit[d], st = at->stride[d];
    if (st < 1) return ERR("%s: stride %lld in dim %d must be >= 1", who, (long long)st, d);
    if (s < 0 || l < s || l > x->shape[d])
      return ERR("%s: dim %d range [%lld, %lld) is not within [0, %lld] with start <= limit", who, d, (long long)s,
                 (long long)l, (long long)x->shape[d]);
    shape[d] = (l - s + st - 1) / st;
  }
  *rank = x->rank;
  return 0;
}

static int infer_pad(const char *who, const ts_node *x, const ts_attr *at, int *rank, int64_t *shape) {
  for (int d = 0; d < x->rank; d++) {
    if (at->start[d] < 0 || at->limit[d] < 0)
      return ERR("%s: padding of dim %d is lo %lld, hi %lld (must be >= 0)", who, d, (long long)at->start[d],
                 (long long)at->limit[d]);
    shape[d] = x->shape[d] + at->start[d] + at->limit[d];
  }
  *rank = x->rank;
  return 0;
}

static int infer_concat(const ts_graph *g, const char *who, int n_in, const int32_t *in, const ts_attr *at,
                        ts_dtype *dt, int *rank, int64_t *shape) {
  const ts_node *x0 = ts_node_at(g, in[0]);
  char s0[96], si[96];
  int ax = at->axis;
  if (ax < 0 || ax >= x0->rank || x0->rank == 0)
    return ERR("%s: axis %d is outside [0, %d) for operand 0 %s", who, ax, x0->rank, node_str(x0, s0, sizeof s0));
  set_like(x0, dt, rank, shape);
  for (int i = 1; i < n_in; i++) {
    const ts_node *xi = ts_node_at(g, in[i]);
    if (xi->dtype != x0->dtype || xi->rank != x0->rank)
      return ERR("%s: operand %d is %s but operand 0 is %s (dtype and rank must match)", who, i,
                 node_str(xi, si, sizeof si), node_str(x0, s0, sizeof s0));
    for (int d = 0; d < x0->rank; d++)
      if (d != ax && xi->shape[d] != x0->shape[d])
        return ERR("%s: operand %d is %s but operand 0 is %s (dim %d differs; only axis %d may)", who, i,
                   node_str(xi, si, sizeof si), node_str(x0, s0, sizeof s0), d, ax);
    shape[ax] += xi->shape[ax];
  }
  return 0;
}

/* ---- contractions ---- */

static int infer_dot(const char *who, const ts_node *l, const ts_node *r, const ts_dot_dims *dd, ts_dtype *dt,
                     int *rank, int64_t *shape) {
  char sl[96], sr[96];
  if (l->dtype != r->dtype || !ts_dtype_is_float(l->dtype))
    return ERR("%s: lhs is %s and rhs is %s (need the same float dtype)", who, node_str(l, sl, sizeof sl),
               node_str(r, sr, sizeof sr));
  if (dd->n_batch < 0 || dd->n_contract < 0 || dd->n_batch + dd->n_contract > TS_MAX_RANK)
    return ERR("%s: %d batch and %d contracting dims is not a valid count", who, dd->n_batch, dd->n_contract);
  bool lused[TS_MAX_RANK] = {false}, rused[TS_MAX_RANK] = {false};
  for (int k = 0; k < dd->n_batch + dd->n_contract; k++) {
    bool batch = k < dd->n_batch;
    int i = batch ? k : k - dd->n_batch;
    int ld = batch ? dd->lhs_batch[i] : dd->lhs_contract[i];
    int rd = batch ? dd->rhs_batch[i] : dd->rhs_contract[i];
    const char *kind = batch ? "batch" : "contracting";
    if (ld < 0 || ld >= l->rank)
      return ERR("%s: lhs %s dim %d is outside lhs %s", who, kind, ld, node_str(l, sl, sizeof sl));
    if (rd < 0 || rd >= r->rank)
      return ERR("%s: rhs %s dim %d is outside rhs %s", who, kind, rd, node_str(r, sr, sizeof sr));
    if (lused[ld]) return ERR("%s: lhs dim %d is used twice as a batch/contracting dim", who, ld);
    if (rused[rd]) return ERR("%s: rhs dim %d is used twice as a batch/contracting dim", who, rd);
    lused[ld] = rused[rd] = true;
    if (l->shape[ld] != r->shape[rd])
      return ERR("%s: lhs %s dim %d has size %lld but rhs dim %d has size %lld", who, kind, ld,
                 (long long)l->shape[ld], rd, (long long)r->shape[rd]);
  }
  int n = 0;
  for (int i = 0; i < dd->n_batch; i++) shape[n++] = l->shape[dd->lhs_batch[i]];
  for (int d = 0; d < l->rank; d++)
    if (!lused[d]) shape[n++] = l->shape[d];
  for (int d = 0; d < r->rank; d++)
    if (!rused[d]) {
      if (n >= TS_MAX_RANK) return ERR("%s: result rank exceeds %d", who, TS_MAX_RANK);
      shape[n++] = r->shape[d];
    }
  *rank = n;
  *dt = l->dtype;
  return 0;
}

static int check_layout(const char *who, ts_layout l) {
  if (l != TS_LAYOUT_NCHW && l != TS_LAYOUT_NHWC)
    return ERR("%s: layout %d is neither TS_LAYOUT_NCHW (0) nor TS_LAYOUT_NHWC (1)", who, (int)l);
  return 0;
}

static int check_conv_params(const char *who, const ts_conv_params *p) {
  for (int i = 0; i < 2; i++) {
    if (p->stride[i] < 1 || p->dilation[i] < 1)
      return ERR("%s: stride [%d,%d] and dilation [%d,%d] must be >= 1", who, p->stride[0], p->stride[1],
                 p->dilation[0], p->dilation[1]);
    if (p->pad_lo[i] < 0 || p->pad_hi[i] < 0)
      return ERR("%s: padding lo [%d,%d] hi [%d,%d] must be >= 0", who, p->pad_lo[0], p->pad_lo[1], p->pad_hi[0],
                 p->pad_hi[1]);
  }
  if (p->groups < 1) return ERR("%s: groups %d must be >= 1", who, p->groups);
  return check_layout(who, p->layout);
}

/* Output (N, O, OH, OW) — (N, OH, OW, O) in NHWC — of a conv of x shape xs
 * with weight shape ws (OIHW in both layouts). */
static int conv_out(const char *who, ts_dtype xdt, ts_dtype wdt, const int64_t *xs, const int64_t *ws,
                    const ts_conv_params *p, int64_t *out) {
  char sx[96], sw[96];
  if (xdt != wdt || !ts_dtype_is_float(xdt))
    return ERR("%s: input is %s and weight is %s (need the same float dtype)", who, ts_dtype_name(xdt),
               ts_dtype_name(wdt));
  if (check_conv_params(who, p)) return -1;
  int cd = ir_chan_dim(p->layout), sd = ir_space_dim(p->layout);
  if (xs[cd] != ws[1] * p->groups)
    return ERR("%s: input has %lld channels%s but weight expects %lld (groups %d)", who, (long long)xs[cd],
               cd == 3 ? " (dim 3: NHWC)" : "", (long long)(ws[1] * p->groups), p->groups);
  if (ws[0] % p->groups != 0)
    return ERR("%s: weight has %lld output channels, not divisible by groups %d", who, (long long)ws[0], p->groups);
  out[0] = xs[0];
  out[cd] = ws[0];
  for (int i = 0; i < 2; i++) {
    int64_t span = xs[sd + i] + p->pad_lo[i] + p->pad_hi[i] - (int64_t)p->dilation[i] * (ws[2 + i] - 1) - 1;
    if (ws[2 + i] < 1 || span < 0)
      return ERR("%s: kernel %s (dilation %d) does not fit the padded input %s (padding %d+%d) in dim %d", who,
                 dims_str(4, ws, sw, sizeof sw), p->dilation[i], dims_str(4, xs, sx, sizeof sx), p->pad_lo[i],
                 p->pad_hi[i], sd + i);
    out[sd + i] = span / p->stride[i] + 1;
  }
  return 0;
}

static int need_rank4(const char *who, const char *what, const ts_node *x) {
  char s[96];
  if (x->rank != 4) return ERR("%s: %s must be rank 4 (N, C, H, W) but is %s", who, what, node_str(x, s, sizeof s));
  return 0;
}

static int check_dims_equal(const char *who, const char *what, const int64_t *got, const int64_t *want) {
  char sg[96], sw[96];
  for (int i = 0; i < 4; i++)
    if (got[i] != want[i])
      return ERR("%s: %s is %s but the forward op implies %s", who, what, dims_str(4, got, sg, sizeof sg),
                 dims_str(4, want, sw, sizeof sw));
  return 0;
}

/* causal_attention(_grad): qkv f32 (B, T, 3, H, Dh) (and dy (B, T, H, Dh)), scale > 0. */
static int infer_attention(const ts_graph *g, const char *who, int n_in, const int32_t *in, const ts_attr *at,
                           ts_dtype *dt, int *rank, int64_t *shape) {
  const ts_node *x = ts_node_at(g, in[0]);
  char s0[96], s1[96], s2[96];
  if (x->rank != 5 || x->shape[2] != 3 || x->dtype != TS_F32)
    return ERR("%s: qkv must be f32 (B, T, 3, H, Dh) but is %s", who, node_str(x, s0, sizeof s0));
  if (!(at->value > 0)) return ERR("%s: scale %g must be positive", who, at->value);
  int64_t ys[4] = {x->shape[0], x->shape[1], x->shape[3], x->shape[4]};
  if (n_in == 2) {
    const ts_node *dy = ts_node_at(g, in[1]);
    if (dy->rank != 4 || dy->dtype != x->dtype || memcmp(dy->shape, ys, sizeof ys))
      return ERR("%s: dy is %s but qkv %s implies (B, T, H, Dh) = %s", who, node_str(dy, s0, sizeof s0),
                 node_str(x, s1, sizeof s1), dims_str(4, ys, s2, sizeof s2));
    set_like(x, dt, rank, shape);
    return 0;
  }
  *dt = x->dtype;
  *rank = 4;
  memcpy(shape, ys, sizeof ys);
  return 0;
}

/* layer_norm(_grad, _dgamma): x f32 (.., D) of rank >= 1; gamma, beta (D);
 * dy like x; eps >= 0. */
static int infer_layernorm(const ts_graph *g, ts_op op, const char *who, const int32_t *in, const ts_attr *at,
                           ts_dtype *dt, int *rank, int64_t *shape) {
  const ts_node *x = ts_node_at(g, in[0]);
  char s0[96], s1[96];
  if (x->rank < 1 || x->dtype != TS_F32)
    return ERR("%s: x must be f32 of rank >= 1 but is %s", who, node_str(x, s0, sizeof s0));
  int64_t D = x->shape[x->rank - 1];
  if (!(at->value >= 0)) return ERR("%s: eps %g must be >= 0", who, at->value);
  for (int k = 1; k < (op == TS_OP_LAYERNORM_DGAMMA ? 2 : 3); k++) {
    const ts_node *o = ts_node_at(g, in[k]);
    bool is_dy = op == TS_OP_LAYERNORM_DGAMMA || (op == TS_OP_LAYERNORM_GRAD && k == 2);
    if (is_dy ? !same_shape(o, x) || o->dtype != x->dtype
              : o->rank != 1 || o->shape[0] != D || o->dtype != x->dtype)
      return ERR("%s: operand %d is %s but x is %s (%s)", who, k, node_str(o, s0, sizeof s0),
                 node_str(x, s1, sizeof s1), is_dy ? "dy must match x" : "gamma and beta must be f32 (D)");
  }
  *dt = x->dtype;
  if (op == TS_OP_LAYERNORM_DGAMMA) {
    *rank = 1;
    shape[0] = D;
    return 0;
  }
  set_like(x, dt, rank, shape);
  return 0;
}

static int pool_out(const char *who, const ts_node *x, const int64_t *xs, const ts_pool_params *p, int64_t *out) {
  char sx[96];
  if (!ts_dtype_is_float(x->dtype))
    return ERR("%s: operand dtype %s is not supported (float dtypes only)", who, ts_dtype_name(x->dtype));
  if (check_layout(who, p->layout)) return -1;
  int cd = ir_chan_dim(p->layout), sd = ir_space_dim(p->layout);
  out[0] = xs[0];
  out[cd] = xs[cd];
  for (int i = 0; i < 2; i++) {
    if (p->kernel[i] < 1 || p->stride[i] < 1 || p->pad[i] < 0)
      return ERR("%s: kernel [%d,%d] and stride [%d,%d] must be >= 1, pad [%d,%d] >= 0", who, p->kernel[0],
                 p->kernel[1], p->stride[0], p->stride[1], p->pad[0], p->pad[1]);
    int64_t span = xs[sd + i] + 2 * (int64_t)p->pad[i] - p->kernel[i];
    if (span < 0)
      return ERR("%s: kernel %d does not fit input %s with padding %d in dim %d", who, p->kernel[i],
                 dims_str(4, xs, sx, sizeof sx), p->pad[i], sd + i);
    out[sd + i] = span / p->stride[i] + 1;
  }
  return 0;
}

/* ---- reductions and indexing ---- */

static int infer_reduce(const char *who, const ts_node *x, const ts_attr *at, ts_dtype *dt, int *rank,
                        int64_t *shape) {
  if ((unsigned)at->reduce > TS_REDUCE_MEAN) return ERR("%s: unknown reduce kind %d", who, (int)at->reduce);
  if (x->dtype == TS_BOOL || (at->reduce == TS_REDUCE_MEAN && !ts_dtype_is_float(x->dtype)))
    return ERR("%s: operand dtype %s is not supported for this reduction", who, ts_dtype_name(x->dtype));
  if (at->n_dims < 0 || at->n_dims > x->rank)
    return ERR("%s: %d dims given for a rank %d operand", who, at->n_dims, x->rank);
  bool red[TS_MAX_RANK] = {false};
  for (int i = 0; i < at->n_dims; i++) {
    int d = at->dims[i];
    if (d < 0 || d >= x->rank) return ERR("%s: dim %d is outside [0, %d)", who, d, x->rank);
    if (i > 0 && d <= at->dims[i - 1])
      return ERR("%s: dims must be ascending and unique but dims[%d] = %d follows %d", who, i, d, at->dims[i - 1]);
    red[d] = true;
  }
  int n = 0;
  for (int d = 0; d < x->rank; d++)
    if (!red[d]) shape[n++] = x->shape[d];
  *rank = n;
  *dt = x->dtype;
  return 0;
}

static int infer_gather(const char *who, const ts_node *t, const ts_node *idx, ts_dtype *dt, int *rank,
                        int64_t *shape) {
  char st[96], si[96];
  if (t->rank < 1) return ERR("%s: table must have rank >= 1 but is %s", who, node_str(t, st, sizeof st));
  if (idx->dtype != TS_I32 && idx->dtype != TS_I64)
    return ERR("%s: indices must be i32 or i64 but are %s", who, node_str(idx, si, sizeof si));
  if (idx->rank + t->rank - 1 > TS_MAX_RANK)
    return ERR("%s: result rank %d exceeds %d", who, idx->rank + t->rank - 1, TS_MAX_RANK);
  int n = 0;
  for (int d = 0; d < idx->rank; d++) shape[n++] = idx->shape[d];
  for (int d = 1; d < t->rank; d++) shape[n++] = t->shape[d];
  *rank = n;
  *dt = t->dtype;
  return 0;
}

static int infer_scatter(const char *who, const ts_node *base, const ts_node *idx, const ts_node *upd, ts_dtype *dt,
                         int *rank, int64_t *shape) {
  char sb[96], su[96], sw[96];
  int64_t want[TS_MAX_RANK];
  int wrank;
  ts_dtype wdt;
  if (infer_gather(who, base, idx, &wdt, &wrank, want)) return -1;
  bool ok = upd->dtype == base->dtype && upd->rank == wrank;
  for (int d = 0; ok && d < wrank; d++) ok = upd->shape[d] == want[d];
  if (!ok)
    return ERR("%s: updates are %s but base %s and indices imply %s%s", who, node_str(upd, su, sizeof su),
               node_str(base, sb, sizeof sb), ts_dtype_name(base->dtype), dims_str(wrank, want, sw, sizeof sw));
  set_like(base, dt, rank, shape);
  return 0;
}

/* ---- fused programs ---- */

static int infer_fused(const ts_graph *g, const char *who, int n_in, const int32_t *in, const ts_attr *at,
                       ts_dtype *dt, int rank, const int64_t *shape) {
  const ts_fused *f = at->fused;
  if (!f || f->n < 1 || !f->ins) return ERR("%s: empty program", who);
  int64_t numel = ts_shape_numel(rank, shape);
  if (at->n_dims > 0) { /* a fused reduction (opt/fuse.c): the program runs over gshape[0 .. axis) */
    int64_t k = ir_fused_results(at, rank, shape); /* stacked: k results in front */
    int lead = rank == at->axis - at->n_dims + 1;
    if (at->axis < 1 || at->axis > TS_MAX_RANK || at->n_dims > at->axis || rank != at->axis - at->n_dims + lead ||
        (at->reduce != TS_REDUCE_SUM && at->reduce != TS_REDUCE_MEAN) || (lead && (k < 2 || k > f->n)))
      return ERR("%s: a fused reduction must be an f32 sum or mean from rank %d to rank %d (over %d dims)", who,
                 at->axis, rank, at->n_dims);
    for (int64_t q = 0; q < k; q++)
      if (f->ins[f->n - 1 - q].dtype != TS_F32)
        return ERR("%s: fused reduction result %lld is not f32", who, (long long)(k - 1 - q));
    int i = 0, j = lead;
    for (int d = 0; d < at->axis; d++) {
      if (i < at->n_dims && at->dims[i] == d) {
        i++;
        continue;
      }
      if (shape[j++] != at->gshape[d]) return ERR("%s: result dim %d differs from operand dim %d", who, j - 1, d);
    }
    if (i != at->n_dims) return ERR("%s: reduced dims must ascend within rank %d", who, at->axis);
    numel = ts_shape_numel(at->axis, at->gshape);
  }
  for (int i = 0; i < n_in; i++) {
    int64_t ni = ts_tensor_numel(g, in[i]);
    bool indexed = false; /* read by a BROADCAST instruction: any numel */
    for (int j = 0; j < f->n && !indexed; j++) indexed = f->ins[j].op == TS_OP_BROADCAST && f->ins[j].a == -i - 1;
    if (ni != numel && ni != 1 && !indexed)
      return ERR("%s: external input %d (%%%d) has %lld elements but the node has %lld (need equal or 1)", who, i,
                 in[i], (long long)ni, (long long)numel);
  }
  for (int j = 0; j < f->n; j++) {
    const ts_fused_instr *ins = &f->ins[j];
    /* an instruction is a fusible op or a splat CONSTANT (0 operands) */
    if (ins->op != TS_OP_CONSTANT && ins->op != TS_OP_BROADCAST && !ir_op_has(ins->op, TS_OPF_FUSIBLE))
      return ERR("%s: instruction %d has non-elementwise op %s", who, j, ir_op_name(ins->op));
    if (ins->op == TS_OP_BROADCAST && (ins->a >= 0 || !(ins->value >= 1)))
      return ERR("%s: instruction %d (broadcast) must read an external input with a stride >= 1", who, j);
    int nops = ir_op_arity(ins->op);
    if (!valid_dtype(ins->dtype)) return ERR("%s: instruction %d has an invalid dtype", who, j);
    int32_t ops[3] = {ins->a, ins->b, ins->c};
    for (int k = 0; k < nops; k++) {
      int32_t v = ops[k];
      if (v >= j) return ERR("%s: instruction %d operand %d refers to instruction %d (not earlier)", who, j, k, v);
      if (v < 0 && -(int64_t)v - 1 >= n_in)
        return ERR("%s: instruction %d operand %d refers to external input %lld but the node has %d", who, j, k,
                   (long long)(-(int64_t)v - 1), n_in);
    }
  }
  *dt = f->ins[f->n - 1].dtype;
  return 0;
}

/* ---- the dispatcher ---- */

int ir_infer(const ts_graph *g, ts_op op, int n_in, const int32_t *in, const ts_attr *attr, ts_dtype *dt,
             int *rank, int64_t *shape) {
  static const ts_attr zero_attr;
  const ts_attr *at = attr ? attr : &zero_attr;
  const char *who = ir_op_name(op);
  char sa[96], sb[96];
  int want = ir_op_arity(op);
  if (want == -2) return ERR("ir_infer: invalid op %d", (int)op);
  if (want >= 0 && n_in != want) return ERR("%s: expects %d operands but got %d", who, want, n_in);
  if (want == TS_ARITY_VARIADIC && (n_in < (op == TS_OP_CONCAT ? 1 : 0)))
    return ERR("%s: needs at least one operand", who);
  for (int i = 0; i < n_in; i++)
    if (!ir_check_tensor(g, in[i], who)) return -1;
  const ts_node *x = n_in > 0 ? ts_node_at(g, in[0]) : NULL;
  const ts_node *y = n_in > 1 ? ts_node_at(g, in[1]) : NULL;
  if (ir_infer_result_given(op)) {
    if (!valid_dtype(*dt)) return ERR("%s: invalid result dtype %d", who, (int)*dt);
    if (check_shape(who, *rank, shape)) return -1;
  }

  /* Every op has a case and there is no default: a new op in ops.def fails
   * the build (-Werror=switch) until its shape rule is written here. */
  switch (op) {
  case TS_OP_NEG: case TS_OP_ABS: case TS_OP_EXP: case TS_OP_LOG: case TS_OP_LOG1P: case TS_OP_TANH:
  case TS_OP_SQRT: case TS_OP_RSQRT: case TS_OP_SIGMOID: case TS_OP_ERF: case TS_OP_GELU:
    return infer_unary(who, op, x, dt, rank, shape);
  case TS_OP_ADD: case TS_OP_SUB: case TS_OP_MUL: case TS_OP_DIV: case TS_OP_MAX: case TS_OP_MIN: case TS_OP_POW:
    return infer_binary(who, op, x, y, dt, rank, shape);
  case TS_OP_INPUT:
  case TS_OP_CONSTANT:
    return 0;
  case TS_OP_IOTA:
    if (*dt == TS_BOOL) return ERR("%s: dtype bool is not supported", who);
    if (at->axis < 0 || at->axis >= *rank) return ERR("%s: dim %d is outside [0, %d)", who, at->axis, *rank);
    return 0;
  case TS_OP_RNG_UNIFORM:
  case TS_OP_RNG_NORMAL:
    if (!ts_dtype_is_float(*dt)) return ERR("%s: dtype %s is not a float dtype", who, ts_dtype_name(*dt));
    if (x->rank != 0 || (x->dtype != TS_I32 && x->dtype != TS_I64))
      return ERR("%s: seed must be a rank-0 i32 or i64 tensor but is %s", who, node_str(x, sa, sizeof sa));
    return 0;
  case TS_OP_CONVERT:
    *rank = x->rank;
    memcpy(shape, x->shape, sizeof x->shape);
    return 0;
  case TS_OP_COMPARE:
    if (check_same(who, "lhs", x, "rhs", y)) return -1;
    if ((unsigned)at->cmp > TS_CMP_GE) return ERR("%s: unknown comparison %d", who, (int)at->cmp);
    set_like(x, dt, rank, shape);
    *dt = TS_BOOL;
    return 0;
  case TS_OP_SELECT: {
    const ts_node *z = ts_node_at(g, in[2]);
    if (x->dtype != TS_BOOL) return ERR("%s: predicate must be bool but is %s", who, node_str(x, sa, sizeof sa));
    if (!same_shape(x, y))
      return ERR("%s: predicate is %s but on_true is %s (shapes must be equal in the IR)", who,
                 node_str(x, sa, sizeof sa), node_str(y, sb, sizeof sb));
    if (check_same(who, "on_true", y, "on_false", z)) return -1;
    set_like(y, dt, rank, shape);
    return 0;
  }
  case TS_OP_BROADCAST:
    if (*dt != x->dtype)
      return ERR("%s: result dtype %s differs from operand %s", who, ts_dtype_name(*dt), node_str(x, sa, sizeof sa));
    return infer_broadcast(who, x, at, *rank, shape);
  case TS_OP_RESHAPE: {
    int64_t nx = ts_shape_numel(x->rank, x->shape), ny = ts_shape_numel(*rank, shape);
    if (*dt != x->dtype)
      return ERR("%s: result dtype %s differs from operand %s", who, ts_dtype_name(*dt), node_str(x, sa, sizeof sa));
    if (nx != ny)
      return ERR("%s: cannot reshape %s (%lld elements) to %s (%lld elements)", who, node_str(x, sa, sizeof sa),
                 (long long)nx, dims_str(*rank, shape, sb, sizeof sb), (long long)ny);
    return 0;
  }
  case TS_OP_TRANSPOSE:
    *dt = x->dtype;
    return infer_transpose(who, x, at, rank, shape);
  case TS_OP_SLICE:
    *dt = x->dtype;
    return infer_slice(who, x, at, rank, shape);
  case TS_OP_PAD:
    *dt = x->dtype;
    return infer_pad(who, x, at, rank, shape);
  case TS_OP_CONCAT:
    return infer_concat(g, who, n_in, in, at, dt, rank, shape);
  case TS_OP_DOT:
    return infer_dot(who, x, y, &at->dot, dt, rank, shape);
  case TS_OP_CONV:
    if (need_rank4(who, "input", x) || need_rank4(who, "weight", y)) return -1;
    if (conv_out(who, x->dtype, y->dtype, x->shape, y->shape, &at->conv, shape)) return -1;
    *dt = x->dtype;
    *rank = 4;
    return 0;
  case TS_OP_CONV_BWD_DATA: { /* x = dy, y = w; result = the forward input's shape */
    int64_t o[4];
    if (need_rank4(who, "dy", x) || need_rank4(who, "weight", y)) return -1;
    if (*rank != 4) return ERR("%s: input shape must be rank 4 but is rank %d", who, *rank);
    if (*dt != x->dtype) return ERR("%s: result dtype %s differs from dy %s", who, ts_dtype_name(*dt), ts_dtype_name(x->dtype));
    if (conv_out(who, *dt, y->dtype, shape, y->shape, &at->conv, o)) return -1;
    return check_dims_equal(who, "dy", x->shape, o);
  }
  case TS_OP_CONV_BWD_FILTER: { /* x = x, y = dy; result = the weight's shape */
    int64_t o[4];
    if (need_rank4(who, "input", x) || need_rank4(who, "dy", y)) return -1;
    if (*rank != 4) return ERR("%s: weight shape must be rank 4 but is rank %d", who, *rank);
    /* one dtype, or bf16 x and dy with an f32 result (autocast's filter
     * gradient, accumulated and written in f32) */
    if ((*dt != x->dtype && !(x->dtype == TS_BF16 && *dt == TS_F32)) || y->dtype != x->dtype)
      return ERR("%s: input %s, dy %s and result %s must have one dtype (or bf16 inputs, f32 result)", who,
                 ts_dtype_name(x->dtype), ts_dtype_name(y->dtype), ts_dtype_name(*dt));
    if (conv_out(who, x->dtype, x->dtype, x->shape, shape, &at->conv, o)) return -1;
    return check_dims_equal(who, "dy", y->shape, o);
  }
  case TS_OP_MAXPOOL:
  case TS_OP_AVGPOOL:
    if (need_rank4(who, "input", x)) return -1;
    if (pool_out(who, x, x->shape, &at->pool, shape)) return -1;
    *dt = x->dtype;
    *rank = 4;
    return 0;
  case TS_OP_MAXPOOL_GRAD: { /* x, dy -> x shape */
    int64_t o[4];
    if (need_rank4(who, "input", x) || need_rank4(who, "dy", y)) return -1;
    if (y->dtype != x->dtype)
      return ERR("%s: input is %s but dy is %s", who, node_str(x, sa, sizeof sa), node_str(y, sb, sizeof sb));
    if (pool_out(who, x, x->shape, &at->pool, o) || check_dims_equal(who, "dy", y->shape, o)) return -1;
    set_like(x, dt, rank, shape);
    return 0;
  }
  case TS_OP_AVGPOOL_GRAD: { /* dy -> given x shape */
    int64_t o[4];
    if (need_rank4(who, "dy", x)) return -1;
    if (*rank != 4) return ERR("%s: input shape must be rank 4 but is rank %d", who, *rank);
    if (*dt != x->dtype) return ERR("%s: result dtype %s differs from dy %s", who, ts_dtype_name(*dt), ts_dtype_name(x->dtype));
    if (pool_out(who, x, shape, &at->pool, o)) return -1;
    return check_dims_equal(who, "dy", x->shape, o);
  }
  case TS_OP_LAYERNORM: case TS_OP_LAYERNORM_GRAD: case TS_OP_LAYERNORM_DGAMMA:
    return infer_layernorm(g, op, who, in, at, dt, rank, shape);
  case TS_OP_ATTENTION: case TS_OP_ATTENTION_GRAD:
    return infer_attention(g, who, n_in, in, at, dt, rank, shape);
  case TS_OP_REDUCE:
    return infer_reduce(who, x, at, dt, rank, shape);
  case TS_OP_GATHER:
    return infer_gather(who, x, y, dt, rank, shape);
  case TS_OP_SCATTER_ADD:
    return infer_scatter(who, x, y, ts_node_at(g, in[2]), dt, rank, shape);
  case TS_OP_FUSED:
    return infer_fused(g, who, n_in, in, at, dt, *rank, shape);
  case TS_OP_ALL_REDUCE: case TS_OP_ALL_GATHER: case TS_OP_REDUCE_SCATTER: case TS_OP_ALL_TO_ALL:
  case TS_OP_COLLECTIVE_PERMUTE:
    if ((!at->coll || at->coll->n < 1) && at->n_dims < 1) return ERR("%s: has no device group", who);
    if (*dt != x->dtype)
      return ERR("%s: result dtype %s differs from operand %s", who, ts_dtype_name(*dt), node_str(x, sa, sizeof sa));
    if (*rank != x->rank) return ERR("%s: result rank %d differs from operand %s", who, *rank, node_str(x, sa, sizeof sa));
    return 0;
  case TS_OP_COUNT:
    break;
  }
  return ERR("ir_infer: unhandled op %s", who);
}
