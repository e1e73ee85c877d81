/* image_decode.c — JPEG and PNG files to 8-bit RGB (h, w, 3), through
 * libjpeg-turbo's TurboJPEG API and libpng: no decoder of our own. The
 * content decides the format (magic bytes), not the file name. Results match
 * PIL's Image.open(f).convert("RGB"): accurate integer DCT and fancy
 * upsampling (libjpeg's defaults, PIL's too); grey and palette expanded,
 * alpha dropped. One difference: 16-bit PNGs are reduced to their high byte
 * (the value scaled to 8 bits); PIL does that for 16-bit colour but clamps
 * 16-bit grey at 255 (an almost white image). Every libjpeg warning
 * (e.g. "Premature end of JPEG file": a truncated file that libjpeg would
 * fill with grey) is an error, as PIL's "image file is truncated". */
#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "tessel/imagefolder.h"
#include "util/error.h"

/* Images larger than this many pixels are refused (a corrupt header would
 * otherwise ask for gigabytes). */
#define IMG_MAX_PIXELS (1ll << 28)

static int decode_jpeg(const char *name, const uint8_t *data, size_t bytes, uint8_t **rgb, int *h, int *w) {
  tjhandle tj = tjInitDecompress();
  if (!tj) return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: cannot start the JPEG decoder", name);
  int width, height, subsamp, cs;
  int rc = -1;
  uint8_t *out = NULL, *cmyk = NULL;
  if (tjDecompressHeader3(tj, data, (unsigned long)bytes, &width, &height, &subsamp, &cs) < 0) {
    set_error_code(TS_ERR_IO, "%s: corrupt or truncated JPEG (%zu bytes): %s", name, bytes, tjGetErrorStr2(tj));
    goto done;
  }
  if (width <= 0 || height <= 0 || (int64_t)width * height > IMG_MAX_PIXELS) {
    set_error_code(TS_ERR_IO, "%s: JPEG of %dx%d pixels: too large or empty", name, width, height);
    goto done;
  }
  size_t npix = (size_t)width * (size_t)height;
  out = malloc(npix * 3);
  if (!out) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for a %dx%d image", name, width, height);
    goto done;
  }
  /* CMYK/YCCK (Adobe, stored inverted): libjpeg cannot make RGB of them;
   * decoded as CMYK and converted as PIL does (r = c * k / 255 on inverted
   * values). */
  bool is_cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
  if (is_cmyk && !(cmyk = malloc(npix * 4))) {
    set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory for a %dx%d image", name, width, height);
    goto done;
  }
  if (tjDecompress2(tj, data, (unsigned long)bytes, is_cmyk ? cmyk : out, width, 0, height,
                    is_cmyk ? TJPF_CMYK : TJPF_RGB, 0) < 0) {
    /* a warning too: the pixels would be partly invented */
    set_error_code(TS_ERR_IO, "%s: %s JPEG (%zu bytes): %s", name,
                   tjGetErrorCode(tj) == TJERR_WARNING ? "truncated or damaged" : "corrupt or truncated", bytes,
                   tjGetErrorStr2(tj));
    goto done;
  }
  if (is_cmyk)
    for (size_t i = 0; i < npix; i++) {
      const uint8_t *p = cmyk + 4 * i;
      for (int k = 0; k < 3; k++) out[3 * i + k] = (uint8_t)((p[k] * p[3] + 127) / 255);
    }
  *rgb = out, *h = height, *w = width;
  out = NULL;
  rc = 0;
done:
  free(out);
  free(cmyk);
  tjDestroy(tj);
  return rc;
}

/* ---- PNG: libpng's classic API reading from memory, errors by longjmp ---- */

typedef struct {
  const uint8_t *data;
  size_t bytes, pos;
  char msg[200];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  png_src *s = png_get_io_ptr(png);
  if (n > s->bytes - s->pos) {
    snprintf(s->msg, sizeof s->msg, "truncated (ends after %zu bytes)", s->bytes);
    png_longjmp(png, 1);
  }
  memcpy(out, s->data + s->pos, n);
  s->pos += n;
}

static void png_on_error(png_structp png, png_const_charp msg) {
  png_src *s = png_get_error_ptr(png);
  if (!s->msg[0]) snprintf(s->msg, sizeof s->msg, "%s", msg);
  png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static int decode_png(const char *name, const uint8_t *data, size_t bytes, uint8_t **rgb, int *h, int *w) {
  png_src src = {.data = data, .bytes = bytes};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!png || !info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: cannot start the PNG decoder", name);
  }
  uint8_t *volatile out = NULL;
  png_bytep *volatile rows = NULL;
  if (setjmp(png_jmpbuf(png))) {
    free(out);
    free(rows);
    png_destroy_read_struct(&png, &info, NULL);
    return set_error_code(TS_ERR_IO, "%s: corrupt or truncated PNG: %s", name, src.msg[0] ? src.msg : "read error");
  }
  png_set_read_fn(png, &src, png_read_mem);
  png_read_info(png, info);
  png_uint_32 width = png_get_image_width(png, info), height = png_get_image_height(png, info);
  int depth = png_get_bit_depth(png, info), type = png_get_color_type(png, info);
  if ((int64_t)width * height > IMG_MAX_PIXELS) {
    snprintf(src.msg, sizeof src.msg, "%ux%u pixels is too large", (unsigned)width, (unsigned)height);
    png_longjmp(png, 1);
  }
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  /* alpha, or a tRNS chunk the palette expansion turns into alpha: dropped */
  if ((type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS)) png_set_strip_alpha(png);
  if (type == PNG_COLOR_TYPE_GRAY || type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != (size_t)width * 3) {
    snprintf(src.msg, sizeof src.msg, "unsupported layout (%zu bytes per row for %u pixels)",
             (size_t)png_get_rowbytes(png, info), (unsigned)width);
    png_longjmp(png, 1);
  }
  out = malloc((size_t)width * height * 3);
  rows = malloc((size_t)height * sizeof *rows);
  if (!out || !rows) {
    snprintf(src.msg, sizeof src.msg, "out of memory for %ux%u pixels", (unsigned)width, (unsigned)height);
    png_longjmp(png, 1);
  }
  for (png_uint_32 y = 0; y < height; y++) rows[y] = out + (size_t)y * width * 3;
  png_read_image(png, rows);
  png_read_end(png, NULL); /* checks the CRCs up to IEND: a cut-off file fails here */
  free(rows);
  png_destroy_read_struct(&png, &info, NULL);
  *rgb = out, *h = (int)height, *w = (int)width;
  return 0;
}

int ts_image_decode(const char *name, const uint8_t *data, size_t bytes, uint8_t **rgb, int *h, int *w) {
  if (!name) name = "image";
  if (!data || !rgb || !h || !w) return set_error("ts_image_decode: NULL argument");
  *rgb = NULL;
  if (bytes == 0) return set_error_code(TS_ERR_IO, "%s: empty file", name);
  static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return decode_jpeg(name, data, bytes, rgb, h, w);
  if (bytes >= 8 && memcmp(data, png_magic, 8) == 0) return decode_png(name, data, bytes, rgb, h, w);
  char head[40] = "";
  for (size_t i = 0; i < bytes && i < 8; i++) snprintf(head + 3 * i, sizeof head - 3 * i, "%02x ", data[i]);
  return set_error_code(TS_ERR_IO, "%s: not a JPEG or PNG image (starts with bytes %s)", name, head);
}

int ts_image_read(const char *path, uint8_t **rgb, int *h, int *w) {
  if (!path) return set_error("ts_image_read: NULL path");
  FILE *f = fopen(path, "rb");
  if (!f) return set_error_code(TS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? cap * 2 : 256 * 1024;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return set_error_code(TS_ERR_OUT_OF_MEMORY, "%s: out of memory reading the file", path);
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  bool bad = ferror(f);
  fclose(f);
  int rc = bad ? set_error_code(TS_ERR_IO, "%s: read error", path) : ts_image_decode(path, buf, n, rgb, h, w);
  free(buf);
  return rc;
}
