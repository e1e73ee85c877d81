/* commit.c — the second half of a save, run by process 0 once every process
 * has written its block file: index.json from the processes' descriptions
 * of their blocks (checked to tile every tensor), the step directory renamed
 * into place, `latest` replaced, old step directories pruned; and the
 * preparation of ROOT (parents, debris of crashed saves). Each rename is made
 * durable by an fsync of the directory that holds it. */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "util/error.h"

#define PATH_MAX_LEN 4096

/* Process 0: the index from the descriptions of every process's file (its
 * own in memory, the others' from their shard-P-of-Q.json). */
static int save_index(const char *tmp, const ts_ckpt_meta *meta, int version, int n, const ck_tensor *t, int np,
                      const char *own) {
  ts_ckpt ck = {.meta = *meta, .version = version};
  int rc = 0;
  char path[PATH_MAX_LEN];
  json_val **side = calloc((size_t)np, sizeof *side);
  ck.f = calloc((size_t)np, sizeof *ck.f);
  ck.t = calloc((size_t)n + 1, sizeof *ck.t);
  if (!side || !ck.f || !ck.t) rc = set_error("checkpoint: out of memory");
  for (int i = 0; i < n && rc == 0; i++) {
    ck_tensor *ct = &ck.t[i];
    ck.nt++;
    *ct = t[i];
    ct->b = NULL, ct->nb = 0;
    ct->name = strdup(t[i].name);
    ct->sharding = strdup(t[i].sharding);
    ct->spec = strdup(t[i].spec);
    if (!ct->name || !ct->sharding || !ct->spec) rc = set_error("checkpoint: out of memory");
  }
  for (int p = 0; p < np && rc == 0; p++) {
    snprintf(path, sizeof path, "%s/shard-%05d-of-%05d.json", tmp, p, np);
    size_t len = p == 0 ? strlen(own) : 0;
    char *text = p == 0 ? NULL : ckpt_read_small(path, 64u << 20, &len);
    if (p > 0 && !text) {
      rc = -1;
      break;
    }
    side[p] = json_parse(p == 0 ? own : text, len, path);
    free(text);
    const json_val *s = side[p], *f = json_get(s, "file"), *bl = json_get(s, "blocks");
    if (!s || !f || f->type != JSON_STRING || !bl || bl->type != JSON_ARRAY) {
      rc = s ? set_error("%s: not a block description", path) : -1;
      break;
    }
    ck_file *cf = &ck.f[ck.nf++];
    cf->name = strdup(f->str);
    const json_val *by = json_get(s, "bytes");
    cf->bytes = by && by->is_int ? (uint64_t)by->i : 0;
    const json_val *hv = json_get(s, "hash"), *hh = json_get(s, "header_hash");
    if (!cf->name || !hv || !hh || hv->type != JSON_STRING || hh->type != JSON_STRING || hv->len != 16 || hh->len != 16) {
      rc = set_error("%s: bad file description", path);
      break;
    }
    cf->hash = strtoull(hv->str, NULL, 16);
    cf->header_hash = strtoull(hh->str, NULL, 16);
    for (int k = 0; k < bl->n && rc == 0; k++) {
      const json_val *b = &bl->items[k], *ti = json_get(b, "tensor"), *st = json_get(b, "start"),
                     *li = json_get(b, "limit"), *br = json_get(b, "byte_range"), *bh = json_get(b, "hash");
      if (!ti || !ti->is_int || ti->i < 0 || ti->i >= n || !st || !li || !br || !bh || br->n != 2 ||
          bh->type != JSON_STRING) {
        rc = set_error("%s: bad block %d", path, k);
        break;
      }
      ck_tensor *ct = &ck.t[ti->i];
      if (st->n != ct->rank || li->n != ct->rank) {
        rc = set_error("%s: block %d has the wrong rank", path, k);
        break;
      }
      ck_block *nbk = realloc(ct->b, (size_t)(ct->nb + 1) * sizeof *nbk);
      if (!nbk) {
        rc = set_error("checkpoint: out of memory");
        break;
      }
      ct->b = nbk;
      ck_block *cb = &ct->b[ct->nb++];
      memset(cb, 0, sizeof *cb);
      cb->file = p;
      for (int d = 0; d < ct->rank; d++) cb->start[d] = st->items[d].i, cb->limit[d] = li->items[d].i;
      cb->begin = (uint64_t)br->items[0].i;
      cb->end = (uint64_t)br->items[1].i;
      cb->hash = strtoull(bh->str, NULL, 16);
    }
  }
  /* What the processes wrote must tile every tensor: a check of the plan. */
  if (rc == 0) rc = ckpt_index_check(&ck, tmp);
  ts_strbuf sb = {0};
  if (rc == 0) ckpt_index_write(&sb, &ck);
  char *text = rc == 0 ? sb_finish(&sb, "checkpoint index") : NULL;
  if (rc == 0 && !text) rc = -1;
  if (rc == 0) {
    snprintf(path, sizeof path, "%s/index.json", tmp);
    rc = ckpt_write_small(path, text, strlen(text));
  }
  free(text);
  for (int p = 1; p < np && rc == 0; p++) { /* the sidecars are in the index now */
    snprintf(path, sizeof path, "%s/shard-%05d-of-%05d.json", tmp, p, np);
    if (unlink(path) != 0) rc = set_error("%s: cannot remove: %s", path, strerror(errno));
  }
  for (int p = 0; side && p < np; p++) json_free(side[p]);
  free(side);
  ckpt_free_contents(&ck);
  return rc;
}

static int step_of_name(const char *name, int64_t *step) {
  if (strncmp(name, "step-", 5) != 0 || strlen(name) < 13) return -1;
  int64_t s = 0;
  for (const char *p = name + 5; *p; p++) {
    if (*p < '0' || *p > '9' || s > INT64_MAX / 10 - 10) return -1;
    s = s * 10 + (*p - '0');
  }
  *step = s;
  return 0;
}

static int cmp_i64_desc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x < y) - (x > y);
}

/* mkdir -p. */
static int save_mkdirs(const char *dir) {
  char p[PATH_MAX_LEN];
  snprintf(p, sizeof p, "%s", dir);
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return set_error("%s: cannot create: %s", p, strerror(errno));
    *s = '/';
  }
  if (mkdir(p, 0755) != 0 && errno != EEXIST)
    return set_error("%s: cannot create the checkpoint directory: %s", p, strerror(errno));
  return 0;
}

/* Removes the debris of saves that crashed: ROOT/.tmp-step-* and .old-step-*. */
static int save_clean_debris(const char *root) {
  DIR *d = opendir(root);
  if (!d) return set_error("%s: cannot list: %s", root, strerror(errno));
  int rc = 0;
  struct dirent *de;
  while (rc == 0 && (de = readdir(d))) {
    if (strncmp(de->d_name, ".tmp-step-", 10) != 0 && strncmp(de->d_name, ".old-step-", 10) != 0) continue;
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "%s/%s", root, de->d_name);
    rc = ckpt_remove_dir(p);
  }
  closedir(d);
  return rc;
}

/* Deletes step directories beyond the newest `keep` (never `current`). */
static int save_prune(const char *root, int keep, int64_t current) {
  DIR *d = opendir(root);
  if (!d) return set_error("%s: cannot list: %s", root, strerror(errno));
  int64_t *steps = NULL;
  int n = 0, cap = 0, rc = 0;
  struct dirent *de;
  while ((de = readdir(d))) {
    int64_t s;
    if (step_of_name(de->d_name, &s) < 0) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      int64_t *ns = realloc(steps, (size_t)cap * sizeof *ns);
      if (!ns) {
        rc = set_error("checkpoint: out of memory");
        break;
      }
      steps = ns;
    }
    steps[n++] = s;
  }
  closedir(d);
  if (rc == 0) qsort(steps, (size_t)n, sizeof *steps, cmp_i64_desc);
  for (int k = keep; rc == 0 && k < n; k++) {
    if (steps[k] == current) continue;
    char p[PATH_MAX_LEN];
    snprintf(p, sizeof p, "%s/step-%08lld", root, (long long)steps[k]);
    rc = ckpt_remove_dir(p);
  }
  free(steps);
  return rc == 0 ? ckpt_fsync_dir(root) : rc;
}

/* ckpt_internal.h */
int ckpt_commit(const char *root, const char *tmp, const ts_ckpt_meta *meta, int version, int n, const ck_tensor *t,
                int np, const char *own, int keep, struct timespec *published) {
  char final[PATH_MAX_LEN], old[PATH_MAX_LEN], latest[PATH_MAX_LEN], line[64];
  if (save_index(tmp, meta, version, n, t, np, own) < 0 || ckpt_fsync_dir(tmp) < 0) return -1;
  ckpt_test_stage("index");
  snprintf(final, sizeof final, "%s/step-%08lld", root, (long long)meta->step);
  snprintf(old, sizeof old, "%s/.old-step-%08lld", root, (long long)meta->step);
  struct stat st;
  bool replace = stat(final, &st) == 0;
  if (replace) {
    /* The same step saved again. A directory cannot be renamed over a
     * non-empty one; exchanging the two atomically keeps `latest` (which may
     * name this step) valid at every instant. Filesystems without
     * RENAME_EXCHANGE: move the old one aside first (a crash in between
     * leaves `latest` naming a missing directory until the next save). */
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
      snprintf(old, sizeof old, "%s", tmp); /* the old checkpoint now sits at the temporary name */
    } else if (ckpt_remove_dir(old) < 0 || rename(final, old) != 0 || rename(tmp, final) != 0) {
      return set_error("%s: cannot replace the existing checkpoint: %s", final, strerror(errno));
    }
  } else if (rename(tmp, final) != 0) {
    return set_error("%s: rename to %s failed: %s", tmp, final, strerror(errno));
  }
  if (ckpt_fsync_dir(root) < 0) return -1;
  ckpt_test_stage("rename");
  snprintf(latest, sizeof latest, "%s/latest", root);
  int ln = snprintf(line, sizeof line, "step-%08lld\n", (long long)meta->step);
  if (ckpt_write_small(latest, line, (size_t)ln) < 0 || ckpt_fsync_dir(root) < 0) return -1;
  ckpt_test_stage("latest");
  if (published) clock_gettime(CLOCK_MONOTONIC, published); /* complete and durable: the rest is cleaning */
  if (replace && ckpt_remove_dir(old) < 0) return -1;
  if (keep > 0 && save_prune(root, keep, meta->step) < 0) return -1;
  ckpt_test_stage("prune");
  return 0;
}


int ckpt_prepare_root(const char *root) { return save_mkdirs(root) < 0 || save_clean_debris(root) < 0 ? -1 : 0; }
