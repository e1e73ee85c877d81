/* copyhash.c — the save's filler copy: bytes from the held buffers into the
 * write ring, hashed into a block's and its file's XXH64 in the same pass.
 *
 * Beside a training step the copy competes for memory bandwidth (the step's
 * optimizer streams the whole state), so it touches memory as little as it
 * can:
 * - one read of the source: the bytes are copied and hashed a slice
 *   (COPY_SLICE, L1-sized) at a time, the hash reading the slice the copy
 *   just brought into L1 (the hash's value is ckpt_xxh64_update2's on the
 *   same bytes: streamed XXH64 does not depend on how they are cut);
 * - non-temporal stores into the ring (x86: _mm512_stream_si512 where the
 *   CPU has AVX-512F, checked at run time, else _mm_stream_si128 of SSE2):
 *   no read-for-ownership of the destination, and the ring, which only the
 *   disk reads next (O_DIRECT), does not evict the step's working set from
 *   the caches. The unaligned ends (below a 64-byte line) are plain stores;
 *   an sfence orders the streamed stores before the caller hands the ring on.
 * ckpt_copy_nt selects the stores (tests compare the three paths). */
#include <stdint.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define COPY_X86 1
#endif

#define COPY_SLICE 4096u /* bytes copied, then hashed from L1 */

int ckpt_copy_nt = -1; /* ckpt_internal.h: -1 auto, 0 plain stores, 2 streamed with SSE2 only (tests) */

#ifdef COPY_X86
/* 64-byte lines of dst (64-byte aligned) from src, streamed. */
static void lines_sse2(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i += 64)
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128((__m128i *)(void *)(d + i + k), _mm_loadu_si128((const __m128i *)(const void *)(s + i + k)));
}

__attribute__((target("avx512f"))) static void lines_avx512(char *d, const char *s, size_t n) {
  for (size_t i = 0; i < n; i += 64) _mm512_stream_si512((void *)(d + i), _mm512_loadu_si512((const void *)(s + i)));
}

typedef void (*lines_fn)(char *d, const char *s, size_t n);

/* The streamed line copy this CPU has (asked once; a race only asks twice). */
static lines_fn stream_lines(void) {
  static lines_fn fn;
  lines_fn f = __atomic_load_n(&fn, __ATOMIC_RELAXED);
  if (!f) {
    __builtin_cpu_init();
    f = __builtin_cpu_supports("avx512f") ? lines_avx512 : lines_sse2;
    __atomic_store_n(&fn, f, __ATOMIC_RELAXED);
  }
  return f;
}
#endif

/* How this copy stores (ckpt_copy_nt; auto: streamed on x86): 0 plain,
 * 1 streamed by the CPU's flags, 2 streamed with SSE2. */
static int streaming(void) {
#ifdef COPY_X86
  return ckpt_copy_nt == 0 ? 0 : ckpt_copy_nt == 2 ? 2 : 1;
#else
  return 0;
#endif
}

/* dst[0..n) = src[0..n): the 64-byte aligned lines of dst streamed, the ends
 * plain. No fence (the caller's). */
static void copy_slice(char *d, const char *s, size_t n, int nt) {
#ifdef COPY_X86
  if (nt) {
    size_t head = (size_t)(-(uintptr_t)d & 63);
    if (head > n) head = n;
    memcpy(d, s, head);
    d += head, s += head, n -= head;
    size_t body = n & ~(size_t)63;
    if (body) (nt == 2 ? lines_sse2 : stream_lines())(d, s, body);
    memcpy(d + body, s + body, n - body);
    return;
  }
#endif
  (void)nt;
  memcpy(d, s, n);
}

/* The streamed stores are ordered before whatever the caller does next. */
static void fence(int nt) {
#ifdef COPY_X86
  if (nt) _mm_sfence();
#endif
  (void)nt;
}

void ckpt_copy_stream(void *dst, const void *src, size_t n) {
  int nt = streaming();
  copy_slice(dst, src, n, nt);
  fence(nt);
}

void ckpt_copy_hash2(void *dst, const void *src, size_t n, ckpt_xxh64_state *s, ckpt_xxh64_state *t) {
  int nt = streaming();
  char *d = dst;
  const char *p = src;
  while (n > 0) {
    size_t m = n < COPY_SLICE ? n : COPY_SLICE;
    copy_slice(d, p, m, nt);
    ckpt_xxh64_update2(s, t, p, m); /* the source slice, from L1 */
    d += m, p += m, n -= m;
  }
  fence(nt);
}
