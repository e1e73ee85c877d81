/* train_eval.c — `tessel train`'s evaluation: the test set through the
 * evaluation programs, argmax of the logits on the host. */
#include <stdlib.h>

#include "train_run.h"

int train_evaluate(program *full, program *tail, const ts_dataset *test, int64_t e, const ts_augment *norm,
                   double *acc) {
  const int64_t sample = (int64_t)test->c * test->h * test->w;
  const int K = test->num_classes > 0 ? test->num_classes : 10;
  float *x = malloc((size_t)(e * sample) * sizeof *x);   // (E, C, H, W)
  int32_t *y = malloc((size_t)e * sizeof *y);           // (E)
  float *logits = malloc((size_t)e * K * sizeof *logits); // (E, K)
  int64_t correct = 0;
  int rc = x && y && logits ? 0 : -1;
  for (int64_t first = 0; rc == 0 && first < test->n; first += e) {
    int64_t cnt = test->n - first < e ? test->n - first : e;
    program *pr = cnt == e ? full : tail;
    for (int64_t k = 0; k < cnt; k++) {
      ts_augment_apply(norm, test->images + (first + k) * sample, test->c, test->h, test->w, 0, x + k * sample);
      y[k] = test->labels[first + k];
    }
    rc = ts_buffer_write(pr->io.x, x, (size_t)(cnt * sample) * sizeof *x);
    if (rc == 0) rc = program_run(pr);
    if (rc == 0) rc = ts_buffer_read(pr->io.result, logits, (size_t)cnt * K * sizeof *logits);
    for (int64_t b = 0; rc == 0 && b < cnt; b++) {
      int best = 0;
      for (int k = 1; k < K; k++)
        if (logits[b * K + k] > logits[b * K + best]) best = k;
      correct += best == y[b];
    }
  }
  free(x);
  free(y);
  free(logits);
  *acc = (double)correct / (double)test->n;
  return rc;
}
