/* idx.c — reading IDX files (the MNIST / Fashion-MNIST container), gzipped or
 * plain.
 *
 * Layout: a big-endian u32 magic 0x000008NN (0x08 = unsigned byte data, NN =
 * number of dims), NN big-endian u32 dims, then prod(dims) bytes, and nothing
 * after. zlib's gzread reads gzip and plain files alike (it detects the 1f 8b
 * magic itself), so one code path serves both. Every error names the file. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h> /* gzopen / gzread: transparent gzip */

#include "util/error.h"
#include "tessel/data.h"

/* Largest element count accepted (the data is held in one malloc'd block). */
#define IDX_MAX_ELEMS ((int64_t)1 << 31)

/* Reads up to n bytes; returns the count read (short at end of file) or -1
 * with the error set for a read / decompression error. */
static int64_t idx_read_full(gzFile f, const char *path, uint8_t *dst, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    int64_t want = n - got;
    unsigned chunk = want > (1 << 30) ? (1u << 30) : (unsigned)want;
    int r = gzread(f, dst + got, chunk);
    if (r < 0) {
      int zerr;
      const char *msg = gzerror(f, &zerr);
      set_error_code(TS_ERR_IO, "%s: read error after %lld bytes: %s", path, (long long)got,
                        zerr == Z_ERRNO ? strerror(errno) : msg);
      return -1;
    }
    if (r == 0) break;
    got += r;
  }
  return got;
}

/* A gzip stream that ends early makes gzread return the bytes it has and
 * leaves Z_BUF_ERROR behind; a corrupted one gives Z_DATA_ERROR. Either way
 * the content is not to be trusted. */
static int idx_check_stream(gzFile f, const char *path) {
  int zerr = Z_OK;
  const char *msg = gzerror(f, &zerr);
  if (zerr == Z_OK || zerr == Z_STREAM_END) return 0;
  return set_error_code(TS_ERR_IO, "%s: corrupt or truncated gzip stream: %s", path, msg);
}

static uint32_t idx_be32(const uint8_t *b) {
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}

int ts_idx_read(const char *path, int *ndim, int64_t dims[3], uint8_t **data) {
  if (!path || !ndim || !dims || !data) return set_error("ts_idx_read: NULL argument");
  *data = NULL;
  *ndim = 0;
  errno = 0; /* gzopen leaves errno set only when open() itself failed */
  gzFile f = gzopen(path, "rb");
  if (!f) return set_error_code(TS_ERR_IO, "%s: cannot open: %s", path, errno ? strerror(errno) : "gzopen failed");
  gzbuffer(f, 1 << 17);

  uint8_t head[16];
  int64_t got = idx_read_full(f, path, head, 4);
  if (got < 0) goto fail;
  if (got < 4) {
    set_error_code(TS_ERR_IO, "%s: truncated: file has %lld bytes, too short for the 4-byte IDX magic", path,
                      (long long)got);
    goto fail;
  }
  uint32_t magic = idx_be32(head);
  if (magic != 0x00000801u && magic != 0x00000803u) {
    if (head[0] == 0 && head[1] == 0 && head[2] != 0x08)
      set_error_code(TS_ERR_IO,
                        "%s: IDX data type 0x%02x is not supported (only 0x08, unsigned byte)", path, head[2]);
    else
      set_error_code(TS_ERR_IO, "%s: bad magic 0x%08x (expected 0x00000801 for labels or 0x00000803 for images); "
                        "is this an IDX file?", path, magic);
    goto fail;
  }
  int nd = head[3];
  got = idx_read_full(f, path, head + 4, 4 * nd);
  if (got < 0) goto fail;
  if (got < 4 * nd) {
    if (idx_check_stream(f, path) == 0)
      set_error_code(TS_ERR_IO, "%s: truncated header: expected %d dims (%d bytes) after the magic, got %lld bytes",
                        path, nd, 4 * nd, (long long)got);
    goto fail;
  }
  int64_t numel = 1;
  for (int i = 0; i < nd; i++) {
    uint32_t d = idx_be32(head + 4 + 4 * i);
    if (d == 0) {
      set_error_code(TS_ERR_IO, "%s: dim %d is 0 (an empty IDX file is not a usable dataset)", path, i);
      goto fail;
    }
    dims[i] = d;
    if (d > IDX_MAX_ELEMS || numel * (int64_t)d > IDX_MAX_ELEMS) {
      set_error_code(TS_ERR_IO, "%s: dims give more than 2^31 elements (dim %d is %u)", path, i, d);
      goto fail;
    }
    numel *= d;
  }

  uint8_t *buf = malloc((size_t)numel);
  if (!buf) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld bytes of data", path, (long long)numel);
    goto fail;
  }
  got = idx_read_full(f, path, buf, numel);
  if (got < 0) {
    free(buf);
    goto fail;
  }
  if (got < numel) {
    if (idx_check_stream(f, path) == 0)
      set_error_code(TS_ERR_IO,
                        "%s: truncated: expected %lld bytes (%d-byte header + %lld bytes of %s data), got %lld",
                        path, (long long)(4 + 4 * nd + numel), 4 + 4 * nd, (long long)numel,
                        nd == 3 ? "pixel" : "label", (long long)(4 + 4 * nd + got));
    free(buf);
    goto fail;
  }
  uint8_t extra;
  got = idx_read_full(f, path, &extra, 1);
  if (got != 0 || idx_check_stream(f, path) != 0) {
    if (got > 0)
      set_error_code(TS_ERR_IO, "%s: trailing bytes after the %lld bytes of data the header announces", path,
                        (long long)numel);
    free(buf);
    goto fail;
  }
  gzclose(f);
  *ndim = nd;
  *data = buf;
  return 0;

fail:
  gzclose(f);
  return -1;
}
