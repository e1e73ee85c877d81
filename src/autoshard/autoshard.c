/* autoshard.c — auto-sharding's driver: options, the problem (problem.c)
 * solved (solve.c), the prediction, the annotations the partitioner then
 * follows, and the explanation. */
#include <glpk.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "autoshard/as_solve.h"
#include "spmd/partition.h" /* spmd_propagate */
/* ---- prediction from per-node layouts and strategies ---- */

/* lay[v]: the layout node v is kept in; pick[v]: its strategy. */
static void predict(const as_ctx *c, const uint8_t (*lay)[TS_MAX_RANK], const int *pick, ts_auto_shard_info *info) {
  const ts_graph *g = c->g;
  double comp = 0, comm = 0, bytes = 0;
  for (int v = 0; v < g->n_nodes; v++) {
    const ts_node *nd = &g->nodes[v];
    const as_strat *s = &c->nodes[v].s[pick[v]];
    comp += s->compute;
    comm += s->cost - s->compute;
    bytes += s->comm_bytes;
    for (int k = 0; k < nd->n_in; k++)
      comm += as_reshard_cost(c, lay[nd->in[k]], as_need(s, k), &g->nodes[nd->in[k]], &bytes);
    if (!as_lay_eq(s->out, lay[v], nd->rank)) comm += as_reshard_cost(c, s->out, lay[v], nd, &bytes);
  }
  for (int k = 0; k < g->n_outputs; k++) {
    int a = g->alias ? g->alias[k] : -1;
    if (a >= 0) comm += as_reshard_cost(c, lay[g->outputs[k]], lay[g->inputs[a]], &g->nodes[g->outputs[k]], &bytes);
  }
  /* peak: inputs always, every other value from its definition to its last use */
  double base = 0, live = 0, peak = 0;
  int n = g->n_nodes;
  double *drop = calloc((size_t)n + 2, sizeof *drop);
  for (int v = 0; v < n; v++) {
    double b = as_bytes(&g->nodes[v]) / (double)as_layout_tiles(c, lay[v], g->nodes[v].rank);
    if (g->nodes[v].op == TS_OP_INPUT) {
      base += b;
      continue;
    }
    live += b;
    if (live > peak) peak = live;
    if (drop) drop[c->last_use[v] < n ? c->last_use[v] : n] += b;
    if (drop) live -= drop[v], drop[v] = 0;
  }
  free(drop);
  info->compute_s = comp;
  info->comm_s = comm;
  info->step_s = comp + comm;
  info->comm_bytes_per_device = bytes;
  info->peak_bytes_per_device = base + peak;
}

/* Per-node layouts and strategies of a leader choice. */
static int expand(const as_ctx *c, const int *choice, uint8_t (**lay)[TS_MAX_RANK], int **pick) {
  int n = c->g->n_nodes;
  *lay = calloc((size_t)n + 1, sizeof **lay);
  *pick = calloc((size_t)n + 1, sizeof **pick);
  if (!*lay || !*pick) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  for (int v = 0; v < n; v++) {
    (*pick)[v] = choice[c->nodes[v].leader];
    memcpy((*lay)[v], c->nodes[v].s[(*pick)[v]].out, TS_MAX_RANK);
  }
  return 0;
}

static void opts_check_defaults(const ts_auto_shard_options *o, ts_auto_shard_options *d) {
  *d = *o;
  if (d->time_limit_s <= 0) d->time_limit_s = 10;
}

static int check_opts(const ts_graph *g, const ts_auto_shard_options *o) {
  if (!g) return set_error("auto_shard: graph is NULL");
  if (!o || !o->mesh) return set_error("auto_shard: options.mesh is required (the mesh to shard over)");
  if (o->memory_limit_bytes < 0) return set_error("auto_shard: memory_limit_bytes %g is negative", o->memory_limit_bytes);
  if (g->manual_depth > 0) return set_error("auto_shard: the graph is inside a shard_map body");
  for (int v = 0; v < g->n_nodes; v++)
    if (g->nodes[v].manual || ir_op_is_collective(g->nodes[v].op) || g->nodes[v].op == TS_OP_FUSED)
      return set_error("auto_shard: node %%%d (%s) is a manual or compiled node; auto-sharding takes a plain global "
                       "graph", v, ir_op_name(g->nodes[v].op));
  return 0;
}

static void append_lay(spmd_str *s, const as_ctx *c, const uint8_t *lay, int rank) {
  ts_partition_spec sp;
  as_mask_to_spec(c, lay, rank, &sp);
  char buf[160];
  spmd_str_printf(s, "%s", spmd_spec_str(c->m, &sp, buf, sizeof buf));
}

static char *explain_text(const as_prob *p, const adjacency *a, const int *choice, const ts_auto_shard_info *info,
                          const char *how) {
  const as_ctx *c = &p->c;
  const ts_graph *g = c->g;
  spmd_str s = {0};
  spmd_str_printf(&s, "auto-sharding on %lld devices: %s, %d nodes -> %d variables (%d nodes share a repeated "
                      "block's), %d edges (after elimination: %d variables, %d edges), %d ILP columns, solved in "
                      "%.3f s\n",
                  (long long)c->m->ndevices, how, g->n_nodes, p->n_leaders, c->n_tied, c->n_edges, info->nodes,
                  info->edges, info->variables, info->solve_s);
  spmd_str_printf(&s, "predicted per device: step %.3f ms = compute %.3f ms + communication %.3f ms (%.0f bytes "
                      "sent), peak %.0f bytes\n", 1e3 * info->step_s, 1e3 * info->compute_s, 1e3 * info->comm_s,
                  info->comm_bytes_per_device, info->peak_bytes_per_device);
  spmd_str_printf(&s, "inputs:\n");
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    const ts_node *nd = &g->nodes[v];
    char sh[96];
    const as_strat *st = &c->nodes[v].s[choice[c->nodes[v].leader]];
    spmd_str_printf(&s, "  %-28s %-20s ", nd->name ? nd->name : "?", ir_shape_str(nd, sh, sizeof sh));
    append_lay(&s, c, st->out, nd->rank);
    spmd_str_printf(&s, "  %.0f bytes/device%s\n", st->mem, nd->sharding ? " (user-marked)" : "");
  }
  /* the largest variables: chosen vs runner-up (the others fixed) */
  int top[5], nt = 0;
  for (int k = 0; k < p->n_leaders; k++) {
    int L = p->leaders[k];
    if (c->nodes[L].ns < 2) continue;
    if (nt == 5 && as_bytes(&g->nodes[L]) <= as_bytes(&g->nodes[top[4]])) continue; /* full: not bigger */
    int pos = nt < 5 ? nt++ : 4;
    top[pos] = L;
    for (int q = pos; q > 0 && as_bytes(&g->nodes[top[q]]) > as_bytes(&g->nodes[top[q - 1]]); q--) {
      int t = top[q];
      top[q] = top[q - 1], top[q - 1] = t;
    }
  }
  spmd_str_printf(&s, "largest tensors (chosen vs runner-up, the rest of the plan fixed):\n");
  for (int q = 0; q < nt; q++) {
    int L = top[q];
    const ts_node *nd = &g->nodes[L];
    char sh[96];
    double cur = as_local_cost(p, a, L, choice[L], choice, NULL), best = INFINITY;
    int bi = -1;
    for (int i = 0; i < c->nodes[L].ns; i++) {
      if (i == choice[L]) continue;
      double t = as_local_cost(p, a, L, i, choice, NULL);
      if (t < best) best = t, bi = i;
    }
    spmd_str_printf(&s, "  %%%d %s %s%s%s: ", L, ir_op_name(nd->op), ir_shape_str(nd, sh, sizeof sh),
                    nd->name ? " " : "", nd->name ? nd->name : "");
    append_lay(&s, c, c->nodes[L].s[choice[L]].out, nd->rank);
    spmd_str_printf(&s, " %.4f ms", 1e3 * cur);
    if (bi >= 0) {
      spmd_str_printf(&s, "; runner-up ");
      append_lay(&s, c, c->nodes[L].s[bi].out, nd->rank);
      if (c->nodes[L].s[bi].partial) spmd_str_printf(&s, "+partial");
      spmd_str_printf(&s, " %.4f ms (+%.4f)", 1e3 * best, 1e3 * (best - cur));
    }
    spmd_str_printf(&s, "\n");
  }
  return spmd_str_take(&s);
}

/* Devices a layout (spec) and the partial-sum axes split a node's work over. */
static int64_t spec_split(const ts_mesh *m, const ts_partition_spec *sp, uint32_t partial) {
  int64_t t = spmd_total_tiles(m, sp);
  for (int a = 0; a < m->rank; a++)
    if (partial & (1u << a)) t *= m->shape[a];
  return t;
}

/* Appends to *explain, for the marked graph g, how many dot_generals the
 * partitioner splits over as many devices as the plan (their per-device
 * FLOPs as priced), and each one it splits less (what made the GPT's 2x2
 * program 1.3x its plan: a result dim cleared, an operand gathered). */
static int explain_dots(const as_ctx *c, const ts_graph *g, const int *pick, char **explain) {
  int n = g->n_nodes, dots = 0, same = 0;
  ts_partition_spec *W = calloc((size_t)n + 1, sizeof *W);
  if (!W) return set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
  if (spmd_propagate(g, c->m, W, NULL) < 0) {
    free(W);
    return -1;
  }
  spmd_str s = {0};
  spmd_str_printf(&s, "%s", *explain);
  spmd_str lines = {0};
  for (int v = 0; v < n; v++) {
    if (g->nodes[v].op != TS_OP_DOT) continue;
    const as_strat *st = &c->nodes[v].s[pick[v]];
    ts_partition_spec out, sp[2];
    uint32_t partial;
    as_mask_to_spec(c, st->out, g->nodes[v].rank, &out);
    int64_t plan = spec_split(c->m, &out, st->partial);
    spmd_dot_specs(g, W, v, sp, &out, &partial);
    int64_t low = spec_split(c->m, &out, partial);
    dots++;
    if (low >= plan) {
      same++;
      continue;
    }
    char sh[96], b0[128], b1[128];
    spmd_str_printf(&lines, "  %%%d dot_general %s: planned over %lld devices, lowered over %lld (reads %s, %s)\n", v,
                    ir_shape_str(&g->nodes[v], sh, sizeof sh), (long long)plan, (long long)low,
                    spmd_spec_str(c->m, &sp[0], b0, sizeof b0), spmd_spec_str(c->m, &sp[1], b1, sizeof b1));
  }
  spmd_str_printf(&s, "dot_generals the partitioner splits as planned: %d of %d\n", same, dots);
  char *l = spmd_str_take(&lines);
  if (l) spmd_str_printf(&s, "%s", l);
  free(l);
  free(W);
  free(*explain);
  *explain = spmd_str_take(&s);
  return *explain ? 0 : set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
}

int autoshard_annotate(ts_graph *g, const ts_auto_shard_options *o_in, ts_auto_shard_info *info, char **explain) {
  if (explain) *explain = NULL;
  if (check_opts(g, o_in) < 0) return -1;
  ts_auto_shard_options o;
  opts_check_defaults(o_in, &o);
  double t0 = util_now_s();
  as_prob p;
  adjacency adj = {0};
  reduced R;
  bool reduced_ok = false;
  char **keep = NULL;
  int *choice = NULL, *alt = NULL, *pick = NULL;
  uint8_t(*lay)[TS_MAX_RANK] = NULL;
  int rc = -1;
  ts_auto_shard_info inf = {0};
  if (as_build(&p, g, &o) < 0 || as_adj_build(&p, &adj) < 0) goto done;
  choice = calloc((size_t)g->n_nodes + 1, sizeof *choice);
  alt = calloc((size_t)g->n_nodes + 1, sizeof *alt);
  if (!choice || !alt) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "auto_shard: out of memory");
    goto done;
  }
  mem_rows rows;
  as_pick_mem_rows(&p.c, &rows);
  double limit = o.memory_limit_bytes;
  if (limit > 0) {
    double least = as_min_peak(&p, &rows, alt);
    if (least > limit) {
      set_error("auto_shard: no sharding fits memory_limit %.0f bytes per device: the smallest achievable modeled "
                "peak is %.0f bytes (%.1f MiB) on this mesh", limit, least, least / 1048576.0);
      goto done;
    }
  }
  const char *how;
  reduced_ok = true; /* reduce_free undoes a partial reduce too */
  if (as_reduce(&p, limit > 0, &R) < 0) goto done;
  /* two greedy plans, assigned forward and backward (a plan's first choices
   * steer the rest: ResNet-20 on 2x2 went channel-parallel from its first
   * convolution forward); the better one is the fallback and the center
   * of a pruned ILP */
  if (as_greedy(&R.q, &R.adj, &rows, limit, false, choice) < 0 || as_greedy(&R.q, &R.adj, &rows, limit, true, alt) < 0)
    goto done;
  as_back_substitute(&R, &p.c, choice);
  as_back_substitute(&R, &p.c, alt);
  if (as_objective(&p, alt) < as_objective(&p, choice)) memcpy(choice, alt, (size_t)g->n_nodes * sizeof *choice);
  inf.greedy = true;
  how = o.greedy_only ? "greedy (ILP skipped)" : "greedy fallback (the ILP found no plan within the time limit)";
  if (!o.greedy_only) {
    bool optimal = false;
    /* a big problem: the ILP over each variable's AS_KEEP best strategies against the greedy
     * plan (the greedy choice among them), so the LP stays small; not proven optimal then */
    double cols = 0;
    for (int e = 0; e < R.q.c.n_edges; e++) cols += (double)p.c.nodes[R.q.c.edges[e].u].ns * p.c.nodes[R.q.c.edges[e].v].ns;
    if (cols > AS_PRUNE_COLUMNS && !(keep = as_prune(&R.q, &R.adj, choice))) goto done;
    int r = as_solve_ilp(&R.q, &rows, limit, o.time_limit_s, keep, alt, &optimal, &inf.variables);
    if (keep) optimal = false;
    if (r < 0) goto done;
    if (r == 1) as_back_substitute(&R, &p.c, alt);
    if (r == 1 && as_objective(&p, alt) <= as_objective(&p, choice) + 1e-12) {
      memcpy(choice, alt, (size_t)g->n_nodes * sizeof *choice);
      inf.greedy = false;
      inf.optimal = optimal;
      how = optimal ? "ILP optimal (GLPK)"
            : keep  ? "ILP over each variable's best strategies (pruned: a big problem), not proven optimal"
                    : "ILP time limit: GLPK's best plan, not proven optimal";
    } else if (r == 1) {
      how = "ILP time limit: the greedy plan beat GLPK's incumbent";
    }
  }
  inf.solve_s = util_now_s() - t0;
  inf.objective_s = as_objective(&p, choice);
  inf.nodes = R.q.n_leaders;
  inf.edges = R.q.c.n_edges;
  if (expand(&p.c, choice, &lay, &pick) < 0) goto done;
  predict(&p.c, (const uint8_t(*)[TS_MAX_RANK])lay, pick, &inf);
  if (limit > 0) {
    double worst = 0;
    for (int q = 0; q < rows.n; q++) worst = fmax(worst, as_row_mem(&p, rows.t[q], choice));
    if (worst > limit * (1 + 1e-9)) {
      set_error("auto_shard: the plan does not fit memory_limit %.0f bytes (modeled %.0f); the greedy fallback "
                "could not meet it, give the solver more time", limit, worst);
      goto done;
    }
  }
  if (explain && !(*explain = explain_text(&p, &adj, choice, &inf, how))) goto done; /* before marking: says what the user marked */
  /* the annotations: with only the inputs and contractions marked,
   * propagation chose other layouts in between than the solver priced
   * (ResNet-20 on 2 devices: 42 all-to-alls nobody modeled) */
  for (int v = 0; v < g->n_nodes; v++) {
    ts_node *nd = &g->nodes[v];
    /* every node the solver priced but constants (reshapes too: left to
     * propagation, the GPT's head-merging reshape on 4x2 took its operand's
     * layout, not the solver's, and the dot after it resharded); a broadcast
     * its users' fused kernel reads by index costs the solver nothing in any
     * layout, so it takes its first user's (another would be materialized
     * and sliced: the MNIST CNN's bias adds ran replicated) */
    if (nd->op == TS_OP_CONSTANT || nd->sharding || nd->rank == 0) continue;
    const uint8_t *want = lay[v];
    if (nd->op == TS_OP_BROADCAST && p.c.kernel && !p.c.kernel[v]) {
      int u = v + 1;
      for (bool found = false; u < g->n_nodes && !found; u += !found)
        for (int k = 0; k < g->nodes[u].n_in; k++) found |= g->nodes[u].in[k] == v;
      if (u >= g->n_nodes || g->nodes[u].rank != nd->rank ||
          memcmp(g->nodes[u].shape, nd->shape, (size_t)nd->rank * sizeof nd->shape[0]) != 0)
        continue;
      want = lay[u];
    }
    ts_partition_spec sp;
    as_mask_to_spec(&p.c, want, nd->rank, &sp);
    ts_sharding *sh = ts_sharding_new(p.c.m, &sp, nd->rank);
    if (!sh) goto done;
    int m = ts_mark_sharding(g, v, sh);
    ts_sharding_free(sh);
    if (m < 0) goto done;
  }
  if (explain && explain_dots(&p.c, g, pick, explain) < 0) goto done;
  rc = 0;
done:
  if (info) *info = inf;
  for (int v = 0; keep && v < g->n_nodes; v++) free(keep[v]);
  free(keep);
  if (reduced_ok) as_reduce_free(&R, &p);
  free(adj.start);
  free(adj.list);
  free(choice);
  free(alt);
  free(pick);
  free(lay);
  as_prob_free(&p);
  return rc;
}

int ts_auto_shard(ts_graph *g, const ts_auto_shard_options *o, ts_auto_shard_info *info, char **explain) {
  return autoshard_annotate(g, o, info, explain);
}

/* An elementwise node computed in its propagated layout `lay`, its operands
 * of its shape read in that layout (sliced, if replicated), appended to its
 * strategies: what the partitioner does where the node's shared variable
 * (a user-marked parameter's, replicated) has no strategy of that layout.
 * Without it the hand layouts' AdamW updates (sharded gradient, replicated
 * moments) were priced with an all-gather per operand: 3x the bytes. */
static int add_elementwise_layout(as_ctx *c, int v, const uint8_t *lay) {
  const ts_node *nd = &c->g->nodes[v];
  as_node *an = &c->nodes[v];
  if (an->ns == an->cap) {
    as_strat *s = realloc(an->s, ((size_t)an->cap + 1) * sizeof *s);
    if (!s) return set_error_code(TS_ERR_OUT_OF_MEMORY, "shard_predict: out of memory");
    an->s = s, an->cap++;
  }
  as_strat *s = &an->s[an->ns];
  memset(s, 0, sizeof *s);
  memcpy(s->out, lay, TS_MAX_RANK);
  for (int k = 0; k < nd->n_in && k < AS_MAX_IN; k++) {
    const ts_node *x = &c->g->nodes[nd->in[k]];
    if (x->rank == nd->rank && memcmp(x->shape, nd->shape, (size_t)nd->rank * sizeof nd->shape[0]) == 0)
      memcpy(s->in[k], lay, TS_MAX_RANK);
  }
  double par = (double)as_layout_tiles(c, lay, nd->rank);
  s->compute = s->cost = as_node_compute(c, v, par);
  s->mem = as_bytes(nd) / par;
  return an->ns++;
}

/* The strategy of node v the partitioner applies, given the propagated
 * layouts. Of those keeping v's layout: the cheapest that reads every
 * operand as it is (no collective but its own partial sum: a sum over a
 * sharded dim is a partial sum and an all-reduce of the result in the
 * compiled program, never an all-gather of the operand the model may find
 * cheaper), else the one sending the fewest bytes (an FSDP weight is
 * all-gathered, never the product reduce-scattered, though the model finds
 * that hidden behind the compute); ties: the cheapest. None keeps it: the
 * cheapest with its result resharded. */
static int propagated_strategy(as_ctx *c, int v, const uint8_t (*lay)[TS_MAX_RANK]) {
  const ts_node *nd = &c->g->nodes[v];
  const as_node *an = &c->nodes[v];
  bool has = false;
  for (int i = 0; i < an->ns && !has; i++) has = as_lay_eq(an->s[i].out, lay[v], nd->rank);
  if (!has && ir_op_is_elementwise(nd->op) && nd->rank > 0) return add_elementwise_layout(c, v, lay[v]);
  int pick = 0;
  double best = INFINITY, least = INFINITY;
  bool as_is = false;
  for (int i = 0; i < an->ns; i++) {
    bool keeps = as_lay_eq(an->s[i].out, lay[v], nd->rank);
    if (has && !keeps) continue;
    double t = an->s[i].cost, moved = 0;
    for (int k = 0; k < nd->n_in; k++)
      t += as_reshard_cost(c, lay[nd->in[k]], as_need(&an->s[i], k), &c->g->nodes[nd->in[k]], &moved);
    if (!keeps) t += as_reshard_cost(c, an->s[i].out, lay[v], nd, NULL);
    bool here = keeps && moved == 0;
    if (as_is && !here) continue;
    moved = keeps ? moved + an->s[i].comm_bytes : 0; /* none keeps v's layout: cost alone */
    if (here && !as_is) least = best = INFINITY, as_is = true;
    if (!as_is ? moved < least || (moved == least && t < best) : t < best) least = moved, best = t, pick = i;
  }
  return pick;
}

int ts_shard_predict(const ts_graph *g, const ts_auto_shard_options *o, ts_auto_shard_info *info) {
  if (check_opts(g, o) < 0) return -1;
  if (!info) return set_error("shard_predict: info is NULL");
  memset(info, 0, sizeof *info);
  int n = g->n_nodes, rc = -1;
  as_prob p;
  ts_partition_spec *specs = calloc((size_t)n + 1, sizeof *specs);
  uint8_t(*lay)[TS_MAX_RANK] = calloc((size_t)n + 1, sizeof *lay);
  int *pick = calloc((size_t)n + 1, sizeof *pick);
  if (!specs || !lay || !pick) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "shard_predict: out of memory");
    free(specs), free(lay), free(pick);
    return -1;
  }
  if (as_build(&p, g, o) < 0) goto done;
  if (spmd_propagate(g, o->mesh, specs, NULL) < 0) goto done;
  for (int v = 0; v < n; v++) as_spec_to_mask(&specs[v], lay[v]);
  for (int v = 0; v < n; v++)
    if ((pick[v] = propagated_strategy(&p.c, v, (const uint8_t(*)[TS_MAX_RANK])lay)) < 0) goto done;
  predict(&p.c, (const uint8_t(*)[TS_MAX_RANK])lay, pick, info);
  info->objective_s = info->step_s;
  rc = 0;
done:
  as_prob_free(&p);
  free(specs);
  free(lay);
  free(pick);
  return rc;
}

