/* tessel/nn.h — layers, models, initialization, optimizers and schedules,
 * built only on the public graph API.
 *
 * Parameters are graph inputs with names ("fc1.weight"). A ts_params set owns
 * their host values (PyTorch-compatible default initialization) and their
 * device buffers; any number of graphs (a training step, an evaluation
 * forward) bind the same parameters by name. */
#ifndef TESSEL_NN_H
#define TESSEL_NN_H

#include "tessel/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

/* ---- parameter sets ---- */
typedef enum {
  TS_INIT_ZEROS,
  TS_INIT_ONES,
  TS_INIT_UNIFORM,        /* U(-bound, bound) with bound = a */
  TS_INIT_FAN_IN_UNIFORM, /* U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's Linear/Conv default */
  TS_INIT_NORMAL          /* N(0, a^2) */
} ts_init_kind;

typedef struct {
  ts_init_kind kind;
  double a;       /* bound or std */
  int64_t fan_in; /* for TS_INIT_FAN_IN_UNIFORM */
} ts_init;

typedef struct ts_params ts_params;

/* seed drives every initializer, in declaration order. The set is the
 * caller's; ts_params_free also frees every device buffer it made
 * (ts_params_buffer), so call it before ts_client_free of those clients. */
ts_params *ts_params_new(uint64_t seed);
void ts_params_free(ts_params *p);
int ts_params_count(const ts_params *p);
const char *ts_params_name(const ts_params *p, int i);
/* Trainable parameters get gradients and optimizer updates; state (optimizer
 * moments, batch-norm running statistics) does not. */
bool ts_params_trainable(const ts_params *p, int i);
int ts_params_find(const ts_params *p, const char *name); /* index or -1 */
int64_t ts_params_numel(const ts_params *p, int i);
/* Total elements of trainable parameters. */
int64_t ts_params_trainable_numel(const ts_params *p);

/* Declares parameter `name` (first use: records shape, dtype, init and draws
 * its host value) and returns its input node in g (created on first use in g).
 * A later declaration with another shape or dtype is an error naming both. */
ts_tensor ts_params_use(ts_params *p, ts_graph *g, const char *name, ts_dtype dt, int rank,
                        const int64_t *shape, ts_init init, bool trainable);
/* Host value access (row-major, the parameter's dtype; borrowed from p, like
 * ts_params_name). Writing marks the device copy stale; ts_params_sync_host
 * pulls device values back. */
void *ts_params_host(ts_params *p, int i);
/* Device buffer of parameter i on client c (created from the host value on
 * first use; one per client). Borrowed: the set owns it, frees it in
 * ts_params_free, and returns the same buffer on every call; never
 * ts_buffer_free it. */
ts_buffer *ts_params_buffer(ts_params *p, ts_client *c, int i);
int ts_params_sync_host(ts_params *p);

/* ---- building layers ---- */
/* The context a model is built in: graph, parameters, mode, and the random
 * seed input used by dropout. Layers record batch-norm running-stat updates
 * in it; ts_nn_finish turns them into aliased outputs. */
typedef struct {
  ts_graph *g;
  ts_params *p;
  bool training;
  ts_tensor seed;     /* rank-0 i64 input; TS_NONE disables dropout */
  uint64_t next_key;  /* rng key counter for dropout layers */
  int n_updates;
  ts_tensor update_param[512]; /* ResNet-50 has 53 batch norms, 2 statistics each */
  ts_tensor update_value[512];
  /* DDP replica programs (ts_compile_options.replicas): training-mode batch
   * norm takes its statistics over every replica's batch (PyTorch's
   * SyncBatchNorm: the means of x - K and (x - K)^2, K the running mean,
   * averaged together by one ts_replica_all_reduce, equal replica batches
   * assumed; the backward pass all-reduces both cotangents in one too). false (ts_nn_init): each replica's own batch, like
   * DDP without SyncBatchNorm. Set after ts_nn_init. */
  bool sync_bn;
  /* sync_bn's replica count (an all-reduce of 1), made by the first batch
   * norm and read by the others: one collective per step, not one per layer
   * (each a wait for the other replicas). TS_NONE until then (ts_nn_init). */
  ts_tensor sync_replicas;
  /* The activation layout of ts_nn_conv2d, ts_nn_batch_norm and
   * ts_model_resnet's inner layers: TS_LAYOUT_NCHW (ts_nn_init), or
   * TS_LAYOUT_NHWC (channels last: x (N, H, W, C) for the layers; a ResNet
   * still takes (B, C, H, W) and transposes it once). Parameters keep their
   * names and shapes (OIHW weights, (C) statistics) in both. Set after
   * ts_nn_init. */
  ts_layout layout;
} ts_nn;

void ts_nn_init(ts_nn *m, ts_graph *g, ts_params *p, bool training, ts_tensor seed);
/* Adds the recorded state updates as outputs aliased to their parameters. */
int ts_nn_finish(ts_nn *m);

/* x (..., in) -> (..., out); weight (out, in), bias (out), PyTorch init. */
ts_tensor ts_nn_linear(ts_nn *m, const char *name, ts_tensor x, int64_t in, int64_t out, bool bias);
/* x (N, Cin, H, W) -> (N, Cout, OH, OW); weight (Cout, Cin, k, k). With
 * m->layout NHWC: x (N, H, W, Cin) -> (N, OH, OW, Cout), the same weight. */
ts_tensor ts_nn_conv2d(ts_nn *m, const char *name, ts_tensor x, int64_t cin, int64_t cout, int k,
                       int stride, int pad, bool bias);
/* The same with the weight's initializer given (NULL: PyTorch's default);
 * the bias, if any, keeps PyTorch's default. */
ts_tensor ts_nn_conv2d_init(ts_nn *m, const char *name, ts_tensor x, int64_t cin, int64_t cout, int k,
                            int stride, int pad, bool bias, const ts_init *w_init);
/* (N, C, ...) batch norm with affine weight/bias and running stats
 * (momentum 0.1, eps 1e-5, PyTorch semantics: running var is unbiased).
 * With m->layout NHWC: x (N, ..., C), the channels in the last dim. */
ts_tensor ts_nn_batch_norm(ts_nn *m, const char *name, ts_tensor x, int64_t c);
ts_tensor ts_nn_layer_norm(ts_nn *m, const char *name, ts_tensor x, int64_t d);
/* indices (...) int -> (..., d); weight (v, d) ~ N(0, 1). */
ts_tensor ts_nn_embedding(ts_nn *m, const char *name, ts_tensor indices, int64_t v, int64_t d);
/* Identity unless training and seed is set. */
ts_tensor ts_nn_dropout(ts_nn *m, ts_tensor x, double p);

/* ---- models ---- */
/* 784-512-512-10 with ReLU; x (B, 1, 28, 28) or (B, 784) f32 -> logits (B, 10). */
ts_tensor ts_model_mlp(ts_nn *m, ts_tensor x);
/* The PyTorch MNIST example network: conv 1->32 3x3, ReLU, conv 32->64 3x3,
 * ReLU, max-pool 2, dropout 0.25, fc 9216-128, ReLU, dropout 0.5, fc 128-10.
 * x (B, 1, 28, 28) -> logits (B, 10). */
ts_tensor ts_model_mnist_cnn(ts_nn *m, ts_tensor x);

/* ResNets with torchvision's layer names (conv1, bn1, layer1.0.conv1,
 * layer1.0.downsample.0, ..., fc) and initialization (convolutions Kaiming
 * normal, fan_out, ReLU gain; batch-norm weight 1, bias 0; fc PyTorch's
 * Linear default). x (B, C, H, W) f32 with any C -> logits (B, classes).
 *  - resnet20: He et al. 2016's CIFAR layout: 3x3 stem of 16 channels,
 *    stages of 16/32/64 channels with 3 BasicBlocks each, 1x1-conv + BN
 *    projection shortcuts where the shape changes, global average pool.
 *  - resnet18: the CIFAR variant: 3x3 stem of 64, no max-pool, stages
 *    64/128/256/512 of 2 BasicBlocks (11.2 M parameters at 10 classes).
 *  - resnet50: torchvision v1.5: 7x7/2 stem + 3x3/2 max-pool, Bottleneck
 *    stages 3/4/6/3 (stride on the 3x3 conv) of 64..512 x4 channels (25.6 M
 *    parameters at 1000 classes).
 * An input too small for the strides is an error naming its size. */
typedef enum { TS_RESNET20, TS_RESNET18, TS_RESNET50 } ts_resnet_kind;
ts_tensor ts_model_resnet(ts_nn *m, ts_resnet_kind kind, ts_tensor x, int64_t classes);

/* ---- GPT (nanoGPT) ----
 * A decoder-only transformer with nanoGPT's layout, parameter names and
 * initialization (bias=True): transformer.wte.weight (vocab, d) and
 * transformer.wpe.weight (seq, d) ~ N(0, 0.02); per block l
 * transformer.h.<l>.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
 * mlp.c_proj}.{weight, bias} (Linear weights (out, in) ~ N(0, 0.02), the two
 * c_proj weights N(0, 0.02 / sqrt(2 * layers)), biases 0, layer norms weight
 * 1, bias 0, eps 1e-5); transformer.ln_f; the LM head is wte (tied).
 * Blocks are pre-LN: h += attn(ln_1(h)); h += mlp(ln_2(h)), the MLP
 * d -> 4d -> d with exact GELU; attention is ts_causal_attention_qkv on
 * c_attn's packed (B, T, 3, heads, d / heads). Dropout (embeddings, attention output, MLP
 * output) applies only when training with a seed. */
typedef struct {
  int64_t layers, d_model, heads, seq, vocab; /* seq: the position table's length */
  double dropout;
  /* Tensor parallelism (optional): the mesh the step will be compiled for.
   * With an axis "model" of size > 1, heads, vocab (and with
   * sequence_parallel the sequence) must divide over it (checked). The
   * parameters' Megatron layout is marked by the caller (tools/train_mesh.c:
   * c_attn (3, C, C) and mlp.c_fc split on their output features, the two
   * c_proj on their input features, wte on the vocabulary); with
   * sequence_parallel the builder itself marks the residual stream split on
   * the sequence over "model" and each layer norm's output whole on it (the
   * batch over "data" and "fsdp" where the mesh has them), so the
   * activation all-reduces become reduce-scatter + all-gather pairs. */
  const struct ts_mesh *mesh;
  bool sequence_parallel;
} ts_gpt_config;
/* 0, or -1 with an error naming the bad value (heads not dividing d_model, ...). */
int ts_gpt_config_check(const ts_gpt_config *c);
/* x (B, T) i32/i64 tokens, T <= seq -> logits (B, T, vocab) f32. A T longer
 * than seq is an error naming both. */
ts_tensor ts_model_gpt(ts_nn *m, const ts_gpt_config *c, ts_tensor x);
/* Mean cross-entropy (nats per token) of logits (B, T, V) against targets
 * (B, T) integers. */
ts_tensor ts_gpt_loss(ts_graph *g, ts_tensor logits, ts_tensor y);
/* nanoGPT's weight-decay rule: a parameter of rank >= 2 (matrices and the
 * embeddings) decays, vectors (biases, norms) do not. */
bool ts_gpt_param_decays(int rank);

/* ---- optimizers ---- */
typedef enum { TS_OPTIM_SGD, TS_OPTIM_ADAMW } ts_optim_kind;

typedef struct {
  ts_optim_kind kind;
  double momentum;     /* SGD */
  bool nesterov;       /* SGD */
  double weight_decay; /* SGD: L2 added to the gradient; AdamW: decoupled */
  double beta1, beta2, eps; /* AdamW (0 = 0.9, 0.999, 1e-8) */
  /* > 0: before the update every gradient is scaled by
   * min(1, clip_norm / (total_norm + 1e-6)), total_norm the L2 norm of all
   * the gradients together (torch.nn.utils.clip_grad_norm_). It is computed
   * inside the program over the global gradients, so under SPMD it is the
   * norm over every shard (the partitioner inserts the reduction). */
  double clip_norm;
  /* Weight decay only on parameters of rank >= 2 (matrices, embeddings;
   * nanoGPT's rule), none on biases and norm weights. */
  bool decay_matrices_only;
} ts_optim_config;

/* Appends to m->g the update of each trainable parameter params[i] given its
 * gradient grads[i]. Reads the learning rate from the rank-0 f32 input
 * `lr` and the 1-based step number from the rank-0 f32 input `step` (bias
 * correction). Creates state parameters ("<name>.momentum_buffer", "<name>.exp_avg",
 * "<name>.exp_avg_sq") and adds every new value as an output aliased to its
 * parameter, so an execute updates everything in place. */
int ts_optim_apply(ts_nn *m, const ts_optim_config *cfg, ts_tensor lr, ts_tensor step, int n,
                   const ts_tensor *params, const ts_tensor *grads);
/* The global L2 norm of n gradients as a rank-0 f32 node (the norm of the
 * per-tensor norms, as PyTorch computes it): what clip_norm compares. */
ts_tensor ts_global_norm(ts_graph *g, int n, const ts_tensor *grads);

/* ---- mixed precision: dynamic loss scaling (f16) ----
 * torch.cuda.amp.GradScaler inside the compiled step (no host round-trip):
 * the loss is multiplied by the scale, the gradients divided by it; if any
 * gradient holds an inf or NaN the update is skipped (every parameter and
 * optimizer state, AdamW's step count included, keeps its value bit for bit)
 * and the scale is multiplied by backoff_factor; after growth_interval clean
 * steps in a row it is multiplied by growth_factor. The decision is one value
 * for the whole program: the finiteness test reduces over the global
 * gradients (SPMD: the partitioner all-reduces it; DDP: it reads the averaged
 * gradients, identical on every replica). State (non-trainable parameters,
 * saved with the model): "amp.loss_scale", "amp.growth_tracker",
 * "amp.skipped_steps", "amp.optim_step" (rank-0 f32). Use it with
 * ts_compile_options.autocast = TS_F16. */
typedef struct {
  double init_scale;       /* 0: 65536 */
  double growth_factor;    /* 0: 2 */
  double backoff_factor;   /* 0: 0.5 */
  int64_t growth_interval; /* 0: 2000 */
} ts_loss_scaler_config;

typedef struct {
  ts_loss_scaler_config cfg; /* defaults filled in */
  ts_tensor scale;           /* rank-0 f32 state: the scale this step uses */
  ts_tensor finite;          /* rank-0 bool: every gradient finite (set by ts_loss_scaler_unscale) */
  ts_tensor optim_step;      /* rank-0 f32: 1-based count of applied updates including this one */
} ts_loss_scaler;

/* Declares the scaler state in m and returns loss * scale (differentiate
 * that). cfg NULL: GradScaler's defaults. */
ts_tensor ts_loss_scaler_scale(ts_nn *m, ts_loss_scaler *s, const ts_loss_scaler_config *cfg, ts_tensor loss);
/* grads[i] <- grads[i] / scale (f32 gradients), s->finite <- all of them
 * finite, and the scaler's state updates as aliased outputs (scale, growth
 * tracker, skipped steps, optimizer step). Call after any gradient averaging. */
int ts_loss_scaler_unscale(ts_nn *m, ts_loss_scaler *s, int n, ts_tensor *grads);
/* ts_optim_apply where every new value is select(keep_if, new, old): with
 * keep_if = s->finite and step = s->optim_step, a skipped step changes
 * nothing. keep_if TS_NONE: ts_optim_apply. */
int ts_optim_apply_masked(ts_nn *m, const ts_optim_config *cfg, ts_tensor lr, ts_tensor step, int n,
                          const ts_tensor *params, const ts_tensor *grads, ts_tensor keep_if);

/* ---- data parallel: DDP ----
 * For a replica program (ts_compile_options.replicas; one replica per
 * process, each on its own share of the global batch): replaces every
 * grads[i] by its mean over all replicas. Gradients are packed into buckets of
 * about bucket_bytes (0 = 1 MiB), from the last parameter to the first (the
 * order the backward pass produces them; a gradient of bucket_bytes or more
 * is a bucket of its own, reduced in place, and the bucket being filled stays
 * open across it, so small gradients on both sides of a large one share one
 * all-reduce; a bucket also closes where the dtype changes), one
 * ts_replica_all_reduce per bucket; the compiler starts each bucket's
 * all-reduce as soon as its gradients exist and the device keeps computing
 * the rest of the backward pass while it runs (overlap). Then every replica
 * applies the same update. Returns the number of buckets, or -1. */
int ts_ddp_average_gradients(ts_graph *g, int n, ts_tensor *grads, size_t bucket_bytes);
/* The same, and replaces each logged[i] (a value only reported, such as the
 * loss) by its mean over the replicas, packed into the bucket closed last
 * (the first parameters' gradients, the end of the backward pass; a logged
 * value of another dtype is reduced alone after it): no collective of its
 * own, where a ts_replica_all_reduce of the loss starts right after the
 * forward pass and, small, runs in line: each replica waits there for the
 * others. The values are those of ts_replica_all_reduce (mean), bit for bit.
 * tessel train's DDP step reports its loss so. */
int ts_ddp_average_gradients_logged(ts_graph *g, int n, ts_tensor *grads, size_t bucket_bytes, int n_logged,
                                    ts_tensor *logged);

/* ---- learning-rate schedules ---- */
typedef enum { TS_LR_CONSTANT, TS_LR_COSINE } ts_lr_kind;
typedef struct {
  ts_lr_kind kind;
  double base_lr;
  int64_t warmup_steps; /* linear warm-up from 0 */
  int64_t total_steps;  /* cosine decays to min_lr at total_steps */
  double min_lr;
} ts_lr_schedule;
/* Learning rate for 0-based step. */
double ts_lr_at(const ts_lr_schedule *s, int64_t step);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
