/* amp.c — the dynamic loss scaler of f16 mixed precision
 * (torch.cuda.amp.GradScaler: scale, unscale_, step, update) as graph nodes of
 * the training step. Its state is four rank-0 f32 parameters, not trainable:
 *   amp.loss_scale       the scale (starts at init_scale)
 *   amp.growth_tracker   clean steps since the last change of the scale
 *   amp.skipped_steps    updates skipped so far (inf/NaN gradients)
 *   amp.optim_step       updates applied so far (AdamW's step count) */
#include <math.h>
#include <string.h>

#include "tessel/nn.h"
#include "util/error.h"

/* The rank-0 f32 state `name`, set to `init` on its first declaration. */
static ts_tensor amp_state(ts_nn *m, const char *name, double init) {
  bool fresh = ts_params_find(m->p, name) < 0;
  ts_tensor t = ts_params_use(m->p, m->g, name, TS_F32, 0, NULL, (ts_init){TS_INIT_ZEROS, 0, 0}, false);
  if (t != TS_NONE && fresh && init != 0) {
    float *h = ts_params_host(m->p, ts_params_find(m->p, name));
    if (!h) return TS_NONE;
    *h = (float)init;
  }
  return t;
}

static int amp_write(ts_graph *g, ts_tensor into, ts_tensor value) {
  if (value == TS_NONE) return -1;
  int o = ts_graph_add_output(g, value);
  return o < 0 ? -1 : ts_graph_alias_output(g, o, into);
}

ts_tensor ts_loss_scaler_scale(ts_nn *m, ts_loss_scaler *s, const ts_loss_scaler_config *cfg, ts_tensor loss) {
  if (!m || !m->g || !m->p || !s) {
    set_error("ts_loss_scaler_scale: NULL argument");
    return TS_NONE;
  }
  memset(s, 0, sizeof *s);
  s->scale = s->finite = s->optim_step = TS_NONE;
  if (cfg) s->cfg = *cfg;
  ts_loss_scaler_config *c = &s->cfg;
  if (c->init_scale == 0) c->init_scale = 65536.0;
  if (c->growth_factor == 0) c->growth_factor = 2.0;
  if (c->backoff_factor == 0) c->backoff_factor = 0.5;
  if (c->growth_interval == 0) c->growth_interval = 2000;
  if (!(c->init_scale > 0) || !isfinite(c->init_scale) || !(c->growth_factor > 1) || !(c->backoff_factor > 0) ||
      !(c->backoff_factor < 1) || c->growth_interval < 1) {
    set_error("ts_loss_scaler_scale: bad config (init_scale %g > 0, growth_factor %g > 1, backoff_factor %g in "
              "(0, 1), growth_interval %lld >= 1)",
              c->init_scale, c->growth_factor, c->backoff_factor, (long long)c->growth_interval);
    return TS_NONE;
  }
  ts_graph *g = m->g;
  if (loss == TS_NONE || loss < 0 || loss >= ts_graph_num_nodes(g) || ts_tensor_rank(g, loss) != 0 ||
      !ts_dtype_is_float(ts_tensor_dtype(g, loss))) {
    set_error("ts_loss_scaler_scale: the loss must be a rank-0 float tensor (tensor %d)", loss);
    return TS_NONE;
  }
  s->scale = amp_state(m, "amp.loss_scale", c->init_scale);
  if (s->scale == TS_NONE) return TS_NONE;
  ts_dtype dt = ts_tensor_dtype(g, loss);
  return ts_mul(g, loss, dt == TS_F32 ? s->scale : ts_convert(g, s->scale, dt));
}

int ts_loss_scaler_unscale(ts_nn *m, ts_loss_scaler *s, int n, ts_tensor *grads) {
  if (!m || !m->g || !s || s->scale == TS_NONE || (n > 0 && !grads))
    return set_error("ts_loss_scaler_unscale: NULL argument or a scaler without ts_loss_scaler_scale");
  ts_graph *g = m->g;
  const ts_loss_scaler_config *c = &s->cfg;
  ts_tensor tracker = amp_state(m, "amp.growth_tracker", 0);
  ts_tensor skipped = amp_state(m, "amp.skipped_steps", 0);
  ts_tensor applied = amp_state(m, "amp.optim_step", 0);
  if (tracker == TS_NONE || skipped == TS_NONE || applied == TS_NONE) return -1;
  /* the scale is a power of two times init_scale: 1/scale in f64 then f32, as PyTorch */
  ts_tensor inv = ts_convert(g, ts_div(g, ts_scalar(g, TS_F64, 1.0), ts_convert(g, s->scale, TS_F64)), TS_F32);
  /* sum over every gradient of g * 0: 0 when all are finite, NaN otherwise */
  ts_tensor nonfinite = ts_scalar(g, TS_F32, 0.0);
  for (int i = 0; i < n; i++) {
    if (grads[i] < 0 || grads[i] >= ts_graph_num_nodes(g) || ts_tensor_dtype(g, grads[i]) != TS_F32)
      return set_error("ts_loss_scaler_unscale: gradient %d (tensor %d) is not an f32 node of the graph", i,
                       grads[i]);
    grads[i] = ts_mul(g, grads[i], inv);
    nonfinite = ts_add(g, nonfinite, ts_sum_all(g, ts_mul(g, grads[i], ts_scalar(g, TS_F32, 0.0))));
  }
  ts_tensor zero = ts_scalar(g, TS_F32, 0.0), one = ts_scalar(g, TS_F32, 1.0);
  s->finite = ts_compare(g, nonfinite, zero, TS_CMP_EQ);
  /* GradScaler.update (torch._amp_update_scale_) */
  ts_tensor grown = ts_add(g, tracker, one);
  ts_tensor grow = ts_compare(g, grown, ts_scalar(g, TS_F32, (double)c->growth_interval), TS_CMP_GE);
  ts_tensor scale_ok = ts_select(g, grow, ts_mul(g, s->scale, ts_scalar(g, TS_F32, c->growth_factor)), s->scale);
  ts_tensor new_scale = ts_select(g, s->finite, scale_ok, ts_mul(g, s->scale, ts_scalar(g, TS_F32, c->backoff_factor)));
  ts_tensor new_tracker = ts_select(g, s->finite, ts_select(g, grow, zero, grown), zero);
  ts_tensor new_skipped = ts_add(g, skipped, ts_select(g, s->finite, zero, one));
  s->optim_step = ts_add(g, applied, one);
  ts_tensor new_applied = ts_select(g, s->finite, s->optim_step, applied);
  if (amp_write(g, s->scale, new_scale) < 0 || amp_write(g, tracker, new_tracker) < 0 ||
      amp_write(g, skipped, new_skipped) < 0 || amp_write(g, applied, new_applied) < 0)
    return -1;
  for (int i = 0; i < n; i++)
    if (grads[i] == TS_NONE) return -1;
  return 0;
}
