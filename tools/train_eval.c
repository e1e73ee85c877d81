/* train_eval.c — `tessel train`'s evaluation: a dataset (the test set, or the
 * --holdout split) through the evaluation programs; argmax of the logits and
 * the cross-entropy on the host. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train_run.h"

/* Cross-entropy of one row of K logits against label y, in double. */
static double row_loss(const float *logits, int K, int32_t y) {
  double m = logits[0], s = 0;
  for (int k = 1; k < K; k++)
    if (logits[k] > m) m = logits[k];
  for (int k = 0; k < K; k++) s += exp((double)logits[k] - m);
  return m + log(s) - (double)logits[y];
}

int train_evaluate(program *full, program *tail, const ts_dataset *test, int64_t e, const ts_augment *norm,
                   double *acc, double *loss) {
  const int64_t sample = (int64_t)test->c * test->h * test->w;
  const int K = test->num_classes > 0 ? test->num_classes : 10;
  float *x = malloc((size_t)(e * sample) * sizeof *x);   // (E, C, H, W)
  int32_t *y = malloc((size_t)e * sizeof *y);           // (E)
  float *logits = malloc((size_t)e * K * sizeof *logits); // (E, K)
  int64_t correct = 0;
  double loss_sum = 0;
  int rc = x && y && logits ? 0 : -1;
  for (int64_t first = 0; rc == 0 && first < test->n; first += e) {
    int64_t cnt = test->n - first < e ? test->n - first : e;
    program *pr = cnt == e || !tail ? full : tail;
    int64_t rows = pr == full ? e : cnt; /* a padded last batch: zero images after the samples */
    for (int64_t k = 0; k < cnt; k++) {
      ts_augment_apply(norm, test->images + (first + k) * sample, test->c, test->h, test->w, 0, x + k * sample);
      y[k] = test->labels[first + k];
    }
    if (rows > cnt) memset(x + cnt * sample, 0, (size_t)((rows - cnt) * sample) * sizeof *x);
    rc = ts_buffer_write(pr->io.x, x, (size_t)(rows * sample) * sizeof *x);
    if (rc == 0) rc = program_run(pr);
    if (rc == 0) rc = ts_buffer_read(pr->io.result, logits, (size_t)rows * K * sizeof *logits);
    for (int64_t b = 0; rc == 0 && b < cnt; b++) {
      int best = 0;
      for (int k = 1; k < K; k++)
        if (logits[b * K + k] > logits[b * K + best]) best = k;
      correct += best == y[b];
      if (loss) loss_sum += row_loss(logits + b * K, K, y[b]);
    }
  }
  free(x);
  free(y);
  free(logits);
  *acc = (double)correct / (double)test->n;
  if (loss) *loss = loss_sum / (double)test->n;
  return rc;
}
