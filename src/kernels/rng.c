/* rng.c — counter-based random numbers (TS_OP_RNG_UNIFORM, TS_OP_RNG_NORMAL).
 *
 * Reproducibility contract (sharded devices generate their slice alone from
 * global element indices, so this function must never change):
 *   mix(z)  = splitmix64 finalizer: z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
 *             z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31.
 *   G       = 0x9E3779B97F4A7C15
 *   seed    = in[0] (rank-0 i32, sign-extended, or i64) as uint64
 *   base    = mix(mix(seed + G) ^ (key * 0xD1B54A32D192ED03 + 1))
 *   x(j)    = mix(base + (j + 1) * G)              (all arithmetic mod 2^64)
 *   uniform element i (row-major index): u = (x(i) >> (64 - b)) * 2^-b, with
 *             b = 53 (f64), 24 (f32), 11 (f16), 8 (bf16), so u is exactly
 *             representable and in [0, 1).
 *   normal element i: u1 = (x(2i) >> 11) * 2^-53, u2 = (x(2i+1) >> 11) * 2^-53,
 *             z = sqrt(-2 ln(1 - u1)) * cos(2 pi u2) in double, then rounded
 *             to the dtype. */
#include "kernels/kernels_internal.h"

static inline uint64_t mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z;
}

#define G 0x9E3779B97F4A7C15ull

/* Row-major index in the global tensor of local element i (attr.global: the
 * node is one shard, at attr.goffset of a tensor of shape attr.gshape). */
static inline uint64_t global_index(const ts_node *n, int64_t i) {
  if (!n->attr.global) return (uint64_t)i;
  int64_t gi = 0, stride = 1;
  for (int d = n->rank - 1; d >= 0; d--) {
    int64_t m = n->shape[d] ? i % n->shape[d] : 0;
    i = n->shape[d] ? i / n->shape[d] : 0;
    gi += (m + n->attr.goffset[d]) * stride;
    stride *= n->attr.gshape[d];
  }
  return (uint64_t)gi;
}

/* Length of the runs of local elements whose global indices are consecutive:
 * the trailing dims the shard holds whole, times the first one it does not
 * (a batch-sharded dropout mask is one run; an unsharded node too). */
static int64_t contiguous_run(const ts_node *n, int64_t numel) {
  if (!n->attr.global) return numel;
  int64_t run = 1;
  for (int d = n->rank - 1; d >= 0; d--) {
    run *= n->shape[d];
    if (n->shape[d] != n->attr.gshape[d]) break;
  }
  return run;
}

/* Elements per parallel chunk: the global index is computed (divisions per
 * dim) once per chunk and per run boundary, then counted up. */
#define RNG_CHUNK 4096

/* Elements [i, stop) of out, whose global indices count up from gi; one
 * loop per dtype class, so the f32 uniform loop stays vectorizable. */
static void uniform_span(void *out, ts_dtype dt, int64_t i, int64_t stop, uint64_t gi, uint64_t base, int bits) {
  double scale = ldexp(1.0, -bits);
  if (dt == TS_F32) {
    float *o = out;
    for (; i < stop; i++, gi++) o[i] = (float)((double)(mix(base + (gi + 1) * G) >> (64 - bits)) * scale);
  } else {
    for (; i < stop; i++, gi++) tk_store_f64(dt, out, i, (double)(mix(base + (gi + 1) * G) >> (64 - bits)) * scale);
  }
}

static void normal_span(void *out, ts_dtype dt, int64_t i, int64_t stop, uint64_t gi, uint64_t base) {
  for (; i < stop; i++, gi++) {
    double u1 = (double)(mix(base + (2 * gi + 1) * G) >> 11) * 0x1p-53;
    double u2 = (double)(mix(base + (2 * gi + 2) * G) >> 11) * 0x1p-53;
    double z = sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
    if (dt == TS_F32) ((float *)out)[i] = (float)z;
    else tk_store_f64(dt, out, i, z);
  }
}

int tk_rng(const ts_graph *g, const ts_node *n, tk_in in, void *out, const ts_kctx *ctx) {
  const ts_node *s = tk_operand(g, n, 0);
  if (s->dtype != TS_I32 && s->dtype != TS_I64)
    return set_error("rng: seed must be a rank-0 i32 or i64, got %s", ts_dtype_name(s->dtype));
  if (!ts_dtype_is_float(n->dtype))
    return set_error("rng: result dtype must be a float type, got %s", ts_dtype_name(n->dtype));
  uint64_t seed = (uint64_t)tk_load_i64(s->dtype, in[0], 0);
  uint64_t base = mix(mix(seed + G) ^ (n->attr.key * 0xD1B54A32D192ED03ull + 1));
  int64_t numel = tk_numel(n);
  if (numel <= 0) return 0;
  ts_dtype dt = n->dtype;
  bool normal = n->op == TS_OP_RNG_NORMAL;
  int bits = dt == TS_F64 ? 53 : dt == TS_F32 ? 24 : dt == TS_F16 ? 11 : 8;
  int64_t run = contiguous_run(n, numel), chunks = (numel + RNG_CHUNK - 1) / RNG_CHUNK;
  int nt = tk_threads(ctx, numel / 4);
#pragma omp parallel for num_threads(nt) if (nt > 1)
  for (int64_t ch = 0; ch < chunks; ch++) {
    int64_t end = (ch + 1) * RNG_CHUNK < numel ? (ch + 1) * RNG_CHUNK : numel;
    for (int64_t i = ch * RNG_CHUNK, stop; i < end; i = stop) {
      stop = (i / run + 1) * run; /* the end of i's run */
      if (stop > end) stop = end;
      if (normal) normal_span(out, dt, i, stop, global_index(n, i), base);
      else uniform_span(out, dt, i, stop, global_index(n, i), base, bits);
    }
  }
  return 0;
}
