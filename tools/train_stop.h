/* train_stop.h — SIGINT and SIGTERM during `tessel train`: the first one asks
 * the run to stop after the current step (complete log lines, metrics and
 * traces written, exit 128 + signal: 130 for Ctrl-C, 143 for SIGTERM); a
 * second one ends the process at once, by the signal's default action.
 * Under mpirun (which forwards the signal to every rank as SIGTERM) the ranks
 * agree one step behind, so all of them stop after the same one: the step
 * after the one in which the first of them saw the signal (the agreement
 * started after step k, with every rank's flag, is finished after step k+1,
 * and no step waits for it). */
#ifndef TESSEL_TOOLS_TRAIN_STOP_H
#define TESSEL_TOOLS_TRAIN_STOP_H

#include <stdbool.h>

#include "tessel/runtime.h" // ts_client

/* Installs the handlers (from the first step on: before it, a signal ends the
 * process at once, and nothing has been written yet). `announce`: the first
 * signal prints a line on stderr saying the run stops after this step (in a
 * job of several processes: after the next step, and SIGTERM's line names
 * this process and its host,
 * and says the launcher is ending the job: mpirun does so when it lost a
 * process or host, and may kill this process before the step ends). */
void train_stop_install(bool announce, int rank, int nproc);
/* The signal that asks this run to stop, agreed by every process of the job
 * now (a blocking collective when there are several: every process calls it
 * at the same point), including an agreement train_stop_after_step left
 * pending, which it finishes: where no step follows (the end of an epoch,
 * before or after its evaluation) so that a stop is never lost and nothing
 * is left pending; 0 to go on, -1 (error set) when the processes could not
 * agree. */
int train_stop_requested(ts_client *c);
/* After a step that another step follows: the signal agreed one step behind
 * (every process calls it after the same steps): it finishes the agreement
 * started after the previous step (its result > 0: stop after this step),
 * else starts the next one with this process's signal and returns 0. Alone:
 * this process's signal, at once. -1 (error set) when the processes could
 * not agree. A run that ends without stopping calls train_stop_requested
 * last, which finishes what is pending. */
int train_stop_after_step(ts_client *c);

#endif
