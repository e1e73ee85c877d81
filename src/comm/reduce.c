/* reduce.c — vectorizable element-wise reductions over the members of a
 * collective: each tile (TILE elements) is accumulated in a small local buffer
 * over members 0, 1, ..., n-1 in that order, then written out once. */
#include "comm/reduce.h"

#include <string.h>

#include "util/error.h"
#include "util/half.h" /* bf16/f16 <-> f32 */

#if defined(__SSE2__)
#include <immintrin.h> /* _mm_stream_si128, _mm_sfence */
#endif

enum { TILE = 1024 }; /* elements per tile: the accumulator stays in L1 */

int comm_reduce_check(const char *what, ts_dtype dt, ts_reduce_kind op) {
  if (op != TS_REDUCE_SUM && op != TS_REDUCE_MAX && op != TS_REDUCE_MIN && op != TS_REDUCE_MEAN)
    return set_error("%s: unknown reduce kind %d", what, (int)op);
  switch (dt) {
  case TS_F32: case TS_F64: case TS_BF16: case TS_F16: case TS_I32: case TS_I64: case TS_U8:
    return 0;
  case TS_BOOL:
    if (op == TS_REDUCE_MAX || op == TS_REDUCE_MIN) return 0; /* any / all */
    return set_error("%s: bool supports only max (any) and min (all), not reduce kind %d",
                        what, (int)op);
  default:
    return set_error("%s: unsupported dtype %d", what, (int)dt);
  }
}

/* Copies a finished tile to its destination; with nt, the cache-line
 * aligned middle is written with non-temporal stores (no read-for-ownership,
 * no cache pollution) and the unaligned ends with plain stores. */
static void store_tile(void *dst, const void *tile, size_t bytes, bool nt) {
#if defined(__SSE2__)
  if (nt) {
    char *d = dst;
    const char *s = tile;
    size_t head = (size_t)(-(uintptr_t)d & 63);
    if (head > bytes) head = bytes;
    memcpy(d, s, head);
    d += head, s += head, bytes -= head;
    size_t body = bytes & ~(size_t)63;
    for (size_t i = 0; i < body; i += 64) {
#if defined(__AVX512F__)
      _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
#elif defined(__AVX__)
      _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
      _mm256_stream_si256((__m256i *)(d + i + 32), _mm256_loadu_si256((const __m256i *)(s + i + 32)));
#else
      for (int k = 0; k < 64; k += 16)
        _mm_stream_si128((__m128i *)(d + i + k), _mm_loadu_si128((const __m128i *)(s + i + k)));
#endif
    }
    memcpy(d + body, s + body, bytes - body);
    return;
  }
#else
  (void)nt;
#endif
  memcpy(dst, tile, bytes);
}

/* Float max/min that propagate NaN (like jnp.max): a NaN accumulator stays,
 * a NaN operand replaces it. */
#define FMAX(a, b) (((int)((a) > (b)) | (int)((a) != (a))) ? (a) : (b))
#define FMIN(a, b) (((int)((a) < (b)) | (int)((a) != (a))) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))

/* One reducer per dtype. T: element type, A: accumulator type, LOAD/STORE
 * convert between them, ADD/MAX/MIN combine two accumulators, DIV(a, n)
 * finishes MEAN. The tile body is always_inline so that full tiles get a
 * constant trip count, which the -O2 vectorizer accepts. */
#define DEF_REDUCER(NAME, T, A, LOAD, STORE, ADD, MAXF, MINF, DIV, DIRECT)                       \
  static inline __attribute__((always_inline)) void NAME##_tile(                                 \
      ts_reduce_kind op, int n, const void *const *srcs, int64_t base, T *restrict out,          \
      int64_t len, A *restrict acc) {                                                            \
    const T *restrict s0 = (const T *)srcs[0] + base;                                            \
    if (n == 1) {                                                                                \
      for (int64_t i = 0; i < len; i++) acc[i] = LOAD(s0[i]);                                    \
    } else { /* members 0 and 1 in one pass: two memory streams in flight */                     \
      const T *restrict s1 = (const T *)srcs[1] + base;                                          \
      if (op == TS_REDUCE_MAX) {                                                                 \
        for (int64_t i = 0; i < len; i++) acc[i] = MAXF(LOAD(s0[i]), LOAD(s1[i]));               \
      } else if (op == TS_REDUCE_MIN) {                                                          \
        for (int64_t i = 0; i < len; i++) acc[i] = MINF(LOAD(s0[i]), LOAD(s1[i]));               \
      } else {                                                                                   \
        for (int64_t i = 0; i < len; i++) acc[i] = ADD(LOAD(s0[i]), LOAD(s1[i]));                \
      }                                                                                          \
    }                                                                                            \
    for (int m = 2; m < n; m++) {                                                                \
      const T *restrict s = (const T *)srcs[m] + base;                                           \
      if (op == TS_REDUCE_MAX) {                                                                 \
        for (int64_t i = 0; i < len; i++) acc[i] = MAXF(acc[i], LOAD(s[i]));                     \
      } else if (op == TS_REDUCE_MIN) {                                                          \
        for (int64_t i = 0; i < len; i++) acc[i] = MINF(acc[i], LOAD(s[i]));                     \
      } else {                                                                                   \
        for (int64_t i = 0; i < len; i++) acc[i] = ADD(acc[i], LOAD(s[i]));                      \
      }                                                                                          \
    }                                                                                            \
    if (op == TS_REDUCE_MEAN)                                                                    \
      for (int64_t i = 0; i < len; i++) acc[i] = DIV(acc[i], n);                                 \
    if (!DIRECT)                                                                                 \
      for (int64_t i = 0; i < len; i++) out[i] = STORE(acc[i]);                                  \
  }                                                                                              \
  static void NAME(ts_reduce_kind op, int n, const void *const *srcs, int n_dst,                  \
                   void *const *dsts, int64_t count, bool nt) {                                  \
    _Alignas(64) A acc[TILE];                                                                    \
    _Alignas(64) T tile[DIRECT ? 1 : TILE];                                                      \
    const void *done = DIRECT ? (const void *)acc : (const void *)tile;                          \
    for (int64_t base = 0; base < count; base += TILE) {                                         \
      int64_t len = count - base < TILE ? count - base : TILE;                                   \
      if (len == TILE) NAME##_tile(op, n, srcs, base, tile, TILE, acc);                          \
      else NAME##_tile(op, n, srcs, base, tile, len, acc);                                       \
      for (int j = 0; j < n_dst; j++)                                                            \
        store_tile((T *)dsts[j] + base, done, (size_t)len * sizeof(T), nt);                     \
    }                                                                                            \
  }

#define ID(x) (x)
#define PLUS(a, b) ((a) + (b))
#define FDIV(a, n) ((a) / (n))
/* i64 sums wrap (two's complement) instead of overflowing, which is UB. */
#define WRAP_ADD64(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
/* i32 / u8 accumulate exactly in a wider type; the store keeps the low bits. */
#define TO_A64(x) ((int64_t)(x))
#define TO_I32(a) ((int32_t)(uint32_t)(a))
#define TO_U8(a) ((uint8_t)(a))

DEF_REDUCER(red_f32, float, float, ID, ID, PLUS, FMAX, FMIN, FDIV, 1)
DEF_REDUCER(red_f64, double, double, ID, ID, PLUS, FMAX, FMIN, FDIV, 1)
DEF_REDUCER(red_bf16, uint16_t, float, ts_bf16_to_f32, ts_f32_to_bf16, PLUS, FMAX, FMIN, FDIV, 0)
DEF_REDUCER(red_i32, int32_t, int64_t, TO_A64, TO_I32, PLUS, IMAX, IMIN, FDIV, 0)
DEF_REDUCER(red_i64, int64_t, int64_t, ID, ID, WRAP_ADD64, IMAX, IMIN, FDIV, 1)
DEF_REDUCER(red_u8, uint8_t, int32_t, ID, TO_U8, PLUS, IMAX, IMIN, FDIV, 0)

/* f16 converts whole tiles with F16C (the compiler does not vectorize the
 * _Float16 casts), then combines in f32 like the other float types. */
static __attribute__((noinline)) void f16_load(float *restrict dst, const uint16_t *restrict src, int64_t len) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= len; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
  for (; i < len; i++) dst[i] = ts_f16_to_f32(src[i]);
}

static __attribute__((noinline)) void f16_store(uint16_t *restrict dst, const float *restrict src, int64_t len) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= len; i += 8)
    _mm_storeu_si128((__m128i *)(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < len; i++) dst[i] = ts_f32_to_f16(src[i]);
}

static inline __attribute__((always_inline)) void f16_tile(ts_reduce_kind op, int n,
                                                           const void *const *srcs, int64_t base,
                                                           uint16_t *restrict out, int64_t len) {
  float acc[TILE], x[TILE];
  f16_load(acc, (const uint16_t *)srcs[0] + base, len);
  for (int m = 1; m < n; m++) {
    f16_load(x, (const uint16_t *)srcs[m] + base, len);
    if (op == TS_REDUCE_MAX) {
      for (int64_t i = 0; i < len; i++) acc[i] = FMAX(acc[i], x[i]);
    } else if (op == TS_REDUCE_MIN) {
      for (int64_t i = 0; i < len; i++) acc[i] = FMIN(acc[i], x[i]);
    } else {
      for (int64_t i = 0; i < len; i++) acc[i] += x[i];
    }
  }
  if (op == TS_REDUCE_MEAN)
    for (int64_t i = 0; i < len; i++) acc[i] /= (float)n;
  f16_store(out, acc, len);
}

static void red_f16(ts_reduce_kind op, int n, const void *const *srcs, int n_dst,
                    void *const *dsts, int64_t count, bool nt) {
  uint16_t tile[TILE];
  for (int64_t base = 0; base < count; base += TILE) {
    int64_t len = count - base < TILE ? count - base : TILE;
    f16_tile(op, n, srcs, base, tile, len);
    for (int j = 0; j < n_dst; j++)
      store_tile((uint16_t *)dsts[j] + base, tile, (size_t)len * sizeof(uint16_t), nt);
  }
}

void comm_reduce(ts_dtype dt, ts_reduce_kind op, int n, const void *const *srcs, int n_dst,
                 void *const *dsts, int64_t count, bool nt) {
  switch (dt) {
  case TS_F32: red_f32(op, n, srcs, n_dst, dsts, count, nt); break;
  case TS_F64: red_f64(op, n, srcs, n_dst, dsts, count, nt); break;
  case TS_BF16: red_bf16(op, n, srcs, n_dst, dsts, count, nt); break;
  case TS_F16: red_f16(op, n, srcs, n_dst, dsts, count, nt); break;
  case TS_I32: red_i32(op, n, srcs, n_dst, dsts, count, nt); break;
  case TS_I64: red_i64(op, n, srcs, n_dst, dsts, count, nt); break;
  case TS_U8: case TS_BOOL: red_u8(op, n, srcs, n_dst, dsts, count, nt); break;
  default: break; /* rejected by comm_reduce_check */
  }
#if defined(__SSE2__)
  /* Non-temporal stores are weakly ordered: fence them before the caller's
   * release (the barrier that lets peers read dst). */
  if (nt) _mm_sfence();
#endif
}
