/* print.c — the stable text form of a graph (one node per line, then the
 * outputs) and its 64-bit FNV-1a hash. The same graph always prints the same
 * text, so the hash keys the compile cache. Example:
 *   %0 = input "x" #0 : f32[128,784]
 *   %3 = dot_general(%0, %2) lhs_contract=[1] rhs_contract=[0] : f32[128,512]
 *   outputs: %3, %5 (alias input #1) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "tessel/spmd.h" /* sharding annotations */
#include "util/half.h"
#include "util/strbuf.h"

static void print_ints(ts_strbuf *sb, const char *key, int n, const int *v) {
  sb_printf(sb, " %s=[", key);
  for (int i = 0; i < n; i++) sb_printf(sb, i ? ",%d" : "%d", v[i]);
  sb_printf(sb, "]");
}

static void print_i64s(ts_strbuf *sb, const char *key, int n, const int64_t *v) {
  sb_printf(sb, " %s=[", key);
  for (int i = 0; i < n; i++) sb_printf(sb, i ? ",%lld" : "%lld", (long long)v[i]);
  sb_printf(sb, "]");
}

static const char *cmp_name(ts_cmp c) {
  static const char *const names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  return (unsigned)c <= TS_CMP_GE ? names[c] : "invalid-cmp";
}

static const char *reduce_name(ts_reduce_kind k) {
  static const char *const names[] = {"sum", "max", "min", "mean"};
  return (unsigned)k <= TS_REDUCE_MEAN ? names[k] : "invalid-reduce";
}

static uint64_t fnv1a(const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

static void print_element(ts_strbuf *sb, ts_dtype dt, const void *data, int64_t i) {
  const char *p = (const char *)data + (size_t)i * ts_dtype_size(dt);
  uint16_t h;
  switch (dt) {
  case TS_F32: { float v; memcpy(&v, p, 4); sb_printf(sb, "%.9g", (double)v); break; }
  case TS_F64: { double v; memcpy(&v, p, 8); sb_printf(sb, "%.17g", v); break; }
  case TS_BF16: memcpy(&h, p, 2); sb_printf(sb, "%.9g", (double)ts_bf16_to_f32(h)); break;
  case TS_F16: memcpy(&h, p, 2); sb_printf(sb, "%.9g", (double)ts_f16_to_f32(h)); break;
  case TS_I32: { int32_t v; memcpy(&v, p, 4); sb_printf(sb, "%d", v); break; }
  case TS_I64: { int64_t v; memcpy(&v, p, 8); sb_printf(sb, "%lld", (long long)v); break; }
  case TS_U8: sb_printf(sb, "%u", (unsigned)*(const uint8_t *)p); break;
  case TS_BOOL: sb_printf(sb, "%s", *p ? "true" : "false"); break;
  default: sb_printf(sb, "?"); break;
  }
}

static void print_conv(ts_strbuf *sb, const ts_conv_params *c) {
  print_ints(sb, "stride", 2, c->stride);
  print_ints(sb, "pad_lo", 2, c->pad_lo);
  print_ints(sb, "pad_hi", 2, c->pad_hi);
  print_ints(sb, "dilation", 2, c->dilation);
  sb_printf(sb, " groups=%d", c->groups);
  if (c->layout == TS_LAYOUT_NHWC) sb_printf(sb, " nhwc");
}

static void print_pool(ts_strbuf *sb, const ts_pool_params *p) {
  print_ints(sb, "kernel", 2, p->kernel);
  print_ints(sb, "stride", 2, p->stride);
  print_ints(sb, "pad", 2, p->pad);
  if (p->layout == TS_LAYOUT_NHWC) sb_printf(sb, " nhwc");
}

static void print_fused_operand(ts_strbuf *sb, int32_t v) {
  if (v >= 0) sb_printf(sb, "i%d", v);
  else sb_printf(sb, "in%lld", (long long)(-(int64_t)v - 1));
}

static void print_fused(ts_strbuf *sb, const ts_fused *f) {
  if (!f) return;
  for (int j = 0; j < f->n; j++) {
    const ts_fused_instr *ins = &f->ins[j];
    sb_printf(sb, "\n  i%d = %s", j, ir_op_name(ins->op));
    int nops = ir_op_arity(ins->op);
    int32_t ops[3] = {ins->a, ins->b, ins->c};
    if (nops) {
      sb_printf(sb, "(");
      for (int k = 0; k < nops; k++) {
        if (k) sb_printf(sb, ", ");
        print_fused_operand(sb, ops[k]);
      }
      sb_printf(sb, ")");
    }
    if (ins->op == TS_OP_CONSTANT) sb_printf(sb, " %.17g", ins->value);
    if (ins->op == TS_OP_BROADCAST) sb_printf(sb, " inner=%.17g", ins->value);
    if (ins->op == TS_OP_COMPARE) sb_printf(sb, " cmp=%s", cmp_name(ins->cmp));
    sb_printf(sb, " : %s", ts_dtype_name(ins->dtype));
  }
}

static void print_collective(ts_strbuf *sb, const ts_node *n) {
  const ts_attr *a = &n->attr;
  if (n->op == TS_OP_ALL_REDUCE || n->op == TS_OP_REDUCE_SCATTER) sb_printf(sb, " kind=%s", reduce_name(a->reduce));
  if (n->op != TS_OP_ALL_REDUCE && n->op != TS_OP_COLLECTIVE_PERMUTE) sb_printf(sb, " axis=%d", a->axis);
  if (n->op == TS_OP_ALL_TO_ALL) sb_printf(sb, " concat=%d", a->dims[0]);
  if (!a->coll && a->n_dims) print_ints(sb, "mesh_axes", a->n_dims, a->dims);
  if (a->coll) {
    int k = n->op == TS_OP_COLLECTIVE_PERMUTE ? 2 * a->coll->n : a->coll->n;
    sb_printf(sb, n->op == TS_OP_COLLECTIVE_PERMUTE ? " pairs=[" : " group=[");
    for (int i = 0; i < k; i++) sb_printf(sb, i ? ",%d" : "%d", a->coll->ids[i]);
    sb_printf(sb, "]");
  }
}

/* The attributes the op's table row says it uses (r = operand rank, the
 * rank of slice and pad attributes). The fused program comes last, after
 * the type (print_node). */
static void print_attrs(ts_strbuf *sb, const ts_node *n, int r) {
  const ts_attr *a = &n->attr;
  switch (ir_op_attr_kind(n->op)) {
  case TS_ATTRS_INPUT:
    sb_printf(sb, " \"%s\" #%d", n->name ? n->name : "", a->input_index);
    break;
  case TS_ATTRS_CONSTANT:
    if (!n->data) {
      sb_printf(sb, " splat=%.17g", a->value);
    } else {
      int64_t numel = ts_shape_numel(n->rank, n->shape);
      sb_printf(sb, " dense fnv=%016llx",
                (unsigned long long)fnv1a(n->data, (size_t)numel * ts_dtype_size(n->dtype)));
      if (numel <= 8) {
        sb_printf(sb, " values=[");
        for (int64_t i = 0; i < numel; i++) {
          if (i) sb_printf(sb, ",");
          print_element(sb, n->dtype, n->data, i);
        }
        sb_printf(sb, "]");
      }
    }
    break;
  case TS_ATTRS_AXIS: sb_printf(sb, " axis=%d", a->axis); break;
  case TS_ATTRS_RNG:
    sb_printf(sb, " key=%llu", (unsigned long long)a->key);
    if (a->global) {
      print_i64s(sb, "goffset", n->rank, a->goffset);
      print_i64s(sb, "gshape", n->rank, a->gshape);
    }
    break;
  case TS_ATTRS_CMP: sb_printf(sb, " cmp=%s", cmp_name(a->cmp)); break;
  case TS_ATTRS_VALUE: sb_printf(sb, " value=%.17g", a->value); break;
  case TS_ATTRS_DIMS: print_ints(sb, "dims", a->n_dims, a->dims); break;
  case TS_ATTRS_PERM: print_ints(sb, "perm", a->n_dims, a->dims); break;
  case TS_ATTRS_SLICE:
    print_i64s(sb, "start", r, a->start);
    print_i64s(sb, "limit", r, a->limit);
    print_i64s(sb, "stride", r, a->stride);
    break;
  case TS_ATTRS_PAD:
    print_i64s(sb, "lo", r, a->start);
    print_i64s(sb, "hi", r, a->limit);
    sb_printf(sb, " value=%.17g", a->value);
    break;
  case TS_ATTRS_DOT:
    if (a->dot.n_batch) {
      print_ints(sb, "lhs_batch", a->dot.n_batch, a->dot.lhs_batch);
      print_ints(sb, "rhs_batch", a->dot.n_batch, a->dot.rhs_batch);
    }
    print_ints(sb, "lhs_contract", a->dot.n_contract, a->dot.lhs_contract);
    print_ints(sb, "rhs_contract", a->dot.n_contract, a->dot.rhs_contract);
    break;
  case TS_ATTRS_CONV: print_conv(sb, &a->conv); break;
  case TS_ATTRS_POOL: print_pool(sb, &a->pool); break;
  case TS_ATTRS_REDUCE:
    sb_printf(sb, " kind=%s", reduce_name(a->reduce));
    print_ints(sb, "dims", a->n_dims, a->dims);
    break;
  case TS_ATTRS_COLLECTIVE: print_collective(sb, n); break;
  case TS_ATTRS_FUSED: /* a fused reduction (opt/fuse.c): the program's operand shape and the reduce */
    if (a->n_dims > 0) {
      sb_printf(sb, " kind=%s", reduce_name(a->reduce));
      print_ints(sb, "dims", a->n_dims, a->dims);
      print_i64s(sb, "of", a->axis, a->gshape);
    }
    break;
  case TS_ATTRS_NONE: break;
  }
}

static void print_node(ts_strbuf *sb, const ts_graph *g, int id) {
  const ts_node *n = ts_node_at(g, id);
  sb_printf(sb, "%%%d = %s", id, ir_op_name(n->op));
  if (n->n_in) {
    sb_printf(sb, "(");
    for (int k = 0; k < n->n_in; k++) sb_printf(sb, k ? ", %%%d" : "%%%d", n->in[k]);
    sb_printf(sb, ")");
  }
  print_attrs(sb, n, n->n_in ? ts_node_at(g, n->in[0])->rank : 0);
  char s[128];
  sb_printf(sb, " : %s", ir_shape_str(n, s, sizeof s));
  if (n->manual) sb_printf(sb, " manual"); /* a per-device value of a ts_shard_map region */
  if (n->sharding) {
    char *t = ts_sharding_to_string(n->sharding);
    sb_printf(sb, " sharding=%s", t ? t : "?");
    free(t);
  }
  if (ir_op_attr_kind(n->op) == TS_ATTRS_FUSED) print_fused(sb, n->attr.fused);
  sb_printf(sb, "\n");
}

char *ts_graph_to_string(const ts_graph *g) {
  if (!g) {
    set_error("graph_to_string: graph is NULL");
    return NULL;
  }
  ts_strbuf sb = {0};
  for (int i = 0; i < g->n_nodes; i++) print_node(&sb, g, i);
  sb_printf(&sb, "outputs:");
  for (int o = 0; o < g->n_outputs; o++) {
    sb_printf(&sb, o ? ", %%%d" : " %%%d", g->outputs[o]);
    if (g->alias && g->alias[o] >= 0) sb_printf(&sb, " (alias input #%d)", g->alias[o]);
  }
  sb_printf(&sb, "\n");
  return sb_finish(&sb, "graph_to_string");
}

uint64_t ts_graph_hash(const ts_graph *g) {
  char *s = ts_graph_to_string(g);
  if (!s) return 0;
  uint64_t h = fnv1a(s, strlen(s));
  free(s);
  return h;
}
