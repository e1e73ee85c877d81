/* config.c — reads tessel's environment variables once into ts_env_config
 * (config.h documents each one). */
#include "util/config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessel/runtime.h" /* TS_MAX_DEVICES, TS_MAX_THREADS */

static ts_env_config g_config;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* The copies of variable texts that g_config points at (freed on reload). */
static char *g_texts[16];
static int g_ntexts;

/* A copy of $name, NULL when unset or (unless keep_empty) empty. */
static const char *env_text(const char *name, bool keep_empty) {
  const char *v = getenv(name);
  if (!v || (!*v && !keep_empty)) return NULL;
  char *copy = g_ntexts < (int)(sizeof g_texts / sizeof *g_texts) ? strdup(v) : NULL;
  if (!copy) {
    fprintf(stderr, "tessel: out of memory reading %s; ignored\n", name);
    return NULL;
  }
  g_texts[g_ntexts++] = copy;
  return copy;
}

/* "0" -> 0, "1" -> 1; unset or empty -> -1; anything else -> -1 with *invalid = text. */
static int env_switch(const char *name, const char **invalid) {
  const char *t = env_text(name, false);
  *invalid = NULL;
  if (!t) return -1;
  if (!strcmp(t, "0") || !strcmp(t, "1")) return t[0] - '0';
  *invalid = t;
  return -1;
}

/* An integer in [1, max], or 0 with *invalid = text. */
static int env_count(const char *name, long max, const char **invalid) {
  const char *t = env_text(name, false);
  *invalid = NULL;
  if (!t) return 0;
  char *end;
  errno = 0;
  long v = strtol(t, &end, 10);
  if (*end || errno || v < 1 || v > max) {
    *invalid = t;
    return 0;
  }
  return (int)v;
}

static void env_read(void) {
  ts_env_config *c = &g_config;
  for (int i = 0; i < g_ntexts; i++) free(g_texts[i]);
  g_ntexts = 0;
  *c = (ts_env_config){0};

  c->num_threads = env_count("TESSEL_NUM_THREADS", TS_MAX_THREADS, &c->num_threads_invalid);
  c->cpu_devices = env_count("TESSEL_CPU_DEVICES", TS_MAX_DEVICES, &c->cpu_devices_invalid);

  const char *t = env_text("TESSEL_COLLECTIVE_TIMEOUT", false);
  if (t) {
    char *end;
    double s = strtod(t, &end);
    if (*end || !(s >= 0) || s > 86400) c->collective_timeout_invalid = t;
    else c->collective_timeout_ms = s == 0 ? -1 : (int)(s * 1000 + 0.5);
  }

  c->trace_path = env_text("TESSEL_TRACE", false);
  const char *m = getenv("TESSEL_METRICS");
  c->metrics_enabled = !(m && strcmp(m, "0") == 0);
  const char *a = getenv("TESSEL_ASYNC_COLLECTIVES");
  c->async_collectives = !(a && strcmp(a, "0") == 0);
  const char *uc = getenv("TESSEL_UPDATE_CHAINS");
  c->update_chains = uc && strcmp(uc, "1") == 0 ? 1 : uc && strcmp(uc, "all") == 0 ? 2 : 0;
  const char *cy = getenv("TESSEL_COMM_YIELD");
  c->comm_yield = !(cy && strcmp(cy, "0") == 0);
  const char *h2 = getenv("TESSEL_HIER_ALLREDUCE");
  c->hier_allreduce = h2 && strcmp(h2, "1") == 0;
  const char *ib = getenv("TESSEL_COMM_INLINE_BYTES");
  char *ib_end = NULL;
  long long ibv = ib && *ib ? strtoll(ib, &ib_end, 10) : -1;
  c->comm_inline_bytes = ib && *ib && !*ib_end && ibv >= 0 ? (int64_t)ibv : -1;
  c->cache_dir = env_text("TESSEL_CACHE_DIR", false);
  c->calibration = env_text("TESSEL_CALIBRATION", false);
  c->xdg_cache_home = env_text("XDG_CACHE_HOME", false);
  c->home = env_text("HOME", false);
  c->debug_spmd = getenv("TESSEL_DEBUG_SPMD") != NULL;

  const char *mpi = getenv("TESSEL_MPI");
  c->mpi = mpi && *mpi ? strcmp(mpi, "0") != 0 : -1;
  static const char *const launchers[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK",
                                          "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof launchers / sizeof *launchers && !c->mpi_launcher; i++)
    if (getenv(launchers[i])) c->mpi_launcher = launchers[i];

  int piece = env_count("TESSEL_NET_PIECE_BYTES", 1l << 30, &c->net_piece_invalid);
  c->net_piece_set = piece > 0;
  c->net_piece_bytes = piece > 0 ? (size_t)piece : (size_t)1 << 30;
  c->net_eager = env_switch("TESSEL_NET_EAGER", &c->net_eager_invalid);
  c->net_pace = env_switch("TESSEL_NET_PACE", &c->net_pace_invalid);
  c->comm_lanes = env_switch("TESSEL_COMM_LANES", &c->comm_lanes_invalid);

  const char *sg = env_text("TESSEL_HIER_SEGMENT_BYTES", false);
  c->hier_segment_bytes = -1;
  if (sg) {
    char *end;
    errno = 0;
    long long sv = strtoll(sg, &end, 10);
    if (*end || errno || sv < 0 || sv > (1ll << 30)) c->hier_segment_invalid = sg;
    else c->hier_segment_bytes = sv;
  }

  const char *as = getenv("TESSEL_AUTO_SPMD");
  c->auto_spmd = as && strcmp(as, "1") == 0;
  c->auto_spmd_mesh = env_text("TESSEL_AUTO_SPMD_MESH", false);
  c->ckpt_priority = env_text("TESSEL_CKPT_PRIORITY", false);
}

int64_t env_inline_bytes(bool between_hosts) {
  int64_t e = env_config()->comm_inline_bytes;
  if (e >= 0) return e > 0 ? e : -1;
  return between_hosts ? ENV_INLINE_BYTES_HOSTS : (int64_t)8 << 20;
}

bool env_mpi_wanted(void) {
  const ts_env_config *env = env_config();
  return env->mpi >= 0 ? env->mpi == 1 : env->mpi_launcher != NULL;
}

const ts_env_config *env_config(void) {
  pthread_once(&g_once, env_read);
  return &g_config;
}

void env_config_reload(void) {
  env_config(); /* the first read, if it has not happened */
  env_read();
}
