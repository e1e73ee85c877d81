/* resnet.c — the ResNet family (tessel/nn.h ts_model_resnet): the CIFAR
 * ResNet-20 of He et al. 2016, the CIFAR variant of ResNet-18 and
 * torchvision's ResNet-50 v1.5, with torchvision's parameter names and
 * initialization so weights and runs compare with PyTorch one to one.
 * With m->layout NHWC the input (B, C, H, W) is transposed once to channels
 * last and every layer runs there (oneDNN's convolutions then need no
 * layout reorders); the parameters are the same either way. */
#include <math.h>
#include <stdio.h>

#include "tessel/nn.h"
#include "util/error.h"

typedef struct {
  ts_nn *m;
  bool failed;
} net;

/* Kaiming normal, mode fan_out, ReLU gain: std = sqrt(2 / (cout * k * k)). */
static ts_tensor conv(net *n, const char *name, ts_tensor x, int64_t cin, int64_t cout, int k, int stride, int pad) {
  if (x == TS_NONE) return TS_NONE;
  ts_init w = {TS_INIT_NORMAL, sqrt(2.0 / (double)(cout * k * k)), 0};
  return ts_nn_conv2d_init(n->m, name, x, cin, cout, k, stride, pad, false, &w);
}

static ts_tensor bn(net *n, const char *name, ts_tensor x, int64_t c) {
  return x == TS_NONE ? TS_NONE : ts_nn_batch_norm(n->m, name, x, c);
}

static ts_tensor relu(net *n, ts_tensor x) { return x == TS_NONE ? TS_NONE : ts_relu(n->m->g, x); }

/* "<prefix>.<what>" into buf. */
static const char *pname(char *buf, size_t len, const char *prefix, const char *what) {
  snprintf(buf, len, "%s.%s", prefix, what);
  return buf;
}

/* The shortcut: identity, or a 1x1 conv + BN projection when the shape
 * changes (torchvision's "downsample.0/1"). */
static ts_tensor shortcut(net *n, const char *p, ts_tensor x, int64_t cin, int64_t cout, int stride) {
  if (stride == 1 && cin == cout) return x;
  char a[96];
  ts_tensor s = conv(n, pname(a, sizeof a, p, "downsample.0"), x, cin, cout, 1, stride, 0);
  return bn(n, pname(a, sizeof a, p, "downsample.1"), s, cout);
}

/* BasicBlock: 3x3 conv (stride) - BN - ReLU - 3x3 conv - BN, + shortcut, ReLU. */
static ts_tensor basic(net *n, const char *p, ts_tensor x, int64_t cin, int64_t planes, int stride) {
  char a[96];
  ts_tensor h = relu(n, bn(n, pname(a, sizeof a, p, "bn1"), conv(n, pname(a, sizeof a, p, "conv1"), x, cin, planes, 3, stride, 1), planes));
  h = bn(n, pname(a, sizeof a, p, "bn2"), conv(n, pname(a, sizeof a, p, "conv2"), h, planes, planes, 3, 1, 1), planes);
  ts_tensor s = shortcut(n, p, x, cin, planes, stride);
  return h == TS_NONE || s == TS_NONE ? TS_NONE : relu(n, ts_add(n->m->g, h, s));
}

/* Bottleneck v1.5: 1x1 - BN - ReLU - 3x3 (stride) - BN - ReLU - 1x1 (x4) - BN, + shortcut, ReLU. */
static ts_tensor bottleneck(net *n, const char *p, ts_tensor x, int64_t cin, int64_t planes, int stride) {
  char a[96];
  int64_t out = planes * 4;
  ts_tensor h = relu(n, bn(n, pname(a, sizeof a, p, "bn1"), conv(n, pname(a, sizeof a, p, "conv1"), x, cin, planes, 1, 1, 0), planes));
  h = relu(n, bn(n, pname(a, sizeof a, p, "bn2"), conv(n, pname(a, sizeof a, p, "conv2"), h, planes, planes, 3, stride, 1), planes));
  h = bn(n, pname(a, sizeof a, p, "bn3"), conv(n, pname(a, sizeof a, p, "conv3"), h, planes, out, 1, 1, 0), out);
  ts_tensor s = shortcut(n, p, x, cin, out, stride);
  return h == TS_NONE || s == TS_NONE ? TS_NONE : relu(n, ts_add(n->m->g, h, s));
}

typedef struct {
  const char *name;
  int stem;              /* 3: CIFAR 3x3/1 stem; 7: ImageNet 7x7/2 stem + max-pool */
  int64_t stem_channels;
  int stages, blocks[4];
  int64_t planes[4];
  bool bottleneck;
  int min_size;          /* smallest H and W the strides leave at least 1x1 of */
} arch;

static const arch archs[] = {
    [TS_RESNET20] = {"resnet20", 3, 16, 3, {3, 3, 3}, {16, 32, 64}, false, 4},
    [TS_RESNET18] = {"resnet18", 3, 64, 4, {2, 2, 2, 2}, {64, 128, 256, 512}, false, 8},
    [TS_RESNET50] = {"resnet50", 7, 64, 4, {3, 4, 6, 3}, {64, 128, 256, 512}, true, 32},
};

static int check_input(const ts_nn *m, const arch *a, ts_tensor x, int64_t classes) {
  if (!m || !m->g) return set_error("%s: the ts_nn context has no graph (call ts_nn_init)", a->name);
  if (x == TS_NONE) return -1;
  if (classes < 1) return set_error("%s: %lld classes (need >= 1)", a->name, (long long)classes);
  const int64_t *xs = ts_tensor_shape(m->g, x);
  if (ts_tensor_rank(m->g, x) != 4)
    return set_error("%s: expects x (B, C, H, W) but x has rank %d", a->name, ts_tensor_rank(m->g, x));
  if (xs[2] < a->min_size || xs[3] < a->min_size)
    return set_error("%s: input %lldx%lld is too small for its strides (need at least %dx%d)", a->name,
                        (long long)xs[2], (long long)xs[3], a->min_size, a->min_size);
  return 0;
}

ts_tensor ts_model_resnet(ts_nn *m, ts_resnet_kind kind, ts_tensor x, int64_t classes) {
  if (kind < TS_RESNET20 || kind > TS_RESNET50) {
    set_error("resnet: unknown kind %d", (int)kind);
    return TS_NONE;
  }
  const arch *a = &archs[kind];
  if (check_input(m, a, x, classes) < 0) return TS_NONE;
  net n = {m, false};
  ts_graph *g = m->g;
  int64_t c = ts_tensor_shape(g, x)[1];
  bool nhwc = m->layout == TS_LAYOUT_NHWC;
  if (nhwc) x = ts_transpose(g, x, (const int[]){0, 2, 3, 1}); // (B, H, W, C)
  ts_tensor h;
  if (a->stem == 7) {
    h = relu(&n, bn(&n, "bn1", conv(&n, "conv1", x, c, a->stem_channels, 7, 2, 3), a->stem_channels));
    ts_pool_params mp = {.kernel = {3, 3}, .stride = {2, 2}, .pad = {1, 1}, .layout = m->layout};
    if (h != TS_NONE) h = ts_max_pool2d(g, h, &mp);
  } else {
    h = relu(&n, bn(&n, "bn1", conv(&n, "conv1", x, c, a->stem_channels, 3, 1, 1), a->stem_channels));
  }
  int64_t cin = a->stem_channels;
  for (int s = 0; s < a->stages; s++) {
    for (int b = 0; b < a->blocks[s]; b++) {
      char p[32];
      snprintf(p, sizeof p, "layer%d.%d", s + 1, b);
      int stride = b == 0 && s > 0 ? 2 : 1;
      h = a->bottleneck ? bottleneck(&n, p, h, cin, a->planes[s], stride) : basic(&n, p, h, cin, a->planes[s], stride);
      cin = a->bottleneck ? a->planes[s] * 4 : a->planes[s];
    }
  }
  if (h == TS_NONE) return TS_NONE;
  int dims[2] = {nhwc ? 1 : 2, nhwc ? 2 : 3};
  h = ts_reduce(g, h, TS_REDUCE_MEAN, 2, dims, false); // (B, C): global average pool
  return ts_nn_linear(m, "fc", h, cin, classes, true);
}
