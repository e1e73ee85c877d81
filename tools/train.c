/* train.c — `tessel train`: trains the MLP or the MNIST CNN on Fashion-MNIST
 * (or a CIFAR CNN on CIFAR-10).
 *
 * One training step (forward, loss, gradients, optimizer update) is one graph,
 * compiled once; parameters and optimizer state are aliased outputs, so every
 * execute updates them in place. Evaluation is a second graph (training off,
 * batch --eval-batch, plus one program for the last partial batch) bound to the
 * same parameter buffers; the argmax of its logits is taken on the host.
 * Training batches come from the prefetching loader (tessel/loader.h: worker
 * threads decode and augment the next batch while a step runs); an epoch
 * shows a progress bar on a terminal, periodic lines otherwise.
 *
 * The command in files: train_opts.c (flags), train_setup.c (job, data,
 * compile), train_program.c (a compiled program bound by name), train_loop.c
 * (epochs and steps, logs), train_eval.c (test accuracy), train_ddp.c (DDP
 * helpers), train_fault.c (a testing hook); this file runs the phases in order
 * and releases what they made. */
#include "train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h> // strerror

#include "args.h"            // cli_error, exit codes
#include "train_run.h"
#include "train_text.h"      // train_text_free

int train_lib_error(void) {
  cli_error(CMD, "%s", ts_last_error());
  return CLI_EXIT_FAIL;
}

/* Ends the run: on failure in a job of several processes, the whole job (the
 * others would wait for this one in vain; an interrupted run is no failure:
 * every rank stopped at the same step); else the outputs (metrics, traces,
 * what was saved), then everything the run owns, in reverse order of making.
 * Returns the exit code, CLI_EXIT_FAIL when a write failed. */
static int train_finish(train_run *r, int exit_code) {
  if (exit_code != CLI_EXIT_OK && !r->stop_signal && r->nproc > 1) {
    if (r->log) fclose(r->log);
    fflush(stdout);
    ts_client_abort(r->client, exit_code);
  }
  exit_code = train_outputs_finish(r, exit_code);
  if (r->stop_signal && r->nproc > 1) {
    /* Why a barrier: mpirun ends the whole job as soon as one rank exits
     * non-zero (130/143 here), so no rank may exit before rank 0 has
     * written its files and its report */
    int64_t all_done;
    fflush(stdout);
    if (ts_client_max(r->client, 0, &all_done) < 0) cli_error(CMD, "%s", ts_last_error());
  }
  if (r->bar) ts_progress_finish(r->bar, NULL);
  ts_loader_free(r->loader); // joins the workers before the dataset goes
  ts_source_free(r->train_src);
  train_text_free(r);
  program_free(&r->step_pr);
  program_free(&r->eval_pr);
  program_free(&r->tail_pr);
  if (r->g) ts_graph_free(r->g);
  if (r->params) ts_params_free(r->params);
  if (r->client) ts_client_free(r->client);
  ts_mesh_free(r->mesh);
  if (r->train.images || r->train.labels) ts_dataset_free(&r->train);
  if (r->test.images || r->test.labels) ts_dataset_free(&r->test);
  return exit_code;
}

int cli_train(int argc, char **argv) {
  train_run r = {0};
  int rc = train_opts_parse(argc, argv, &r.o);
  if (rc == 1) {
    cli_train_usage(stdout);
    return CLI_EXIT_OK;
  }
  if (rc < 0) return CLI_EXIT_USAGE;
  if ((rc = train_join(&r)) != CLI_EXIT_OK) return rc; /* it released what it made */
  rc = train_load(&r);
  if (rc == CLI_EXIT_OK) rc = train_compile(&r);
  if (rc == CLI_EXIT_OK) rc = train_epochs(&r);
  rc = train_finish(&r, rc);
  /* stdout too: a report that could not be written is a failure */
  errno = 0;
  if ((fflush(stdout) != 0 || ferror(stdout)) && rc == CLI_EXIT_OK) {
    cli_error(CMD, "cannot write to stdout: %s", errno ? strerror(errno) : "write error");
    rc = CLI_EXIT_FAIL;
  }
  return rc;
}
