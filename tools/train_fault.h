/* train_fault.h — a testing hook of `tessel train`, compiled only into test
 * builds (CMake -DTESSEL_TESTING=ON, as scripts/test.sh builds):
 * `--testing-fault rank=R,step=S,signal=KILL|STOP` makes process R kill (or
 * stop, i.e. hang) itself before step S, as a crashed or hung host would;
 * tests/mpi_train.sh checks that the other processes end the job. A shipping
 * build has no such flag and the calls below compile to nothing. */
#ifndef TESSEL_TOOLS_TRAIN_FAULT_H
#define TESSEL_TOOLS_TRAIN_FAULT_H

#include <stdint.h>

typedef struct {
  int rank;      /* -1: no fault */
  int64_t step;  /* 0-based: before this step runs */
  int signal;    /* SIGKILL or SIGSTOP */
} train_fault;

#ifdef TESSEL_TESTING
/* Parses "rank=R,step=S,signal=KILL|STOP"; -1 after printing an error. */
int train_fault_parse(const char *text, train_fault *f);
/* Raises f's signal when this is its rank and step; returns otherwise. */
void train_fault_maybe(const train_fault *f, int rank, int64_t step);
#else
static inline void train_fault_maybe(const train_fault *f, int rank, int64_t step) {
  (void)f, (void)rank, (void)step;
}
#endif

#endif
