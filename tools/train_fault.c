/* train_fault.c — the `--testing-fault` hook of `tessel train` (see
 * train_fault.h); empty unless the build defines TESSEL_TESTING. */
#include "train_fault.h"

#ifdef TESSEL_TESTING
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "args.h" // cli_error

int train_fault_parse(const char *text, train_fault *f) {
  int r = -1, n = 0;
  long long s = -1;
  char sig[8] = "";
  if (sscanf(text, "rank=%d,step=%lld,signal=%7[A-Z]%n", &r, &s, sig, &n) != 3 || text[n] != '\0' || r < 0 ||
      s < 0 || (strcmp(sig, "KILL") != 0 && strcmp(sig, "STOP") != 0)) {
    cli_error("train", "--testing-fault: expected rank=R,step=S,signal=KILL|STOP, got '%s'", text);
    return -1;
  }
  *f = (train_fault){.rank = r, .step = s, .signal = strcmp(sig, "STOP") == 0 ? SIGSTOP : SIGKILL};
  return 0;
}

void train_fault_maybe(const train_fault *f, int rank, int64_t step) {
  if (f->rank != rank || f->step != step) return;
  fprintf(stderr, "tessel train: rank %d: --testing-fault: SIG%s at step %lld\n", rank,
          f->signal == SIGSTOP ? "STOP" : "KILL", (long long)step);
  fflush(stderr);
  raise(f->signal);
}
#else
typedef int train_fault_unused; /* ISO C wants a translation unit to declare something */
#endif
