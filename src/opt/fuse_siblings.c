/* fuse_siblings.c — sibling reductions read in one pass.
 *
 * Batch norm's gradient sums dy and dy * xc over the same dims of the same
 * shape (ad/bn_adjoint.c); after grouping (fuse.c) they are two reductions
 * that each read dy (ReLU's masked gradient, written by its own group):
 * two passes over it. Reductions that qualify here become one stacked fused
 * reduction (ir_fused_results: k results, the program's last k
 * instructions), which kernels/fused.c runs range by range, each result as
 * the program it had alone, so the shared input is read from memory once and
 * every sum keeps its bits (the same program folded in the same order).
 *
 * Siblings: fused reductions (fuse.c's groups rooted at a sum or mean) and
 * plain sums or means of an f32 value (a one-instruction program: an f32
 * convert of it), with the same kind, dims and operand shape, that read a
 * full-size input in common. A later one joins an earlier leader when all its
 * inputs come before the leader, where the stacked node is emitted; each
 * result's users read it through a slice (one row of the stack). */
#include <stdlib.h>
#include <string.h>

#include "opt/fuse_internal.h"

static bool same_reduction(const ts_graph *g, int a, int b) {
  const ts_node *x = &g->nodes[a], *y = &g->nodes[b];
  const ts_node *xo = &g->nodes[x->in[0]], *yo = &g->nodes[y->in[0]];
  return x->attr.reduce == y->attr.reduce && x->attr.n_dims == y->attr.n_dims &&
         !memcmp(x->attr.dims, y->attr.dims, sizeof x->attr.dims) && xo->rank == yo->rank &&
         !memcmp(xo->shape, yo->shape, (size_t)xo->rank * sizeof *xo->shape) && x->rank == y->rank &&
         !memcmp(x->shape, y->shape, (size_t)x->rank * sizeof *x->shape);
}

/* A plain reduction t gets the program convert(in0, f32) over its operand. */
static int plain_program(const ts_graph *g, fuse_state *s, int t) {
  ts_fused *f = malloc(sizeof *f);
  ts_fused_instr *ins = calloc(1, sizeof *ins);
  int32_t *ext = malloc(sizeof *ext);
  if (!f || !ins || !ext) {
    free(f), free(ins), free(ext);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory merging sibling reductions");
  }
  ins->op = TS_OP_CONVERT, ins->dtype = TS_F32, ins->a = -1;
  f->n = 1, f->ins = ins;
  ext[0] = g->nodes[t].in[0];
  s->prog[t] = f, s->ext[t] = ext, s->n_ext[t] = 1;
  return 0;
}

/* Whether candidate b reads a full-size input that one of leader a's members reads. */
static bool shares_input(const ts_graph *g, const fuse_state *s, int a, int b) {
  int64_t numel = ts_tensor_numel(g, g->nodes[b].in[0]);
  for (int m = 0; m < FUSE_MAX_SIBLINGS && s->sib_members[a][m] >= 0; m++) {
    int am = s->sib_members[a][m];
    for (int i = 0; i < s->n_ext[am]; i++)
      for (int j = 0; j < s->n_ext[b]; j++)
        if (s->ext[am][i] == s->ext[b][j] && ts_tensor_numel(g, s->ext[b][j]) == numel) return true;
  }
  return false;
}

static bool inputs_before(const fuse_state *s, int b, int lead) {
  for (int j = 0; j < s->n_ext[b]; j++)
    if (s->ext[b][j] >= lead) return false;
  return true;
}

int fuse_find_siblings(const ts_graph *g, const opt_users *u, fuse_state *s) {
  (void)u;
  int nn = g->n_nodes;
  for (int t = 0; t < nn; t++) { /* candidates: fused reductions and plain ones */
    for (int m = 0; m < FUSE_MAX_SIBLINGS; m++) s->sib_members[t][m] = -1;
    if (g->nodes[t].op != TS_OP_REDUCE || !fuse_reducible(g, t) || g->nodes[t].rank >= TS_MAX_RANK) continue;
    if (s->group[t] < 0 && plain_program(g, s, t) < 0) return -1;
    if (s->group[t] < 0 || s->group[t] == t) s->sib_q[t] = -2; /* a candidate */
  }
  for (int a = 0; a < nn; a++) {
    if (s->sib_q[a] != -2 || s->sib[a] >= 0) continue;
    int k = 1;
    s->sib_members[a][0] = a;
    for (int b = a + 1; b < nn && k < FUSE_MAX_SIBLINGS; b++)
      if (s->sib_q[b] == -2 && s->sib[b] < 0 && same_reduction(g, a, b) && inputs_before(s, b, a) &&
          shares_input(g, s, a, b))
        s->sib_members[a][k++] = b, s->sib[b] = a;
    if (k < 2) continue;
    s->sib[a] = a;
    for (int m = 0; m < k; m++) {
      int t = s->sib_members[a][m];
      s->sib_q[t] = m;
      if (s->group[t] < 0) s->fused_nodes++;
    }
  }
  return 0;
}

/* Index of node e in ext[0 .. *n), appended if absent. */
static int ext_index(int32_t *ext, int *n, int32_t e) {
  for (int i = 0; i < *n; i++)
    if (ext[i] == e) return i;
  ext[*n] = e;
  return (*n)++;
}

/* The members' programs stacked: every member's instructions but its result,
 * member by member, then the k results in member order; inputs merged. */
static ts_fused *stack_programs(const fuse_state *s, const int32_t *mem, int k, int32_t *ext, int *n_ext) {
  int total = 0;
  for (int m = 0; m < k; m++) total += s->prog[mem[m]]->n;
  ts_fused *f = malloc(sizeof *f);
  ts_fused_instr *ins = malloc((size_t)total * sizeof *ins);
  if (!f || !ins) {
    free(f), free(ins);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory merging sibling reductions");
    return NULL;
  }
  *n_ext = 0;
  for (int m = 0, pos = 0; m < k; m++) {
    const ts_fused *p = s->prog[mem[m]];
    int base = pos;
    for (int i = 0; i < p->n; i++) {
      ts_fused_instr I = p->ins[i];
      int32_t *ops[3] = {&I.a, &I.b, &I.c};
      for (int o = 0; o < ir_op_arity(I.op) && o < 3; o++)
        *ops[o] = *ops[o] >= 0 ? base + *ops[o] : -ext_index(ext, n_ext, s->ext[mem[m]][-*ops[o] - 1]) - 1;
      ins[i == p->n - 1 ? total - k + m : pos++] = I;
    }
  }
  f->n = total, f->ins = ins;
  return f;
}

/* The stacked node of leader `lead` (its members' results in front). */
static ts_tensor stacked_node(ts_graph *dst, const ts_graph *src, int lead, const int32_t *map, fuse_state *s) {
  const int32_t *mem = s->sib_members[lead];
  int k = 0, cap = 0;
  while (k < FUSE_MAX_SIBLINGS && mem[k] >= 0) cap += s->n_ext[mem[k++]];
  int32_t ext[cap], in[cap];
  int ne = 0;
  ts_attr attr;
  memset(&attr, 0, sizeof attr);
  if (!(attr.fused = stack_programs(s, mem, k, ext, &ne))) return TS_NONE;
  for (int j = 0; j < ne; j++) in[j] = map[ext[j]];
  const ts_node *n = &src->nodes[lead], *x = &src->nodes[n->in[0]];
  int64_t shape[TS_MAX_RANK];
  shape[0] = k;
  memcpy(shape + 1, n->shape, (size_t)n->rank * sizeof *shape);
  attr.reduce = n->attr.reduce;
  attr.n_dims = n->attr.n_dims;
  memcpy(attr.dims, n->attr.dims, sizeof attr.dims);
  attr.axis = x->rank;
  memcpy(attr.gshape, x->shape, sizeof attr.gshape);
  return ir_append(dst, TS_OP_FUSED, n->dtype, n->rank + 1, shape, ne, in, &attr);
}

ts_tensor fuse_sibling_node(ts_graph *dst, const ts_graph *src, int id, const int32_t *map, fuse_state *s) {
  int lead = s->sib[id];
  const ts_node *n = &src->nodes[id];
  if (id == lead && (s->sib_dst[lead] = stacked_node(dst, src, lead, map, s)) < 0) return TS_NONE;
  int64_t start[TS_MAX_RANK] = {0}, limit[TS_MAX_RANK];
  start[0] = s->sib_q[id], limit[0] = s->sib_q[id] + 1;
  memcpy(limit + 1, n->shape, (size_t)n->rank * sizeof *limit);
  ts_tensor row = ts_slice(dst, s->sib_dst[lead], start, limit, NULL);
  return row < 0 ? TS_NONE : ts_reshape(dst, row, n->rank, n->shape);
}

void fuse_siblings_free(fuse_state *s, int nn) {
  (void)nn;
  free(s->sib), free(s->sib_q), free(s->sib_dst), free(s->sib_members);
}
