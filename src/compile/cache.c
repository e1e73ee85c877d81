/* cache.c — the compile cache (see cache.h): key hashing, the in-memory
 * table, entry files (atomic write, checked read) and the lookup order
 * memory -> disk -> compile, with its counters. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h> /* fsync, close, unlink */

#include "compile/cache.h"
#include "compile/compile.h"     /* compile_graph */
#include "ir/serialize.h"        /* the stored form of a graph */
#include "metrics/metrics_internal.h"
#include "opt/opt.h"             /* opt_rebuild: copying graphs */
#include "tessel/spmd.h"         /* mesh and shardings in the key */
#include "util/config.h"         /* TESSEL_CACHE_DIR */
#include "util/hash.h"           /* util_hash64: keys and checksums */

#define CACHE_MEM_MAX 64 /* programs kept in memory; the oldest goes first */
#define CACHE_HEADER 64

static const char cache_magic[8] = {'T', 'E', 'S', 'S', 'E', 'L', 'C', 'C'};

typedef struct {
  ts_cache_key key;
  int n;
  ts_graph **graphs;
  uint64_t stamp; /* insertion order, for eviction */
} cache_entry;

/* Guards the table and the directory name: compiles may run on several threads. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache_entry cache_mem[CACHE_MEM_MAX];
static int cache_n;
static uint64_t cache_stamp;
static char *cache_dir;
static bool cache_dir_set; /* set_dir was called (else $TESSEL_CACHE_DIR) */
static atomic_int cache_warned;

/* ---- hashing ---- */

/* The SPMD inputs of a compile the graph text lacks: the options' mesh and
 * every sharding annotation, as text appended to sb. */
static void spmd_key_text(const ts_graph *g, const ts_compile_options *o, ts_strbuf *sb) {
  if (o->mesh) {
    const ts_mesh *m = o->mesh;
    sb_printf(sb, "mesh");
    for (int a = 0; a < ts_mesh_rank(m); a++)
      sb_printf(sb, " %s=%lld", ts_mesh_axis_name(m, a) ? ts_mesh_axis_name(m, a) : "_",
                (long long)ts_mesh_axis_size(m, a));
    sb_printf(sb, " ids");
    for (int64_t i = 0; i < ts_mesh_num_devices(m); i++) sb_printf(sb, " %d", ts_mesh_device_ids(m)[i]);
    sb_printf(sb, "\n");
  }
  for (int i = 0; i < g->n_nodes; i++) {
    if (!g->nodes[i].sharding) continue;
    char *s = ts_sharding_to_string(g->nodes[i].sharding);
    sb_printf(sb, "sharding %%%d %s\n", i, s ? s : "?");
    if (!s) sb->oom = true;
    free(s);
  }
}

int cache_key_make(const ts_graph *g, const ts_compile_options *opts, const char *extra, ts_cache_key *out) {
  char *text = ts_graph_to_string(g);
  if (!text) return -1;
  ts_strbuf spmd = {0};
  sb_printf(&spmd, "%s", "");
  spmd_key_text(g, opts ? opts : &(ts_compile_options){0}, &spmd);
  char *st = sb_finish(&spmd, "compile cache");
  if (!st) {
    free(text);
    return -1;
  }
  ts_compile_options o = {0};
  if (opts) o = *opts;
  /* only options that change the compiled program (not verbose) */
  char head[256];
  snprintf(head, sizeof head,
           "tessel %s cache %d serialize %d opts simplify=%d cse=%d fusion=%d combine=%d/%zu autocast=%d extra=%zu\n",
           TS_VERSION_STRING, TS_CACHE_FORMAT_VERSION, TS_SERIALIZE_VERSION, !o.no_simplify, !o.no_cse,
           !o.no_fusion, !o.no_combine, o.combine_bytes, (int)o.autocast, extra ? strlen(extra) : (size_t)0);
  size_t lh = strlen(head), le = extra ? strlen(extra) : 0, ls = strlen(st), lt = strlen(text);
  char *all = malloc(lh + le + ls + lt + 1);
  if (!all) {
    free(text);
    free(st);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile cache: out of memory hashing the program");
  }
  memcpy(all, head, lh);
  if (le) memcpy(all + lh, extra, le);
  memcpy(all + lh + le, st, ls);
  memcpy(all + lh + le + ls, text, lt + 1);
  size_t n = lh + le + ls + lt;
  out->lo = util_hash64(all, n, 0x74657373656c3031ull);
  out->hi = util_hash64(all, n, 0x6b65792d68693032ull);
  free(all);
  free(st);
  free(text);
  return 0;
}

/* ---- directory ---- */

static int mkdir_p(const char *dir) {
  char path[4096];
  if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
    return set_error("compile cache: directory name too long: '%s'", dir);
  for (char *p = path + 1;; p++) {
    if (*p == '/' || *p == '\0') {
      char c = *p;
      *p = '\0';
      if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return set_error_code(TS_ERR_IO, "compile cache: cannot create directory '%s': %s", path, strerror(errno));
      *p = c;
      if (!c) break;
    }
  }
  struct stat st;
  if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
    return set_error_code(TS_ERR_IO, "compile cache: '%s' is not a directory", dir);
  return 0;
}

int ts_compile_cache_set_dir(const char *dir) {
  if (dir && !*dir) dir = NULL;
  if (dir && mkdir_p(dir) < 0) return -1;
  char *copy = dir ? strdup(dir) : NULL;
  if (dir && !copy) return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile cache: out of memory");
  pthread_mutex_lock(&cache_lock);
  free(cache_dir);
  cache_dir = copy;
  cache_dir_set = true;
  pthread_mutex_unlock(&cache_lock);
  return 0;
}

const char *ts_compile_cache_dir(void) {
  pthread_mutex_lock(&cache_lock);
  if (!cache_dir_set) {
    cache_dir_set = true;
    const char *env = env_config()->cache_dir;
    if (env) {
      if (mkdir_p(env) == 0) cache_dir = strdup(env);
      else fprintf(stderr, "tessel: TESSEL_CACHE_DIR ignored: %s\n", ts_last_error());
    }
  }
  const char *d = cache_dir;
  pthread_mutex_unlock(&cache_lock);
  return d;
}

/* A malloc'd copy of the directory in use (NULL: no persistent cache). */
static char *dir_copy(void) {
  ts_compile_cache_dir(); /* reads $TESSEL_CACHE_DIR once */
  pthread_mutex_lock(&cache_lock);
  char *d = cache_dir ? strdup(cache_dir) : NULL;
  pthread_mutex_unlock(&cache_lock);
  return d;
}

void cache_entry_path(const char *dir, const ts_cache_key *k, char *buf, size_t len) {
  snprintf(buf, len, "%s/%016llx%016llx.tsc", dir, (unsigned long long)k->hi, (unsigned long long)k->lo);
}

/* ---- in memory ---- */

static void free_graphs(int n, ts_graph **gs) {
  for (int i = 0; gs && i < n; i++) ts_graph_free(gs[i]);
  free(gs);
}

/* New copies of n graphs, or NULL. */
static ts_graph **copy_graphs(int n, ts_graph *const *src) {
  ts_graph **gs = calloc((size_t)n, sizeof *gs);
  for (int i = 0; gs && i < n; i++)
    if (!(gs[i] = opt_rebuild(src[i], NULL, NULL, NULL))) {
      free_graphs(i, gs);
      return NULL;
    }
  return gs;
}

void ts_compile_cache_clear(void) {
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < cache_n; i++) free_graphs(cache_mem[i].n, cache_mem[i].graphs);
  memset(cache_mem, 0, sizeof cache_mem);
  cache_n = 0;
  pthread_mutex_unlock(&cache_lock);
}

static bool same_key(const ts_cache_key *a, const ts_cache_key *b) { return a->lo == b->lo && a->hi == b->hi; }

static int mem_get(const ts_cache_key *k, ts_graph ***out) {
  int n = 0;
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < cache_n; i++)
    if (same_key(&cache_mem[i].key, k)) {
      *out = copy_graphs(cache_mem[i].n, cache_mem[i].graphs);
      if (*out) n = cache_mem[i].n;
      break;
    }
  pthread_mutex_unlock(&cache_lock);
  return n;
}

static void mem_put(const ts_cache_key *k, int n, ts_graph *const *graphs) {
  ts_graph **gs = copy_graphs(n, graphs);
  if (!gs) return; /* out of memory: the program is just not cached */
  pthread_mutex_lock(&cache_lock);
  int slot = -1;
  for (int i = 0; i < cache_n && slot < 0; i++)
    if (same_key(&cache_mem[i].key, k)) slot = i;
  if (slot < 0 && cache_n < CACHE_MEM_MAX) {
    slot = cache_n++;
    cache_mem[slot].graphs = NULL;
  }
  if (slot < 0) { /* full: evict the oldest */
    slot = 0;
    for (int i = 1; i < cache_n; i++)
      if (cache_mem[i].stamp < cache_mem[slot].stamp) slot = i;
  }
  if (slot < cache_n && cache_mem[slot].graphs) free_graphs(cache_mem[slot].n, cache_mem[slot].graphs);
  cache_mem[slot] = (cache_entry){*k, n, gs, ++cache_stamp};
  pthread_mutex_unlock(&cache_lock);
}

/* ---- on disk ---- */

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

static void warn_once(const char *path, const char *why) {
  obs_count("PersistentCacheDiscarded", 1);
  if (atomic_exchange(&cache_warned, 1) == 0)
    fprintf(stderr, "tessel: warning: compile cache entry '%s' ignored (%s); recompiling\n", path, why);
}

/* Writes n graphs as the entry of k: temp file, fsync, rename. Errors only
 * warn: the cache is an optimization, the compile already succeeded. */
static void disk_put(const char *dir, const ts_cache_key *k, int n, ts_graph *const *graphs) {
  unsigned char *buf = NULL;
  size_t len = CACHE_HEADER, cap = 0;
  buf = malloc(CACHE_HEADER + 4);
  if (!buf) return;
  cap = CACHE_HEADER + 4;
  memset(buf, 0, cap);
  unsigned char cnt[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                          (unsigned char)(n >> 24)};
  memcpy(buf + len, cnt, 4);
  len += 4;
  for (int i = 0; i < n; i++)
    if (ir_serialize(graphs[i], &buf, &len, &cap) < 0) {
      free(buf);
      return;
    }
  uint64_t plen = len - CACHE_HEADER;
  memcpy(buf, cache_magic, 8);
  unsigned char v4[4] = {TS_CACHE_FORMAT_VERSION, 0, 0, 0};
  memcpy(buf + 8, v4, 4);
  memset(buf + 12, 0, 20);
  memcpy(buf + 12, TS_VERSION_STRING, strlen(TS_VERSION_STRING) < 16 ? strlen(TS_VERSION_STRING) : 16);
  put_u64(buf + 28, k->lo);
  put_u64(buf + 36, k->hi);
  put_u64(buf + 44, plen);
  put_u64(buf + 52, util_hash64(buf + CACHE_HEADER, plen, 0));
  char path[4096], tmp[4096];
  cache_entry_path(dir, k, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s/.tmp-XXXXXX", dir);
  int fd = mkstemp(tmp);
  bool ok = fd >= 0;
  for (size_t off = 0; ok && off < len;) {
    ssize_t w = write(fd, buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    ok = w > 0;
    if (ok) off += (size_t)w;
  }
  /* fsync before rename: the name never points at data not yet on disk */
  if (ok) ok = fsync(fd) == 0;
  if (fd >= 0 && close(fd) != 0) ok = false;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) {
    fprintf(stderr, "tessel: warning: cannot write compile cache entry '%s': %s\n", path, strerror(errno));
    if (fd >= 0) unlink(tmp);
  } else {
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) { /* the rename itself reaches the disk */
      fsync(dfd);
      close(dfd);
    }
  }
  free(buf);
}

/* Loads the entry of k: count of graphs (>= 1) into *out, 0 when there is
 * none or it is not trustworthy (then warned and counted). */
static int disk_get(const char *dir, const ts_cache_key *k, ts_graph ***out) {
  char path[4096];
  cache_entry_path(dir, k, path, sizeof path);
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char *buf = NULL;
  const char *why = NULL;
  int n = 0;
  ts_graph **gs = NULL;
  if (fseek(f, 0, SEEK_END) != 0) why = "cannot seek";
  long size = why ? -1 : ftell(f);
  if (!why && size < CACHE_HEADER + 4) why = "truncated header";
  if (!why) {
    rewind(f);
    buf = malloc((size_t)size);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) why = "cannot read";
  }
  fclose(f);
  char ver[17] = {0};
  if (!why) memcpy(ver, buf + 12, 16);
  if (why) {
  } else if (memcmp(buf, cache_magic, 8) != 0) {
    why = "bad magic";
  } else if (buf[8] != TS_CACHE_FORMAT_VERSION || buf[9] || buf[10] || buf[11]) {
    why = "other cache format version";
  } else if (strcmp(ver, TS_VERSION_STRING) != 0) {
    why = "written by another tessel version";
  } else if (get_u64(buf + 28) != k->lo || get_u64(buf + 36) != k->hi) {
    why = "key does not match";
  } else if (get_u64(buf + 44) != (uint64_t)size - CACHE_HEADER) {
    why = "payload length does not match the file size (truncated?)";
  } else if (get_u64(buf + 52) != util_hash64(buf + CACHE_HEADER, (size_t)size - CACHE_HEADER, 0)) {
    why = "checksum mismatch";
  } else {
    const unsigned char *p = buf + CACHE_HEADER;
    size_t plen = (size_t)size - CACHE_HEADER, pos = 4;
    int cnt = (int)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
    if (cnt < 1 || cnt > 1 << 16) why = "bad program count";
    gs = why ? NULL : calloc((size_t)cnt, sizeof *gs);
    for (int i = 0; gs && i < cnt; i++) {
      if (!(gs[i] = ir_deserialize(p, plen, &pos))) {
        why = ts_last_error();
        free_graphs(i, gs);
        gs = NULL;
        break;
      }
      n = i + 1;
    }
    if (gs && pos != plen) {
      why = "trailing bytes";
      free_graphs(n, gs);
      gs = NULL;
    }
    if (!gs) n = 0;
  }
  if (why) warn_once(path, why);
  free(buf);
  *out = gs;
  return why ? 0 : n;
}

/* ---- the lookup ---- */

int cache_run(const ts_graph *g, const ts_compile_options *opts, const char *extra,
                         ts_cache_compile_fn fn, void *user, ts_graph ***out) {
  *out = NULL;
  ts_cache_key k;
  if (cache_key_make(g, opts, extra, &k) < 0) return -1;
  int n = mem_get(&k, out);
  if (n > 0) {
    obs_count("CachedCompile", 1);
    return n;
  }
  char *dir = dir_copy();
  if (dir) {
    int64_t t0 = obs_now();
    n = disk_get(dir, &k, out);
    if (n > 0) {
      obs_done("PersistentCacheLoadTime", "PersistentCacheHit", "cache load", "compile", -1, t0, -1);
      mem_put(&k, n, *out);
      free(dir);
      return n;
    }
    obs_count("PersistentCacheMiss", 1);
  }
  int64_t t0 = obs_now();
  n = fn(user, out);
  if (n > 0) {
    obs_done("CompileTime", "UncachedCompile", "compile", "compile", -1, t0, -1);
    mem_put(&k, n, *out);
    if (dir) disk_put(dir, &k, n, *out);
  }
  free(dir);
  return n;
}

typedef struct {
  const ts_graph *g;
  const ts_compile_options *opts;
} single_args;

static int compile_single(void *user, ts_graph ***graphs) {
  single_args *a = user;
  ts_graph *opt = compile_graph(a->g, a->opts);
  if (!opt) return -1;
  *graphs = malloc(sizeof **graphs);
  if (!*graphs) {
    ts_graph_free(opt);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "compile: out of memory");
  }
  (*graphs)[0] = opt;
  return 1;
}

ts_graph *cache_compile_graph(const ts_graph *g, const ts_compile_options *opts) {
  if (!g) {
    set_error("compile: graph is NULL");
    return NULL;
  }
  if (ts_graph_verify(g) < 0) return NULL; /* before hashing: the text of a broken graph means nothing */
  single_args a = {g, opts};
  ts_graph **gs = NULL;
  int n = cache_run(g, opts, NULL, compile_single, &a, &gs);
  if (n < 1) return NULL;
  ts_graph *r = gs[0];
  for (int i = 1; i < n; i++) ts_graph_free(gs[i]);
  free(gs);
  return r;
}
