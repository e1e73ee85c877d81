/* imagefolder.c — a ts_source over ROOT/<split>/<class>/<file> (torchvision's
 * ImageFolder): the listing made once at open (classes sorted, files in
 * make_dataset's order, a hash of it all), and per sample a read, a decode
 * (image_decode.c) and the split's transform (image_resize.c) on the
 * loader's worker thread that asks for it.
 *
 * The training transform draws its crop from the loader's key of (seed,
 * epoch, index) (ts_source.get_keyed), hashed with a constant so that the
 * crop and the loader's flip (drawn from the key itself) are independent. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> // strcasecmp
#include <sys/stat.h>

#include "image_internal.h"
#include "tessel/imagefolder.h"
#include "util/error.h"
#include "util/prng.h" // ts_splitmix64

#define MAX_BAD_KEPT 64

typedef struct {
  ts_source src;
  char *dir;            /* ROOT/<split> */
  char name[64];        /* "imagefolder train" */
  ts_imagefolder_options o;
  int nclass;
  char **classes;       /* (nclass) */
  int64_t n;
  char *pool;           /* relative paths, NUL-separated */
  int64_t *off;         /* (n) offsets into pool */
  int32_t *labels;      /* (n) */
  uint64_t hash;
  int64_t ignored;
  uint8_t *bad;         /* (n) 1: known unreadable (skip mode); atomics */
  int64_t nbad;         /* atomics */
  pthread_mutex_t mu;   /* bad_msgs */
  char *bad_msgs[MAX_BAD_KEPT];
} imgf;

/* ---- listing ---- */

typedef struct {
  char *rel;      /* path relative to the class folder */
  size_t dirlen;  /* length of its folder part ("" for the top: 0) */
  int64_t size;
} entry;

typedef struct {
  entry *v;
  size_t n, cap;
  int64_t ignored;
} entries;

static bool image_ext(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0 || strcasecmp(dot, ".png") == 0);
}

/* os.walk's order, sorted: folders by path, then names within a folder. */
static int entry_cmp(const void *pa, const void *pb) {
  const entry *a = pa, *b = pb;
  /* a folder's path: "" for the top, else "sub/dir" (compared as "cls" + "/" + it) */
  size_t la = a->dirlen, lb = b->dirlen;
  size_t m = la < lb ? la : lb;
  int c = memcmp(a->rel, b->rel, m);
  if (c) return c;
  if (la != lb) return la < lb ? -1 : 1;
  return strcmp(a->rel + la + (la ? 1 : 0), b->rel + lb + (lb ? 1 : 0));
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Adds the image files under abs (recursively, following links) to es, named rel/... */
static int walk(const char *abs, const char *rel, entries *es, int depth) {
  if (depth > 32) return set_error_code(TS_ERR_IO, "%s: folders nested more than 32 deep (a link loop?)", abs);
  DIR *d = opendir(abs);
  if (!d) return set_error_code(TS_ERR_IO, "%s: cannot list: %s", abs, strerror(errno));
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    size_t la = strlen(abs), lr = strlen(rel), ln = strlen(de->d_name);
    char *p = malloc(la + ln + 2), *r = malloc(lr + ln + 2);
    if (!p || !r) {
      free(p), free(r);
      rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "imagefolder: out of memory listing %s", abs);
      break;
    }
    snprintf(p, la + ln + 2, "%s/%s", abs, de->d_name);
    snprintf(r, lr + ln + 2, "%s%s%s", rel, lr ? "/" : "", de->d_name);
    struct stat st;
    if (stat(p, &st) != 0) {
      rc = set_error_code(TS_ERR_IO, "%s: cannot stat: %s", p, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
      rc = walk(p, r, es, depth + 1);
    } else if (!image_ext(de->d_name)) {
      es->ignored++;
    } else {
      if (es->n == es->cap) {
        size_t cap = es->cap ? es->cap * 2 : 256;
        entry *nv = realloc(es->v, cap * sizeof *nv);
        if (!nv) {
          rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "imagefolder: out of memory listing %s", abs);
        } else {
          es->v = nv, es->cap = cap;
        }
      }
      if (rc == 0) {
        es->v[es->n++] = (entry){.rel = r, .dirlen = lr, .size = (int64_t)st.st_size};
        r = NULL;
      }
    }
    free(p);
    free(r);
  }
  closedir(d);
  return rc;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* The classes: sub-folders of f->dir, sorted. */
static int list_classes(imgf *f) {
  DIR *d = opendir(f->dir);
  if (!d) return set_error_code(TS_ERR_IO, "%s: cannot open the ImageFolder split: %s", f->dir, strerror(errno));
  size_t cap = 0;
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d))) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", f->dir, de->d_name);
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) continue; /* files beside the classes: not classes */
    if ((size_t)f->nclass == cap) {
      cap = cap ? cap * 2 : 64;
      char **nc = realloc(f->classes, cap * sizeof *nc);
      if (!nc) {
        rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "imagefolder: out of memory");
        break;
      }
      f->classes = nc;
    }
    if (!(f->classes[f->nclass] = strdup(de->d_name))) rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "imagefolder: out of memory");
    else f->nclass++;
  }
  closedir(d);
  if (rc) return rc;
  if (f->nclass == 0)
    return set_error_code(TS_ERR_IO, "%s: no class folders (ImageFolder expects %s/<class>/<image files>)", f->dir, f->dir);
  qsort(f->classes, (size_t)f->nclass, sizeof *f->classes, str_cmp);
  return 0;
}

static int list_files(imgf *f) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv(h, &f->nclass, sizeof f->nclass);
  size_t pool_len = 0, pool_cap = 0;
  int64_t cap = 0;
  for (int k = 0; k < f->nclass; k++) {
    char abs[4096];
    snprintf(abs, sizeof abs, "%s/%s", f->dir, f->classes[k]);
    entries es = {0};
    int rc = walk(abs, "", &es, 0);
    if (rc == 0 && es.n == 0)
      rc = set_error_code(TS_ERR_IO, "%s: class folder without .jpg, .jpeg or .png files (class %d of %d); "
                                     "remove it or add images", abs, k, f->nclass);
    if (rc == 0) qsort(es.v, es.n, sizeof *es.v, entry_cmp);
    h = fnv(h, f->classes[k], strlen(f->classes[k]) + 1);
    for (size_t i = 0; rc == 0 && i < es.n; i++) {
      size_t lc = strlen(f->classes[k]), lr = strlen(es.v[i].rel), need = lc + lr + 2;
      if (pool_len + need > pool_cap) {
        size_t nc = pool_cap ? pool_cap * 2 : 1 << 16;
        while (nc < pool_len + need) nc *= 2;
        char *np = realloc(f->pool, nc);
        if (!np) {
          rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "imagefolder: out of memory listing %s", abs);
          break;
        }
        f->pool = np, pool_cap = nc;
      }
      if (f->n == cap) {
        int64_t nc = cap ? cap * 2 : 1024;
        int64_t *no = realloc(f->off, (size_t)nc * sizeof *no);
        if (no) f->off = no;
        int32_t *nl = no ? realloc(f->labels, (size_t)nc * sizeof *nl) : NULL;
        if (nl) f->labels = nl;
        if (!no || !nl) {
          rc = set_error_code(TS_ERR_OUT_OF_MEMORY, "imagefolder: out of memory listing %s", abs);
          break;
        }
        cap = nc;
      }
      f->off[f->n] = (int64_t)pool_len;
      f->labels[f->n] = k;
      f->n++;
      snprintf(f->pool + pool_len, need, "%s/%s", f->classes[k], es.v[i].rel);
      h = fnv(h, f->pool + pool_len, need);
      h = fnv(h, &es.v[i].size, sizeof es.v[i].size);
      pool_len += need;
    }
    for (size_t i = 0; i < es.n; i++) free(es.v[i].rel);
    free(es.v);
    f->ignored += es.ignored;
    if (rc) return rc;
  }
  f->hash = h;
  return 0;
}

/* ---- samples ---- */

static int read_file(const char *path, uint8_t **buf, size_t *n) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return set_error_code(TS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat st;
  size_t cap = fstat(fileno(fp), &st) == 0 && st.st_size > 0 ? (size_t)st.st_size + 1 : 65536;
  uint8_t *b = malloc(cap);
  size_t len = 0;
  while (b) {
    size_t got = fread(b + len, 1, cap - len, fp);
    len += got;
    if (len < cap) break;
    uint8_t *nb = realloc(b, cap * 2);
    if (!nb) free(b);
    b = nb, cap *= 2;
  }
  bool err = ferror(fp);
  fclose(fp);
  if (!b) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory reading the file", path);
  if (err) {
    free(b);
    return set_error_code(TS_ERR_IO, "%s: read error", path);
  }
  *buf = b, *n = len;
  return 0;
}

/* File j decoded and transformed into pixels (3, size, size). */
static int load_one(const imgf *f, int64_t j, uint64_t key, uint8_t *pixels) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", f->dir, f->pool + f->off[j]);
  uint8_t *buf = NULL, *rgb = NULL;
  size_t n = 0;
  int h = 0, w = 0, S = f->o.size;
  int rc = read_file(path, &buf, &n);
  if (rc == 0) rc = ts_image_decode(path, buf, n, &rgb, &h, &w);
  free(buf);
  if (rc < 0) return -1;
  if (f->o.train) {
    uint64_t k = key ^ 0x3c6ef372fe94f82bull;
    int box[4];
    ts_random_resized_crop_box(h, w, ts_splitmix64(&k), NULL, NULL, box);
    rc = ts_image_resample(rgb, h, w, box[0], box[1], box[2], box[3], S, S, 0, 0, S, S, pixels);
  } else {
    int rh, rw;
    img_resize_shorter(h, w, f->o.resize, &rh, &rw);
    if (rh < S || rw < S) { /* a resize >= size makes this impossible; checked at open */
      free(rgb);
      return set_error("%s: resized to %dx%d, smaller than the %dx%d crop", path, rw, rh, S, S);
    }
    rc = ts_image_resample(rgb, h, w, 0, 0, w, h, rw, rh, img_center_offset(rw, S), img_center_offset(rh, S), S, S,
                           pixels);
  }
  free(rgb);
  return rc;
}

static void note_bad(imgf *f, int64_t j) {
  if (__atomic_exchange_n(&f->bad[j], 1, __ATOMIC_ACQ_REL)) return; /* another worker got there first */
  int64_t k = __atomic_fetch_add(&f->nbad, 1, __ATOMIC_ACQ_REL);
  if (k < MAX_BAD_KEPT) {
    pthread_mutex_lock(&f->mu);
    f->bad_msgs[k] = strdup(ts_last_error()); /* NULL when out of memory: the count stays right */
    pthread_mutex_unlock(&f->mu);
  }
}

static int imgf_get_keyed(const ts_source *s, int64_t i, uint64_t key, uint8_t *pixels, int32_t *label) {
  imgf *f = s->ctx;
  if (i < 0 || i >= f->n)
    return set_error("%s: sample %lld out of range [0, %lld)", s->name, (long long)i, (long long)f->n);
  for (int64_t t = 0; t < f->n; t++) {
    int64_t j = (i + t) % f->n;
    if (f->o.skip_bad_files && __atomic_load_n(&f->bad[j], __ATOMIC_ACQUIRE)) continue;
    ts_clear_error();
    if (load_one(f, j, key, pixels) == 0) {
      *label = f->labels[j];
      return 0;
    }
    if (!f->o.skip_bad_files || ts_last_error_code() == TS_ERR_OUT_OF_MEMORY) return -1;
    note_bad(f, j);
  }
  return set_error_code(TS_ERR_IO, "%s: none of its %lld files could be read (the first: %s)", f->dir,
                        (long long)f->n, f->bad_msgs[0] ? f->bad_msgs[0] : "?");
}

static int imgf_get(const ts_source *s, int64_t i, uint8_t *pixels, int32_t *label) {
  uint64_t k = (uint64_t)i;
  return imgf_get_keyed(s, i, ts_splitmix64(&k), pixels, label);
}

static void imgf_destroy(ts_source *s) {
  imgf *f = s->ctx;
  for (int k = 0; k < f->nclass; k++) free(f->classes[k]);
  free(f->classes);
  for (int k = 0; k < MAX_BAD_KEPT; k++) free(f->bad_msgs[k]);
  pthread_mutex_destroy(&f->mu);
  free(f->dir), free(f->pool), free(f->off), free(f->labels), free(f->bad);
  free(f);
}

ts_source *ts_imagefolder_open(const char *root, const char *split, const ts_imagefolder_options *o) {
  if (!root || !split || !o) {
    set_error("ts_imagefolder_open: NULL argument");
    return NULL;
  }
  if (o->size < 8 || o->size > 4096) {
    set_error("imagefolder: image size %d outside [8, 4096]", o->size);
    return NULL;
  }
  imgf *f = calloc(1, sizeof *f);
  size_t ld = strlen(root) + strlen(split) + 2;
  if (!f || !(f->dir = malloc(ld))) {
    free(f);
    set_error_code(TS_ERR_OUT_OF_MEMORY, "imagefolder: out of memory");
    return NULL;
  }
  pthread_mutex_init(&f->mu, NULL);
  snprintf(f->dir, ld, "%s/%s", root, split);
  f->o = *o;
  if (f->o.resize <= 0) f->o.resize = (o->size * 256 + 112) / 224;
  snprintf(f->name, sizeof f->name, "imagefolder %s", split);
  f->src = (ts_source){.name = f->name, .c = 3, .h = o->size, .w = o->size, .get = imgf_get,
                       .get_keyed = imgf_get_keyed, .destroy = imgf_destroy, .ctx = f};
  if (f->o.resize < o->size) {
    set_error("imagefolder: resize %d is smaller than the crop %d", f->o.resize, o->size);
    goto fail;
  }
  if (list_classes(f) < 0 || list_files(f) < 0) goto fail;
  if (!(f->bad = calloc((size_t)f->n, 1))) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "imagefolder: out of memory");
    goto fail;
  }
  f->src.n = f->n;
  f->src.num_classes = f->nclass;
  return &f->src;
fail:
  imgf_destroy(&f->src);
  return NULL;
}

static const imgf *as_imgf(const ts_source *s) {
  return s && s->destroy == imgf_destroy ? s->ctx : NULL;
}

const char *ts_imagefolder_class(const ts_source *s, int k) {
  const imgf *f = as_imgf(s);
  return f && k >= 0 && k < f->nclass ? f->classes[k] : NULL;
}

const char *ts_imagefolder_path(const ts_source *s, int64_t i) {
  const imgf *f = as_imgf(s);
  return f && i >= 0 && i < f->n ? f->pool + f->off[i] : NULL;
}

int32_t ts_imagefolder_label(const ts_source *s, int64_t i) {
  const imgf *f = as_imgf(s);
  return f && i >= 0 && i < f->n ? f->labels[i] : -1;
}

uint64_t ts_imagefolder_hash(const ts_source *s) {
  const imgf *f = as_imgf(s);
  return f ? f->hash : 0;
}

int64_t ts_imagefolder_bad_files(const ts_source *s) {
  const imgf *f = as_imgf(s);
  return f ? __atomic_load_n(&f->nbad, __ATOMIC_ACQUIRE) : 0;
}

const char *ts_imagefolder_bad_file(const ts_source *s, int64_t k) {
  imgf *f = (imgf *)as_imgf(s);
  if (!f || k < 0 || k >= MAX_BAD_KEPT) return NULL;
  pthread_mutex_lock(&f->mu);
  const char *m = f->bad_msgs[k];
  pthread_mutex_unlock(&f->mu);
  return m;
}

int64_t ts_imagefolder_ignored_files(const ts_source *s) {
  const imgf *f = as_imgf(s);
  return f ? f->ignored : 0;
}
