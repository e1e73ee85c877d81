/* train_outputs.h — the files `tessel train` writes: the --log-json log,
 * --metrics, --trace and the TESSEL_TRACE trace. The rules (README, "Outputs
 * and signals"):
 *  - every path is checked before the data is read (its directory exists and
 *    is writable, it is not a directory), the same file for two outputs and an
 *    output that is one of the dataset's files are refused;
 *  - nothing is created or changed before the first training step has run:
 *    a run that fails earlier leaves the previous run's files as they were;
 *  - the log is opened after the first step and flushed line by line (never
 *    ends mid-record); metrics and traces are replaced atomically at the end
 *    (rename), or written in place when the path is a character device or a
 *    FIFO (never renamed over);
 *  - a write error (ENOSPC, ...) is a message and a non-zero exit. */
#ifndef TESSEL_TOOLS_TRAIN_OUTPUTS_H
#define TESSEL_TOOLS_TRAIN_OUTPUTS_H

#include <stdbool.h>

enum { OUT_LOG, OUT_METRICS, OUT_TRACE, OUT_ENV_TRACE, OUT_COUNT };

typedef struct {
  const char *flag;  /* "--log-json", "--metrics", "--trace", "TESSEL_TRACE" */
  const char *path;  /* NULL: not written (not asked, or not this rank's) */
  const char *special; /* NULL: a regular or new file; else "a character device" or "a FIFO" */
  bool written;
} train_output;

struct train_run;
/* Fills r->out and checks every path (rank 0; the other ranks write nothing
 * and only take TESSEL_TRACE over from the library). Returns CLI_EXIT_OK or
 * CLI_EXIT_USAGE after printing why. */
int train_outputs_check(struct train_run *r);
/* Opens the --log-json file: at the first step, so that a run that fails
 * before it leaves an old log untouched. CLI_EXIT_OK or CLI_EXIT_FAIL. */
int train_log_open(struct train_run *r);
/* Ends a record of the log: flushed now, so the file never ends mid-record;
 * a write error is CLI_EXIT_FAIL after printing it. */
int train_log_flush(struct train_run *r);
/* At the end of a run: closes the log; when training started, writes the
 * metrics (and prints the short report) and traces, then prints what was
 * saved. Returns `rc`, or CLI_EXIT_FAIL when rc was CLI_EXIT_OK and a write
 * failed. */
int train_outputs_finish(struct train_run *r, int rc);

#endif
