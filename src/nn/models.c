/* models.c — the reference models: a 784-512-512-10 MLP and the network of
 * PyTorch's examples/mnist (same layers, names and initialization, so
 * results can be compared with PyTorch run for run). Both return logits; the
 * loss applies log-softmax. */
#include <stdio.h>

#include "util/error.h"
#include "tessel/nn.h"

/* x (B, ...) with `features` elements per sample -> (B, features). */
static ts_tensor models_flatten(ts_nn *m, ts_tensor x, int64_t features, const char *model) {
  if (!m || !m->g) {
    set_error("%s: the ts_nn context has no graph (call ts_nn_init)", model);
    return TS_NONE;
  }
  if (x == TS_NONE) return TS_NONE;
  int r = ts_tensor_rank(m->g, x);
  int64_t numel = ts_tensor_numel(m->g, x);
  int64_t b = r ? ts_tensor_shape(m->g, x)[0] : 0;
  if (r < 2 || numel != b * features) {
    set_error("%s: expects x of shape (B, ...) with %lld values per sample, got rank %d with %lld values",
                 model, (long long)features, r, (long long)numel);
    return TS_NONE;
  }
  int64_t shape[2] = {b, features};
  return ts_reshape(m->g, x, 2, shape);
}

ts_tensor ts_model_mlp(ts_nn *m, ts_tensor x) {
  ts_tensor h = models_flatten(m, x, 784, "mlp"); // (B, 784)
  if (h == TS_NONE) return TS_NONE;
  h = ts_relu(m->g, ts_nn_linear(m, "fc1", h, 784, 512, true)); // (B, 512)
  h = ts_relu(m->g, ts_nn_linear(m, "fc2", h, 512, 512, true)); // (B, 512)
  return ts_nn_linear(m, "fc3", h, 512, 10, true);              // (B, 10)
}

ts_tensor ts_model_mnist_cnn(ts_nn *m, ts_tensor x) {
  if (!m || !m->g) {
    set_error("mnist_cnn: the ts_nn context has no graph (call ts_nn_init)");
    return TS_NONE;
  }
  if (x == TS_NONE) return TS_NONE;
  const int64_t *xs = ts_tensor_shape(m->g, x);
  int r = ts_tensor_rank(m->g, x);
  if (r != 4 || xs[1] != 1 || xs[2] != 28 || xs[3] != 28) {
    char buf[128];
    int o = snprintf(buf, sizeof buf, "(");
    for (int d = 0; d < r && o < (int)sizeof buf; d++)
      o += snprintf(buf + o, sizeof buf - (size_t)o, d ? ", %lld" : "%lld", (long long)xs[d]);
    if (o < (int)sizeof buf) snprintf(buf + o, sizeof buf - (size_t)o, ")");
    set_error("mnist_cnn: expects x (B, 1, 28, 28), got %s", buf);
    return TS_NONE;
  }
  ts_graph *g = m->g;
  ts_tensor h = ts_relu(g, ts_nn_conv2d(m, "conv1", x, 1, 32, 3, 1, 0, true)); // (B, 32, 26, 26)
  h = ts_relu(g, ts_nn_conv2d(m, "conv2", h, 32, 64, 3, 1, 0, true));        // (B, 64, 24, 24)
  ts_pool_params pool = {.kernel = {2, 2}, .stride = {2, 2}};
  h = ts_max_pool2d(g, h, &pool); // (B, 64, 12, 12)
  h = ts_nn_dropout(m, h, 0.25);
  h = models_flatten(m, h, 9216, "mnist_cnn");                    // (B, 9216)
  h = ts_relu(g, ts_nn_linear(m, "fc1", h, 9216, 128, true));     // (B, 128)
  h = ts_nn_dropout(m, h, 0.5);
  return ts_nn_linear(m, "fc2", h, 128, 10, true); // (B, 10)
}
