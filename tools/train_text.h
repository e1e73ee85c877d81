/* train_text.h — token data of `tessel train --model gpt`: the training
 * source (a text file's first 90% or synthetic tokens) and the validation
 * batches at fixed seeded positions of the last 10%. */
#ifndef TESSEL_TOOLS_TRAIN_TEXT_H
#define TESSEL_TOOLS_TRAIN_TEXT_H

#include <stdint.h>

#include "tessel/tessel.h"

struct train_run;

/* train_load's token branch (train_opts_tokens): r->train_src (the training
 * token source the loop's loader walks) and r->val_src, the step counts and
 * the LR schedule as for images. Needs o->seq and o->vocab set. Returns
 * CLI_EXIT_OK or an exit code after printing why (a missing KJV corpus gets
 * a hint saying how to make it). */
int train_text_load(struct train_run *r);

/* Validation batch i (0 <= i < --eval-batches) of --batch windows: x and y
 * (B, T) i32 uploaded into the buffers (any sharding). The batches are the
 * same at every call (fixed positions); asking for them in order 0, 1, ... is
 * cheapest (a prefetching loader, no shuffle). 0 or -1 (error set). */
int train_text_val_batch(struct train_run *r, int64_t i, ts_buffer *x, ts_buffer *y);
/* The same batch as host arrays (B * T i32 each, row-major), valid until the
 * next call of either function. */
int train_text_val_host(struct train_run *r, int64_t i, const int32_t **x, const int32_t **y);

/* Releases the validation loader and source (train.c). */
void train_text_free(struct train_run *r);

#endif
