/* blk16.c — 16-bit activations between plain NCHW and oneDNN's channel-blocked
 * nChw16c (aBcd16b: [n][c / 16][h][w][c % 16]), C a multiple of 16.
 *
 * conv.c moves bf16 activations into and out of the blocked convolutions with
 * these instead of oneDNN 2.6's reorder primitive: for bf16 that primitive is
 * its generic "jit:uni" one, 2-3x slower than the f32 reorder of the same
 * tensor (which moves twice the bytes), and ResNet-50's bf16 step runs ~230 of
 * them. A pure copy: the same bits as the reorder. Each (image, channel block)
 * is a 16 x HW matrix of 16-bit values transposed to HW x 16, in 16 x 16 tiles
 * (AVX2 where the compiler targets it). */
#include <string.h>

#include "kernels/kernels_internal.h"

#ifdef __AVX2__
#include <immintrin.h>

/* Every loop over a tile unrolled (GCC unroll) and the transposition
 * inlined, so the tile stays in registers: at -O2 the loops stayed rolled
 * and tr16x16 a call, its 48 vectors through the stack (perf: blk16.c was
 * ~15% of one thread's ResNet-20 bf16 step, tr16x16 alone 4%). */
#define PRAGMA(x) _Pragma(#x)
#define UNROLL(n) PRAGMA(GCC unroll n)

/* r[i] = row i of a 16 x 16 tile of 16-bit values; on return r[j] = column j. */
static inline __attribute__((always_inline)) void tr16x16(__m256i r[16]) {
  __m256i a[16], b[16];
  UNROLL(8) for (int i = 0; i < 8; i++) { /* pairs of rows, interleaved by 16 bits */
    a[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    a[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  UNROLL(4) for (int q = 0; q < 4; q++) /* rows 4q..4q+3 by 32 bits: columns 0-1, 2-3, 4-5, 6-7 of each lane */
    UNROLL(2) for (int h = 0; h < 2; h++) {
      b[4 * q + 2 * h] = _mm256_unpacklo_epi32(a[4 * q + h], a[4 * q + 2 + h]);
      b[4 * q + 2 * h + 1] = _mm256_unpackhi_epi32(a[4 * q + h], a[4 * q + 2 + h]);
    }
  UNROLL(2) for (int o = 0; o < 2; o++) /* rows 8o..8o+7 by 64 bits: a[8o + k] = column k (lane 0), k + 8 (lane 1) */
    UNROLL(4) for (int k = 0; k < 4; k++) {
      a[8 * o + 2 * k] = _mm256_unpacklo_epi64(b[8 * o + k], b[8 * o + 4 + k]);
      a[8 * o + 2 * k + 1] = _mm256_unpackhi_epi64(b[8 * o + k], b[8 * o + 4 + k]);
    }
  UNROLL(8) for (int k = 0; k < 8; k++) { /* lanes of rows 0-7 and 8-15 joined */
    r[k] = _mm256_permute2x128_si256(a[k], a[8 + k], 0x20);
    r[k + 8] = _mm256_permute2x128_si256(a[k], a[8 + k], 0x31);
  }
}
#endif

/* One channel block: s (16 rows at stride HW) -> d (HW x 16), or back. */
static void block_to(const uint16_t *s, uint16_t *d, int64_t HW) {
  int64_t p0 = 0;
#ifdef __AVX2__
  for (; p0 + 16 <= HW; p0 += 16) {
    __m256i r[16];
    UNROLL(16) for (int c = 0; c < 16; c++) r[c] = _mm256_loadu_si256((const __m256i *)(s + c * HW + p0));
    tr16x16(r);
    UNROLL(16) for (int p = 0; p < 16; p++) _mm256_storeu_si256((__m256i *)(d + (p0 + p) * 16), r[p]);
  }
#endif
  for (int64_t p = p0; p < HW; p++)
    for (int c = 0; c < 16; c++) d[p * 16 + c] = s[c * HW + p];
}

static void block_from(const uint16_t *s, uint16_t *d, int64_t HW) {
  int64_t p0 = 0;
#ifdef __AVX2__
  for (; p0 + 16 <= HW; p0 += 16) {
    __m256i r[16];
    UNROLL(16) for (int p = 0; p < 16; p++) r[p] = _mm256_loadu_si256((const __m256i *)(s + (p0 + p) * 16));
    tr16x16(r);
    UNROLL(16) for (int c = 0; c < 16; c++) _mm256_storeu_si256((__m256i *)(d + c * HW + p0), r[c]);
  }
#endif
  for (int64_t p = p0; p < HW; p++)
    for (int c = 0; c < 16; c++) d[c * HW + p] = s[p * 16 + c];
}

void tk_blk16_convert(const uint16_t *src, uint16_t *dst, int64_t N, int64_t C, int64_t HW, bool to_blocked,
                      int nt) {
  int64_t nb = N * (C / 16);
#pragma omp parallel for num_threads(nt) if (nt > 1 && nb > 1)
  for (int64_t b = 0; b < nb; b++) {
    int64_t off = b * 16 * HW; /* the same offset in both layouts */
    if (to_blocked) block_to(src + off, dst + off, HW);
    else block_from(src + off, dst + off, HW);
  }
}
