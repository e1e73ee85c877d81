/* model_graph.h — the training and evaluation graphs of the CLI's models,
 * shared by `tessel train` and `tessel inspect`. */
#ifndef TESSEL_TOOLS_MODEL_GRAPH_H
#define TESSEL_TOOLS_MODEL_GRAPH_H

#include "tessel/tessel.h"

enum { MODEL_GRAPH_MLP, MODEL_GRAPH_CNN, MODEL_GRAPH_RESNET20, MODEL_GRAPH_RESNET18, MODEL_GRAPH_RESNET50, MODEL_GRAPH_GPT };

typedef struct {
  int model;         /* MODEL_GRAPH_*; the CNN is the CIFAR one when c == 3 */
  int64_t batch;
  int c, h, w;       /* image shape */
  int classes;       /* logits per sample (0: 10) */
  ts_gpt_config gpt; /* MODEL_GRAPH_GPT: the model; x, y are (batch, gpt.seq) i32 tokens */
  ts_optim_config optim;
  /* DDP replica step (compile with ts_compile_options.replicas): batch is
   * this replica's share; gradients are averaged over the replicas in buckets
   * of ddp_bucket_bytes (0 = 1 MiB) and the loss output is the replicas' mean. */
  bool ddp;
  size_t ddp_bucket_bytes;
  /* Mixed precision: TS_F32 (0) off; TS_BF16 or TS_F16 (compile both programs
   * with ts_compile_options.autocast = amp). f16 adds the dynamic loss scaler
   * (tessel/nn.h ts_loss_scaler) to the training step; scaler = its config
   * (zeros: GradScaler's defaults). */
  ts_dtype amp;
  ts_loss_scaler_config scaler;
  /* DDP: batch-norm statistics over every replica's batch (SyncBatchNorm). */
  bool sync_bn;
  /* The ResNets' inner activation layout (ts_nn.layout; other models ignore it). */
  ts_layout layout;
} model_graph_spec;

/* The ResNets' activation layout for `--layout` (tessel train, inspect, plan):
 * layout is a ts_layout, or -1 when not given, which becomes NHWC for the
 * ResNets (their faster layout: README's "stop 34" rows) and NCHW for the
 * other models. Returns the layout, or -1 with the error set (naming
 * model_name) for NHWC on a model without a channels-last build. */
bool model_graph_is_resnet(int model);
int model_graph_layout(int model, const char *model_name, int layout);

/* The training step: inputs params + optimizer state, x (B,C,H,W) f32, y (B)
 * i32 (GPT: x, y (B,T) i32 tokens), lr, step (f32 scalars), seed (i64
 * scalar, dropout); output 0 is the loss, the rest are the in-place updates.
 * NULL on error (message set). */
ts_graph *model_train_graph(const model_graph_spec *s, ts_params *p);
/* The evaluation forward: x (batch,C,H,W) -> logits (batch,classes), training off.
 * GPT: x, y (batch, seq) i32 -> output 0 the mean cross-entropy (val loss). */
ts_graph *model_eval_graph(const model_graph_spec *s, int64_t batch, ts_params *p);
/* GPT sampling: x (1, seq) i32 -> logits (1, seq, vocab), training off. */
ts_graph *model_gpt_logits_graph(const model_graph_spec *s, ts_params *p);

/* The buffers a compiled step or evaluation program runs with, bound by input
 * name: "x", "y", "lr", "step", "seed" get new buffers of the graph's types
 * (NULL where the graph lacks the input), every other input must be a
 * parameter of p; result is a new buffer of output 0's type (loss or
 * logits). in[] (one per graph input) is what ts_execute takes. */
typedef struct {
  ts_buffer *x, *y, *lr, *step, *seed, *result; /* owned */
  ts_buffer **in;                               /* borrowed: the above or parameter buffers */
  int n_in;
} model_io;
/* 0, or -1 with the error set (model_io_free cleans up either way). */
int model_io_bind(model_io *io, const ts_graph *g, ts_params *p, ts_client *c);
void model_io_free(model_io *io);

#endif
