/* spin.h — one pause of a spin-wait and its measured cost, for waits that
 * spin a few microseconds before they sleep (the barriers and collective
 * waits in comm/, the device pool's hand-offs in runtime/devpool.c). */
#ifndef TS_UTIL_SPIN_H
#define TS_UTIL_SPIN_H

#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPIN_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define SPIN_PAUSE() __asm__ __volatile__("yield")
#else
#define SPIN_PAUSE() ((void)0)
#endif

/* The cost of one SPIN_PAUSE() in nanoseconds (measured over 256 of them;
 * 10..150 ns depending on the CPU), at least 1. */
static inline double spin_pause_ns(void) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int i = 0; i < 256; i++) SPIN_PAUSE();
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 256.0;
  return ns < 1.0 ? 1.0 : ns;
}

#endif
