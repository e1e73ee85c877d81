/* schedule.c — learning-rate schedules evaluated on the host each step (the
 * value is fed to the step graph through its rank-0 `lr` input, so changing
 * it never recompiles). */
#include <math.h>

#include "tessel/nn.h"

/* Both kinds warm up linearly from 0: lr(step) = base * step / warmup for
 * step < warmup (the Hugging Face convention, so step 0 has lr 0). After that
 * a constant schedule stays at base; a cosine one follows
 *   min + 0.5 * (base - min) * (1 + cos(pi * progress)),
 *   progress = (step - warmup) / (total - warmup), clamped to [0, 1],
 * so it reaches min_lr at total_steps and stays there. */
double ts_lr_at(const ts_lr_schedule *s, int64_t step) {
  if (!s) return 0.0;
  if (step < 0) step = 0;
  if (s->warmup_steps > 0 && step < s->warmup_steps)
    return s->base_lr * (double)step / (double)s->warmup_steps;
  if (s->kind != TS_LR_COSINE) return s->base_lr;
  int64_t span = s->total_steps - s->warmup_steps;
  if (span <= 0) return s->min_lr;
  double progress = (double)(step - s->warmup_steps) / (double)span;
  if (progress > 1.0) progress = 1.0;
  return s->min_lr + 0.5 * (s->base_lr - s->min_lr) * (1.0 + cos(M_PI * progress));
}
