/* train_step.c — benchmark: time of one tessel training step (forward, loss,
 * backward, AdamW or SGD update; one compiled program) for the MLP (batch 128)
 * and the MNIST CNN (batch 64, dropout on), fp32.
 *
 *   usage: bench_train_step [--model mlp|cnn|resnet20|all] [--steps N] [--warmup N]
 *                           [--threads N (2)] [--optimizer adamw|sgd]
 *                           [--parallel none|spmd|ddp|fsdp] [--batch B (global)]
 *                           [--devices N (1)] [--replicated-update] [--bind]
 *                           [--bucket-kib K (DDP's gradient buckets; 0: 1 MiB)] [--local-bn]
 *
 * --devices N with --parallel spmd|fsdp: one process, N virtual devices on a
 * mesh data=N (fsdp=N), the threads shared out over them (bench/run_dp.sh).
 *
 * Under mpirun with --parallel: data parallel over the processes (one device
 * each) on the same global batch: spmd = the sharded program on mesh
 * data=P; fsdp = mesh fsdp=P (weights and optimizer state sharded too);
 * ddp = one replica per process, gradients averaged in buckets
 * (overlapped), the weights' update sharded over the replicas
 * (ts_compile_options.shard_update; --replicated-update: every replica
 * updates everything, as PyTorch's DDP); batch norm over the global batch
 * (sync_bn, PyTorch's SyncBatchNorm) unless --local-bn: each replica's own
 * rows (tessel train's DDP default, PyTorch DDP without SyncBatchNorm; the
 * per-replica program is then one process's at batch B/P plus the gradient
 * averaging). Rank 0 prints "RESULT tessel-spmd|-fsdp|-ddp <model> batch=B
 * procs=P ..." (B the global batch). bench/run_ddp.sh compares them with one
 * process and with PyTorch DDP.
 *
 * Random data (a few pre-generated batches, cycled); each timed step writes
 * the batch, executes and reads the loss back (a full synchronization).
 * Warm-up: 20 untimed steps by default, as bench/torch_train_step.py (both
 * sides of a comparison warm up equally; the run scripts pass --warmup to
 * both). Prints one line per model:
 *   RESULT tessel <model> batch=B steps=N warmup=W median_ms=.. p25_ms=.. p75_ms=.. samples_per_s=..
 *          final_loss=L check_loss=L2 grad_bytes=G net_bytes=S cpu_ms=C ar_ms=A backoffs=K copied_bytes=Y
 * (samples/s from the median; L the loss of the last step, %.9g: every
 * configuration runs the same steps on the same data; L2 the loss of the
 * second step, after one update: the scripts check every configuration's L2
 * against one device's (1e-4), since over tens of steps the conv nets'
 * curves drift apart by rounding alone, 1e-3 after 50 steps, measured); G the
 * gradients' bytes, S the bytes rank 0 sent to other processes per timed step
 * (metrics NetBytesSent: bench/run_multihost.sh's communication model).
 * C: this process's CPU time per timed step, all threads (rank 0's under
 * mpirun): the work a step costs, much less disturbed by other jobs than the
 * wall time, but inflated by spinning waits (OpenMP's, the collectives').
 * bench/run_train_step.sh compares it with bench/torch_train_step.py.
 * K: how often rank 0's devices backed off to the worker over the timed
 * steps after waiting long for late peers (metrics CommHostBackoff, comm.c).
 * Y: the bytes rank 0's collectives between processes still packed or
 * unpacked per timed step (metrics CommHierCopyBytes, comm/hier.c).
 * A: the median time of one all-reduce of G bytes over the same devices
 * (0 on one device), measured after the steps: the collective bandwidth of
 * bench/run_dp.sh's modeled bound. DDP runs batch norm over the global
 * batch (sync_bn) unless --local-bn, so every configuration computes the
 * same step; the RESULT line says sync_bn=0|1 for DDP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h> // clock_gettime

#include "bench_util.h" /* now_s, cmp_double, median */
#include "model_graph.h" /* the training step of tessel train */
#include "train_mesh.h"  /* the data-parallel shardings of tessel train --mesh */

#include "tessel/tessel.h"

#define N_BATCHES 4

static void die(const char *what) {
  fprintf(stderr, "bench_train_step: %s: %s\n", what, ts_last_error());
  exit(1);
}

enum { PAR_NONE, PAR_SPMD, PAR_DDP, PAR_FSDP };

/* CPU seconds of this process (every thread), CLOCK_PROCESS_CPUTIME_ID. */
static double cpu_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Median ms of one f32 all-reduce (sum) of numel elements over every device
 * of c (a replica program: in shared memory between the devices of a
 * process, through MPI between processes): the collective bandwidth the
 * run scripts' modeled bound uses. Collective under mpirun. */
static double all_reduce_ms(ts_client *c, int64_t numel) {
  enum { REPS = 12 };
  ts_graph *g = ts_graph_new();
  ts_tensor v = ts_input(g, "v", TS_F32, 1, &numel);
  if (ts_graph_add_output(g, ts_replica_all_reduce(g, v, TS_REDUCE_SUM)) < 0) die("all-reduce graph");
  ts_executable *e = ts_compile(c, g, &(ts_compile_options){.replicas = true});
  ts_buffer *in = ts_buffer_new(c, TS_F32, 1, &numel), *out = ts_buffer_new(c, TS_F32, 1, &numel);
  if (!e || !in || !out) die("all-reduce program");
  double ms[REPS];
  for (int r = -3; r < REPS; r++) {
    double t0 = now_s();
    if (ts_execute(e, &in, &out) < 0) die("all-reduce");
    if (r >= 0) ms[r] = 1e3 * (now_s() - t0);
  }
  qsort(ms, REPS, sizeof *ms, cmp_double);
  ts_buffer_free(in), ts_buffer_free(out);
  ts_executable_free(e);
  ts_graph_free(g);
  return ms[REPS / 2];
}

static bool replicated_update; /* --replicated-update: every device (replica) updates every weight (A/B) */
static bool bind_cores;        /* --bind: device threads pinned to cores (ts_client_options.bind_cores) */
static size_t bucket_bytes;    /* --bucket-kib: DDP's gradient bucket size (0: ts_ddp_average_gradients' 1 MiB) */
static bool local_bn;          /* --local-bn: DDP batch norm over each replica's rows (no sync_bn) */

static void bench(const char *model, int64_t B, int steps, int warmup, int threads, ts_optim_kind optim, int par,
                  int devices) {
  ts_client_options copts = {.num_threads = threads, .num_devices = par && devices <= 1 ? 1 : devices,
                             .bind_cores = bind_cores};
  ts_client *c = ts_client_new(&copts);
  ts_params *p = ts_params_new(1);
  if (!c || !p) die("setup");
  int P = ts_client_process_count(c), rank = ts_client_process_index(c);
  int D = ts_client_num_devices(c); /* mesh size: processes x local devices */
  if (par == PAR_DDP && B % P) die("the batch does not divide over the processes");
  int64_t Bl = par == PAR_DDP ? B / P : B; /* this replica's rows */
  // The same training step tessel train runs (tools/model_graph.c).
  model_graph_spec spec = {.model = !strcmp(model, "mlp")   ? MODEL_GRAPH_MLP
                                    : !strcmp(model, "cnn") ? MODEL_GRAPH_CNN
                                                            : MODEL_GRAPH_RESNET20,
                           .batch = Bl, .c = 1, .h = 28, .w = 28,
                           .optim = {.kind = optim, .momentum = 0.9, .weight_decay = 0.01},
                           .ddp = par == PAR_DDP, .ddp_bucket_bytes = bucket_bytes,
                           /* batch norm over the global batch, as one device and SPMD (ResNet-20) */
                           .sync_bn = par == PAR_DDP && !local_bn};
  ts_graph *g = model_train_graph(&spec, p);
  if (!g) die("building the step");
  ts_mesh *mesh = NULL;
  char mesh_text[32];
  snprintf(mesh_text, sizeof mesh_text, "%s=%d", par == PAR_FSDP ? "fsdp" : "data", D);
  if ((par == PAR_SPMD || par == PAR_FSDP) && (!(mesh = ts_mesh_from_text(mesh_text)) ||
       (replicated_update ? train_mesh_mark_replicated_update(g, mesh, false) : train_mesh_mark(g, mesh, false)) < 0))
    die("sharding the step");
  /* DDP: the update sharded over the replicas (ZeroRedundancyOptimizer) unless --replicated-update */
  ts_compile_options co = {.replicas = par == PAR_DDP, .shard_update = par == PAR_DDP && !replicated_update,
                           .mesh = mesh};
  double tc = now_s();
  ts_executable *exe = ts_compile(c, g, &co);
  if (!exe) die("compile");
  tc = now_s() - tc;

  // Inputs bound by name; random data pre-generated.
  int n_out = ts_graph_num_outputs(g);
  ts_buffer **out = calloc((size_t)n_out, sizeof *out);
  model_io io; // x, y, lr, step, seed, loss; parameters bound by name
  if (model_io_bind(&io, g, p, c) < 0) die("binding the inputs");
  float *xh = malloc((size_t)(N_BATCHES * B * 784) * sizeof *xh); // (N_BATCHES, B, 1, 28, 28)
  int32_t *yh = malloc((size_t)(N_BATCHES * B) * sizeof *yh);      // (N_BATCHES, B)
  uint64_t s = 12345;
  for (int64_t i = 0; i < N_BATCHES * B * 784; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    xh[i] = (float)((double)(s >> 40) / (double)(1u << 24) * 2.0 - 0.5);
  }
  for (int64_t i = 0; i < N_BATCHES * B; i++) yh[i] = (int32_t)(i * 7 % 10);

  double *ms = malloc((size_t)steps * sizeof *ms);
  double cpu0 = 0; /* process CPU time over the timed steps: the work, whatever else runs on the cores */
  float final_loss = 0, check_loss = 0; /* check: the loss of the second step (one update done) */
  int64_t net0 = 0, copy0 = 0; /* NetBytesSent, CommHierCopyBytes (metrics) when the timed steps start */
  int64_t backoff0 = ts_counter_value("CommHostBackoff"); /* from the start: one in the warm-up lasts 256 decisions */
  for (int t = 0; t < warmup + steps; t++) {
    if (t == warmup) cpu0 = cpu_s();
    if (t == warmup) net0 = ts_counter_value("NetBytesSent"), copy0 = ts_counter_value("CommHierCopyBytes");
    double t0 = now_s();
    int k = t % N_BATCHES;
    float lrv = 1e-3f, stepv = (float)(t + 1), lossv;
    int64_t seedv = t;
    int64_t row = k * B + (par == PAR_DDP ? rank * Bl : 0);
    ts_buffer_write(io.x, xh + row * 784, (size_t)(Bl * 784) * sizeof(float));
    ts_buffer_write(io.y, yh + row, (size_t)Bl * sizeof(int32_t));
    ts_buffer_write(io.lr, &lrv, sizeof lrv);
    ts_buffer_write(io.step, &stepv, sizeof stepv);
    ts_buffer_write(io.seed, &seedv, sizeof seedv);
    out[0] = io.result;
    for (int o = 1; o < n_out; o++) out[o] = NULL; // aliased to parameters
    if (ts_execute(exe, io.in, out) < 0) die("execute");
    if (ts_buffer_read(io.result, &lossv, sizeof lossv) < 0) die("reading the loss");
    final_loss = lossv;
    if (t == 1) check_loss = lossv;
    if (t >= warmup) ms[t - warmup] = 1e3 * (now_s() - t0);
  }
  double cpu_ms = 1e3 * (cpu_s() - cpu0) / (steps > 0 ? steps : 1);
  double net_bytes = (double)(ts_counter_value("NetBytesSent") - net0) / steps; /* to other processes, a step */
  long long backoffs = (long long)(ts_counter_value("CommHostBackoff") - backoff0); /* rank 0's, warm-up included */
  double copied = (double)(ts_counter_value("CommHierCopyBytes") - copy0) / steps; /* packed/unpacked, a step */
  double ar_ms = D > 1 ? all_reduce_ms(c, ts_params_trainable_numel(p)) : 0;
  qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
  double med = ms[steps / 2], p25 = ms[steps / 4], p75 = ms[(3 * steps) / 4];
  static const char *const label[] = {"tessel", "tessel-spmd", "tessel-ddp", "tessel-fsdp"};
  if (rank == 0) {
    fprintf(stderr, "%s %s: compile %.2fs, %d params, %d threads x %d processes\n", label[par], model, tc,
            (int)ts_params_trainable_numel(p), ts_client_num_threads(c), P);
    printf("RESULT %s %s batch=%lld procs=%d devices=%d steps=%d warmup=%d median_ms=%.3f p25_ms=%.3f p75_ms=%.3f "
           "samples_per_s=%.1f final_loss=%.9g check_loss=%.9g grad_bytes=%lld net_bytes=%.0f cpu_ms=%.3f "
           "ar_ms=%.3f backoffs=%lld copied_bytes=%.0f sync_bn=%d\n",
           label[par], model, (long long)B, P, D, steps, warmup, med, p25, p75, 1e3 * (double)B / med, final_loss,
           check_loss, (long long)(4 * ts_params_trainable_numel(p)), net_bytes, cpu_ms, ar_ms, backoffs,
           copied, par == PAR_DDP && !local_bn);
    fflush(stdout);
  }
  ts_mesh_free(mesh);

  free(ms), free(xh), free(yh), free(out);
  model_io_free(&io);
  ts_executable_free(exe);
  ts_graph_free(g);
  ts_params_free(p);
  ts_client_free(c);
}

int main(int argc, char **argv) {
  const char *model = "all";
  int steps = 0, warmup = 20, threads = 2; /* warm-up: torch_train_step.py's */
  ts_optim_kind optim = TS_OPTIM_ADAMW;
  int par = PAR_NONE;
  int64_t batch = 0; /* 0: the model's (MLP 128, CNN 64, ResNet-20 128) */
  int devices = 1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--replicated-update") || !strcmp(argv[i], "--bind") || !strcmp(argv[i], "--local-bn")) {
      *(argv[i][2] == 'r' ? &replicated_update : argv[i][2] == 'b' ? &bind_cores : &local_bn) = true;
      continue;
    }
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "bench_train_step: %s needs a value\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--model")) model = v;
    else if (!strcmp(argv[i], "--steps")) steps = atoi(v);
    else if (!strcmp(argv[i], "--warmup")) warmup = atoi(v);
    else if (!strcmp(argv[i], "--threads")) threads = atoi(v);
    else if (!strcmp(argv[i], "--optimizer")) optim = !strcmp(v, "sgd") ? TS_OPTIM_SGD : TS_OPTIM_ADAMW;
    else if (!strcmp(argv[i], "--batch")) batch = atoll(v);
    else if (!strcmp(argv[i], "--devices")) devices = atoi(v);
    else if (!strcmp(argv[i], "--bucket-kib")) bucket_bytes = (size_t)atoll(v) << 10;
    else if (!strcmp(argv[i], "--parallel") &&
             (!strcmp(v, "none") || !strcmp(v, "spmd") || !strcmp(v, "ddp") || !strcmp(v, "fsdp")))
      par = !strcmp(v, "spmd") ? PAR_SPMD : !strcmp(v, "ddp") ? PAR_DDP : !strcmp(v, "fsdp") ? PAR_FSDP : PAR_NONE;
    else {
      fprintf(stderr, "usage: bench_train_step [--model mlp|cnn|resnet20|all] [--steps N] [--warmup N] "
                      "[--threads N] [--optimizer adamw|sgd] [--parallel none|spmd|ddp|fsdp] [--batch B] "
                      "[--devices N] [--replicated-update] [--bind] [--bucket-kib K] [--local-bn]\n");
      return 2;
    }
    i++;
  }
  bool all = !strcmp(model, "all");
  if (!all && strcmp(model, "mlp") && strcmp(model, "cnn") && strcmp(model, "resnet20")) {
    fprintf(stderr, "bench_train_step: --model: unknown model '%s' (valid: mlp, cnn, resnet20, all)\n", model);
    return 2;
  }
  if (steps < 0 || warmup < 0 || threads < 1 || batch < 0 || devices < 1 || (devices > 1 && par != PAR_SPMD &&
                                                                             par != PAR_FSDP)) {
    fprintf(stderr, "bench_train_step: --steps/--warmup must be >= 0, --threads and --devices >= 1 "
                    "(--devices > 1 with --parallel spmd or fsdp)\n");
    return 2;
  }
  if (all || !strcmp(model, "mlp")) bench("mlp", batch ? batch : 128, steps ? steps : 100, warmup, threads, optim, par, devices);
  if (all || !strcmp(model, "cnn")) bench("cnn", batch ? batch : 64, steps ? steps : 30, warmup, threads, optim, par, devices);
  if (all || !strcmp(model, "resnet20"))
    bench("resnet20", batch ? batch : 128, steps ? steps : 20, warmup, threads, optim, par, devices);
  return 0;
}
