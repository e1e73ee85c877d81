/* test_ckpt_corrupt.c — a damaged checkpoint is a clear error naming the
 * file and the tensor, never a crash or silently wrong values: truncated
 * files, flipped data and header bytes (checksums), a header length past the
 * end, overlapping byte ranges, shapes and dtypes that disagree with the
 * index, a missing file, a foreign file named like a shard, a bad index and
 * a bad `latest`, and a program whose shapes differ from the checkpoint's. */
#define _GNU_SOURCE /* memmem */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_common.h"

static char tmp_root[256];
static ts_client *client;

#define SHARD "shard-00000-of-00001.safetensors"

/* A fresh 2-device checkpoint (layout data=2) of version v at root; its step dir into dir. */
static void make_ckpt(const char *root, uint64_t v, char *dir, size_t n) {
  ts_buffer *b[CK_N] = {0};
  ts_ckpt_entry e[CK_N];
  CHECK_OK(ck_make_buffers(client, &CK_LAYOUTS[1], v, false, b));
  ck_entries(b, e);
  ts_ckpt_meta m = ck_meta(7);
  CHECK_OK(ts_ckpt_save(client, root, &m, CK_N, e, 0));
  ck_free_buffers(b);
  snprintf(dir, n, "%s/step-00000007", root);
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  *n = fread(buf, 1, (size_t)len, f);
  buf[*n] = 0;
  fclose(f);
  return buf;
}

static void spit(const char *path, const char *buf, size_t n) {
  FILE *f = fopen(path, "wb");
  fwrite(buf, 1, n, f);
  fclose(f);
}

/* Replaces the first occurrence of `from` in file path by `to`. */
static void edit(const char *path, const char *from, const char *to) {
  size_t n;
  char *s = slurp(path, &n);
  char *at = s ? memmem(s, n, from, strlen(from)) : NULL; /* block files start with NUL bytes */
  CHECK(at != NULL, "'%s' not in %s", from, path);
  if (!at) {
    free(s);
    return;
  }
  size_t pre = (size_t)(at - s), fl = strlen(from), tl = strlen(to);
  char *o = malloc(n - fl + tl + 1);
  memcpy(o, s, pre);
  memcpy(o + pre, to, tl);
  memcpy(o + pre + tl, at + fl, n - pre - fl);
  spit(path, o, n - fl + tl);
  free(o);
  free(s);
}

/* Opens root and reads every tensor; returns 0 only if all of it worked;
 * the error of the first failure stays in ts_last_error. */
static int load_all(const char *root, bool verify) {
  ts_ckpt *ck = ts_ckpt_open(root);
  if (!ck) return -1;
  int rc = 0;
  ts_buffer *b[CK_N] = {0};
  if (ck_make_buffers(client, &CK_LAYOUTS[0], 0, true, b) < 0) rc = -1;
  for (int i = 0; i < CK_N && rc == 0; i++) rc = ts_ckpt_read(ck, client, CK_TENSORS[i].name, b[i]);
  if (rc == 0 && verify) rc = ts_ckpt_verify(ck);
  ck_free_buffers(b);
  ts_ckpt_close(ck);
  return rc;
}

/* Expects load_all to fail with an error containing each of the texts. */
#define EXPECT_FAIL(what, verify, ...)                                                                \
  do {                                                                                                \
    int rc_ = load_all(root, verify);                                                                 \
    const char *want_[] = {__VA_ARGS__, NULL};                                                        \
    bool ok_ = rc_ < 0;                                                                               \
    for (int k_ = 0; ok_ && want_[k_]; k_++) ok_ = strstr(ts_last_error(), want_[k_]) != NULL;        \
    CHECK(ok_, "%s: rc %d, error '%s'", what, rc_, ts_last_error());                                  \
    printf("  %-34s -> %s\n", what, ts_last_error());                                                 \
  } while (0)

static int case_no;
static void next_root(char *root, size_t n, char *dir, size_t dn) {
  snprintf(root, n, "%s/case-%d", tmp_root, case_no++);
  make_ckpt(root, 3, dir, dn);
}

int main(void) {
  ts_test_init("test_ckpt_corrupt", 1);
  snprintf(tmp_root, sizeof tmp_root, "/tmp/tessel_test_ckpt_corrupt_%d", (int)getpid());
  mkdir(tmp_root, 0755);
  client = ts_client_new(&(ts_client_options){.num_threads = 2, .num_devices = 2});
  char root[512], dir[600], p[800], q[800];

  next_root(root, sizeof root, dir, sizeof dir);
  CHECK(load_all(root, true) == 0, "intact checkpoint loads: %s", ts_last_error());

  /* truncated block file */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/" SHARD, dir);
  struct stat st;
  stat(p, &st);
  CHECK(truncate(p, st.st_size / 2) == 0, "truncate");
  EXPECT_FAIL("truncated file", false, SHARD, "truncated");

  /* flipped data byte: the block checksum names the tensor */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/" SHARD, dir);
  {
    size_t n;
    char *s = slurp(p, &n);
    s[n - 3] ^= 0x10; /* inside the last block: "scale" is last, 4 bytes */
    spit(p, s, n);
    free(s);
  }
  EXPECT_FAIL("flipped data byte", false, SHARD, "checksum mismatch", "tensor scale");

  /* flipped header byte (in a shape digit) */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/" SHARD, dir);
  edit(p, "\"shape\":[7,7]", "\"shape\":[7,6]");
  EXPECT_FAIL("flipped header byte", false, SHARD, "header checksum mismatch");

  /* header length past the end of the file */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/" SHARD, dir);
  {
    size_t n;
    char *s = slurp(p, &n);
    memset(s, 0, 8);
    s[5] = 1; /* 2^40 */
    spit(p, s, n);
    free(s);
  }
  EXPECT_FAIL("header length past the end", false, SHARD, "runs past the end");

  /* overlapping byte ranges in the index: block 1 of fc1.weight moved onto block 0 */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/index.json", dir);
  {
    size_t n;
    char *s = slurp(p, &n);
    char *b0 = strstr(s, "\"byte_range\":["), *b1 = b0 ? strstr(b0 + 1, "\"byte_range\":[") : NULL;
    char *e1 = NULL;
    long a0 = b0 ? strtol(b0 + 14, NULL, 10) : 0, a1 = b1 ? strtol(b1 + 14, &e1, 10) : 0;
    long z1 = e1 ? strtol(e1 + 1, NULL, 10) : 0;
    char from[64], to[64]; /* same length, starting 4 bytes into block 0 */
    snprintf(from, sizeof from, "\"byte_range\":[%ld,%ld]", a1, z1);
    snprintf(to, sizeof to, "\"byte_range\":[%ld,%ld]", a0 + 4, a0 + 4 + (z1 - a1));
    free(s);
    edit(p, from, to);
  }
  EXPECT_FAIL("overlapping byte ranges", false, "index.json", "fc1.weight", "overlap");

  /* index shape disagreeing with the file (and with the blocks) */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/index.json", dir);
  edit(p, "\"shape\":[13,7]", "\"shape\":[13,8]");
  EXPECT_FAIL("index shape != blocks", false, "fc1.weight");

  /* index dtype disagreeing with the file (same element size: I32 vs F32) */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/index.json", dir);
  edit(p, "\"name\":\"fc1.bias\",\"dtype\":\"F32\"", "\"name\":\"fc1.bias\",\"dtype\":\"I32\"");
  EXPECT_FAIL("index dtype != file", false, SHARD, "fc1.bias", "f32");

  /* a block whose range the file does not have */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/index.json", dir);
  edit(p, "\"bytes\":", "\"bytes\":1");
  EXPECT_FAIL("file size != index", false, SHARD, "the index says");

  /* missing block file */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/" SHARD, dir);
  unlink(p);
  EXPECT_FAIL("missing file", false, SHARD, "missing");

  /* a foreign file named like a shard: same layout, other values (header and size equal) */
  next_root(root, sizeof root, dir, sizeof dir);
  {
    char r2[600], d2[700];
    snprintf(r2, sizeof r2, "%s/foreign", tmp_root);
    make_ckpt(r2, 4, d2, sizeof d2);
    snprintf(p, sizeof p, "%s/" SHARD, d2);
    snprintf(q, sizeof q, "%s/" SHARD, dir);
    size_t n;
    char *s = slurp(p, &n);
    spit(q, s, n);
    free(s);
  }
  EXPECT_FAIL("foreign shard (same layout)", false, SHARD, "checksum mismatch", "tensor fc1.weight");
  EXPECT_FAIL("foreign shard, verify", true, SHARD, "checksum mismatch");

  /* a foreign safetensors file of other tensors */
  next_root(root, sizeof root, dir, sizeof dir);
  {
    ts_ckpt *ck = ts_ckpt_open(root);
    snprintf(q, sizeof q, "%s/other.safetensors", tmp_root);
    CHECK(ck && ts_ckpt_export(ck, q, false) == 0, "export: %s", ts_last_error());
    ts_ckpt_close(ck);
    snprintf(p, sizeof p, "%s/" SHARD, dir);
    size_t n;
    char *s = slurp(q, &n);
    spit(p, s, n);
    free(s);
  }
  EXPECT_FAIL("foreign safetensors file", false, SHARD);

  /* bad index.json: not JSON, another format, a future version, a missing field, an unsafe file name */
  next_root(root, sizeof root, dir, sizeof dir);
  snprintf(p, sizeof p, "%s/index.json", dir);
  edit(p, "\"format_version\": 2", "\"format_version\": 2,");
  EXPECT_FAIL("index not JSON", false, "index.json", "JSON error");
  edit(p, "\"format_version\": 2,", "\"format_version\": 3");
  EXPECT_FAIL("future format version", false, "index.json", "version 3");
  edit(p, "\"format_version\": 3", "\"format_version\": 2");
  edit(p, "\"checksum\": \"xxh64\"", "\"checksum\": \"crc32\"");
  EXPECT_FAIL("unknown checksum", false, "index.json", "checksum 'crc32'");
  edit(p, "\"checksum\": \"crc32\"", "\"checksum\": \"xxh64\"");
  edit(p, "tessel-checkpoint", "pytorch-checkpoint");
  EXPECT_FAIL("other format", false, "index.json", "pytorch-checkpoint");
  edit(p, "pytorch-checkpoint", "tessel-checkpoint");
  edit(p, "\"hash\":", "\"hush\":");
  EXPECT_FAIL("missing field", false, "index.json", "'hash' is missing");
  edit(p, "\"hush\":", "\"hash\":");
  edit(p, "\"name\":\"shard", "\"name\":\"../shard");
  EXPECT_FAIL("unsafe file name", false, "index.json", "unsafe name");
  edit(p, "\"name\":\"../shard", "\"name\":\"shard");
  CHECK(load_all(root, true) == 0, "restored index loads again: %s", ts_last_error());

  /* latest pointing nowhere / at garbage */
  snprintf(p, sizeof p, "%s/latest", root);
  spit(p, "step-00000099\n", 14);
  EXPECT_FAIL("latest -> missing step", false, "step-00000099");
  spit(p, "../../etc\n", 10);
  EXPECT_FAIL("latest -> garbage", false, "latest", "does not name a step directory");

  /* the program's shape differs from the checkpoint's */
  next_root(root, sizeof root, dir, sizeof dir);
  {
    ts_ckpt *ck = ts_ckpt_open(root);
    ts_buffer *b = ts_buffer_new(client, TS_F32, 2, (int64_t[]){13, 6});
    CHECK(ck && ts_ckpt_read(ck, client, "fc1.weight", b) < 0 &&
              strstr(ts_last_error(), "fc1.weight is f32[13,7] but the program's is f32[13,6]"),
          "shape mismatch: %s", ts_last_error());
    CHECK(ck && ts_ckpt_read(ck, client, "nope", b) < 0 && strstr(ts_last_error(), "no tensor 'nope'"),
          "unknown tensor: %s", ts_last_error());
    ts_buffer_free(b);
    ts_ckpt_close(ck);
  }
  CHECK(ts_ckpt_open("/nonexistent/ckpt") == NULL && strstr(ts_last_error(), "/nonexistent/ckpt"), "no such path");

  ts_client_free(client);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_root);
  if (ts_test_failed == 0 && !getenv("TESSEL_TEST_KEEP") && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp_root);
  return ts_test_finish();
}
