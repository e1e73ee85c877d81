/* train_program.c — a compiled program of `tessel train` (the training step,
 * the evaluation forward) with its inputs bound by name, run in place. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_run.h"

void program_free(program *pr) {
  if (pr->exe) ts_executable_free(pr->exe);
  model_io_free(&pr->io);
  free(pr->out);
  memset(pr, 0, sizeof *pr);
}

int program_init(program *pr, ts_client *c, ts_params *p, const ts_graph *g, const ts_compile_options *co) {
  memset(pr, 0, sizeof *pr);
  if (ts_graph_verify(g) < 0) return -1;
  pr->exe = ts_compile(c, g, co);
  if (!pr->exe) return -1;
  pr->n_out = ts_graph_num_outputs(g);
  if (!(pr->out = calloc((size_t)pr->n_out, sizeof *pr->out))) {
    fprintf(stderr, "out of memory\n");
    return -1;
  }
  return model_io_bind(&pr->io, g, p, c);
}

int program_run(program *pr) {
  pr->out[0] = pr->io.result;
  for (int k = 1; k < pr->n_out; k++) pr->out[k] = NULL;
  if (ts_execute(pr->exe, pr->io.in, pr->out) < 0) return -1;
  for (int k = 1; k < pr->n_out; k++) {
    bool aliased = false;
    for (int i = 0; i < pr->io.n_in && !aliased; i++) aliased = pr->out[k] == pr->io.in[i];
    if (!aliased) ts_buffer_free(pr->out[k]);
  }
  return 0;
}
