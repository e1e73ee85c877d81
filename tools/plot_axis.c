/* plot_axis.c — tick values and their labels for `tessel plot`: round
 * numbers (1, 2, 5 times a power of ten) on linear axes, powers of ten and
 * their 2x/5x multiples on log axes; the axis widened to its outer ticks. */
#include <math.h>
#include <stdio.h>  // snprintf
#include <string.h>

#include "plot.h"

#define MAX_TICKS 64

/* The smallest step of 1, 2 or 5 times a power of ten that needs at most
 * `target` intervals (so at most target + 2 ticks once widened). */
static double nice_step(double span, int target) {
  double raw = span / target;
  double mag = pow(10, floor(log10(raw)));
  double f = raw / mag;
  return (f <= 1 + 1e-9 ? 1 : f <= 2 + 1e-9 ? 2 : f <= 5 + 1e-9 ? 5 : 10) * mag;
}

static int linear_ticks(double lo, double hi, int target, double *ticks, int cap, double *alo,
                        double *ahi) {
  // a span below the values' precision would give a step of zero
  double tiny = 1e-9 * fmax(fabs(lo), fabs(hi));
  if (!(hi - lo > tiny)) {
    double pad = lo == 0 && hi == 0 ? 1 : 0.05 * fmax(fabs(lo), fabs(hi));
    lo -= pad;
    hi += pad;
  }
  double step = nice_step(hi - lo, target);
  double k0 = floor(lo / step + 1e-9), k1 = ceil(hi / step - 1e-9);
  *alo = k0 * step;
  *ahi = k1 * step;
  int n = 0;
  for (double k = k0; k <= k1 && n < cap; k++) {
    double t = k * step;
    ticks[n++] = fabs(t) < 1e-9 * step ? 0 : t; // no "-0"
  }
  return n;
}

/* Ticks m * 10^k (m from mant, k a multiple of stride) spanning [lo, hi],
 * into ticks (cap); the outer ones become the axis range. */
static int log_ticks_with(double lo, double hi, const double *mant, int nmant, int stride,
                          double *ticks, int cap, double *alo, double *ahi) {
  int k0 = (int)floor(log10(lo)) - 1, k1 = (int)ceil(log10(hi)) + 1;
  k0 -= ((k0 % stride) + stride) % stride; // down to a multiple of stride
  double below = NAN, above = NAN;
  for (int k = k0; k <= k1 + stride && isnan(above); k += stride) {
    for (int j = 0; j < nmant && isnan(above); j++) {
      double v = mant[j] * pow(10, k);
      if (v <= lo * (1 + 1e-9)) below = v;
      if (v >= hi * (1 - 1e-9)) above = v;
    }
  }
  *alo = below;
  *ahi = above;
  int n = 0;
  for (int k = k0; k <= k1 + stride; k += stride) {
    for (int j = 0; j < nmant; j++) {
      double v = mant[j] * pow(10, k);
      if (v >= below * (1 - 1e-9) && v <= above * (1 + 1e-9)) {
        if (n < cap) ticks[n] = v;
        n++;
      }
    }
  }
  return n;
}

static int log_ticks(double lo, double hi, int target, double *ticks, int cap, double *alo,
                     double *ahi) {
  if (!(hi > lo * (1 + 1e-9))) {
    lo *= 0.8;
    hi *= 1.25;
  }
  static const double one[] = {1}, one25[] = {1, 2, 5}, all[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  double tmp[MAX_TICKS];
  int n = log_ticks_with(lo, hi, one25, 3, 1, tmp, MAX_TICKS, alo, ahi);
  if (n < 3) { // less than a decade: every digit, or round linear steps within one digit
    n = log_ticks_with(lo, hi, all, 9, 1, ticks, cap, alo, ahi);
    if (n >= 3) return n;
    n = linear_ticks(lo, hi, target, tmp, MAX_TICKS, alo, ahi);
    if (*alo > 0) {
      memcpy(ticks, tmp, (size_t)(n < cap ? n : cap) * sizeof *ticks);
      return n < cap ? n : cap;
    }
    return log_ticks_with(lo, hi, all, 9, 1, ticks, cap, alo, ahi);
  }
  if (n <= target + target / 2) return log_ticks_with(lo, hi, one25, 3, 1, ticks, cap, alo, ahi);
  for (int stride = 1;; stride++) { // decades only, every stride-th one
    n = log_ticks_with(lo, hi, one, 1, stride, tmp, MAX_TICKS, alo, ahi);
    if (n <= target + target / 2) return log_ticks_with(lo, hi, one, 1, stride, ticks, cap, alo, ahi);
  }
}

int plot_ticks(double lo, double hi, int target, bool log_axis, double *ticks, int cap,
               double *axis_lo, double *axis_hi) {
  if (target < 2) target = 2;
  if (log_axis) return log_ticks(lo, hi, target, ticks, cap, axis_lo, axis_hi);
  return linear_ticks(lo, hi, target, ticks, cap, axis_lo, axis_hi);
}

void plot_tick_label(const double *ticks, int n, int i, bool log_axis, char *buf, size_t len) {
  double v = ticks[i], absmax = 0, step = n > 1 ? fabs(ticks[1] - ticks[0]) : fabs(v);
  for (int k = 0; k < n; k++) absmax = fmax(absmax, fabs(ticks[k]));
  // the decimals the step needs (0.25 is not a step; 1, 2, 5 x 10^k are)
  int decimals = step > 0 ? (int)fmax(0, -floor(log10(step) + 1e-6)) : 0;
  if (log_axis || absmax >= 1e6 || decimals > 8) {
    int digits = step > 0 && absmax > 0 ? (int)ceil(log10(absmax / step) + 1e-6) + 1 : 6;
    snprintf(buf, len, "%.*g", log_axis ? 6 : (int)fmin(17, fmax(1, digits)), v);
    return;
  }
  snprintf(buf, len, "%.*f", decimals, v);
}
