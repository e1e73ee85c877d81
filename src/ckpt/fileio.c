/* fileio.c — the POSIX file work of checkpoints: full writes and positioned
 * reads that retry short transfers, fsync of directories (a rename is only
 * durable once its directory is), small atomic files, checksums of whole
 * files and removal of a step directory. */
#define _GNU_SOURCE /* posix_fadvise */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt_internal.h"
#include "util/error.h"
#include "util/hash.h" /* util_hash64 */

int ckpt_write_all(int fd, const void *buf, size_t n, const char *path) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return set_error("%s: write failed: %s", path, w < 0 ? strerror(errno) : "no progress");
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int ckpt_pread_all(int fd, void *buf, size_t n, uint64_t off, const char *path) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return set_error("%s: read at byte %llu failed: %s", path, (unsigned long long)off, strerror(errno));
    if (r == 0) return set_error("%s: unexpected end of file at byte %llu (truncated?)", path, (unsigned long long)off);
    p += r;
    n -= (size_t)r;
    off += (uint64_t)r;
  }
  return 0;
}

int ckpt_fsync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return set_error("%s: cannot open the directory to fsync it: %s", dir, strerror(errno));
  int rc = fsync(fd) == 0 || errno == EINVAL ? 0 : set_error("%s: fsync failed: %s", dir, strerror(errno));
  close(fd);
  return rc;
}

int ckpt_write_small(const char *path, const char *text, size_t n) {
  char tmp[4096];
  if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) return set_error("%s: path too long", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return set_error("%s: cannot create: %s", tmp, strerror(errno));
  int rc = ckpt_write_all(fd, text, n, tmp);
  if (rc == 0 && fsync(fd) != 0) rc = set_error("%s: fsync failed: %s", tmp, strerror(errno));
  if (close(fd) != 0 && rc == 0) rc = set_error("%s: close failed: %s", tmp, strerror(errno));
  if (rc == 0 && rename(tmp, path) != 0) rc = set_error("%s: rename to %s failed: %s", tmp, path, strerror(errno));
  if (rc != 0) unlink(tmp);
  return rc;
}

char *ckpt_read_small(const char *path, size_t max, size_t *n) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    set_error("%s: cannot open: %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  char *buf = NULL;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    set_error("%s: not a regular file", path);
  } else if ((uint64_t)st.st_size > max) {
    set_error("%s: %lld bytes, more than the %zu allowed", path, (long long)st.st_size, max);
  } else if (!(buf = malloc((size_t)st.st_size + 1))) {
    set_error("%s: out of memory", path);
  } else if (ckpt_pread_all(fd, buf, (size_t)st.st_size, 0, path) != 0) {
    free(buf);
    buf = NULL;
  } else {
    buf[st.st_size] = 0;
    *n = (size_t)st.st_size;
  }
  close(fd);
  return buf;
}

int ckpt_remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return errno == ENOENT ? 0 : set_error("%s: cannot open: %s", dir, strerror(errno));
  struct dirent *de;
  int rc = 0;
  char p[4096];
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    if (unlink(p) != 0 && rc == 0) rc = set_error("%s: cannot remove: %s", p, strerror(errno));
  }
  closedir(d);
  if (rc == 0 && rmdir(dir) != 0) rc = set_error("%s: cannot remove: %s", dir, strerror(errno));
  return rc;
}

int ckpt_file_hash(const char *path, int version, uint64_t *hash, uint64_t *size) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return set_error("%s: cannot open: %s", path, strerror(errno));
  posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  char *buf = malloc(CKPT_HASH_PIECE);
  uint64_t h = 0, total = 0;
  ckpt_xxh64_state xs;
  ckpt_xxh64_init(&xs);
  int rc = buf ? 0 : set_error("%s: out of memory", path);
  while (rc == 0) {
    ssize_t r = read(fd, buf, CKPT_HASH_PIECE);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) rc = set_error("%s: read failed: %s", path, strerror(errno));
    if (r <= 0) break;
    /* Pieces of a regular file come whole except at the end; chaining per
     * read() would still differ on a short read, so top a piece up. */
    size_t got = (size_t)r;
    while (got < CKPT_HASH_PIECE) {
      ssize_t more = read(fd, buf + got, CKPT_HASH_PIECE - got);
      if (more < 0 && errno == EINTR) continue;
      if (more <= 0) break;
      got += (size_t)more;
    }
    if (version == 1) h = util_hash64(buf, got, h);
    else ckpt_xxh64_update(&xs, buf, got);
    total += got;
    if (got < CKPT_HASH_PIECE) break;
  }
  free(buf);
  close(fd);
  if (rc == 0) *hash = version == 1 ? h : ckpt_xxh64_digest(&xs), *size = total;
  return rc;
}
