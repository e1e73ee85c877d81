/* tessel/imagefolder.h — real image data: a folder tree of JPEG and PNG files
 * in torchvision's ImageFolder convention, decoded and augmented on the
 * loader's worker threads.
 *
 *   ROOT/train/<class>/<file>     ROOT/val/<class>/<file>
 *
 * Classes are the sub-folders of ROOT/<split>, sorted by name (byte order, as
 * Python's sorted()); label k is the k-th. A class folder's files are found
 * recursively and ordered as torchvision's make_dataset orders them (sorted
 * folders, then sorted names). Files whose extension is not .jpg, .jpeg or
 * .png (any case) are ignored, as torchvision ignores them; the content, not
 * the extension, decides the decoder (a PNG named .jpg decodes).
 *
 * Decoding uses libjpeg-turbo (TurboJPEG API, accurate DCT, fancy upsampling:
 * what PIL does) and libpng; grey, palette and 16-bit images become 8-bit RGB
 * and alpha is dropped, as PIL's convert("RGB").
 *
 * Transforms (per sample, from the loader's augmentation key of (seed, epoch,
 * index): the same on any thread, process or after a resume):
 *   train: RandomResizedCrop(size) with torchvision's rules: area scale in
 *          [0.08, 1], aspect ratio log-uniform in [3/4, 4/3], 10 attempts,
 *          then the center crop of the closest ratio; bilinear resampling with
 *          PIL's antialiasing filter. The loader's ts_augment then flips
 *          (hflip) and normalizes.
 *   val:   Resize(resize) of the shorter side (torchvision: long side
 *          int(resize * long / short)) then CenterCrop(size); resize defaults
 *          to size * 256 / 224 rounded (256 for 224).
 * The output is u8 (3, size, size), as every ts_source yields. */
#ifndef TESSEL_IMAGEFOLDER_H
#define TESSEL_IMAGEFOLDER_H

#include "tessel/loader.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default) /* the API: what libtessel.so exports */

/* Reads one JPEG or PNG file into *rgb (h, w, 3) u8, malloc'd (the caller
 * frees it). Errors (TS_ERR_IO) name the file: unreadable, empty, not a JPEG
 * or PNG (by content), truncated or corrupt (libjpeg's warnings count as
 * errors, as PIL's "image file is truncated"). */
int ts_image_read(const char *path, uint8_t **rgb, int *h, int *w);
/* The same from memory; `name` is used in error messages. */
int ts_image_decode(const char *name, const uint8_t *data, size_t bytes, uint8_t **rgb, int *h, int *w);

/* Resamples the box (x0, y0, bw, bh) of src (h, w, 3) u8 to an image of
 * out_w x out_h as PIL's Image.resize(BILINEAR) of the cropped box does
 * (antialiased when shrinking), writing only its window (ox, oy, cw, ch) to
 * dst (3, ch, cw) planar. 0, or -1 on bad arguments / out of memory. */
int ts_image_resample(const uint8_t *src, int h, int w, int x0, int y0, int bw, int bh, int out_w, int out_h,
                      int ox, int oy, int cw, int ch, uint8_t *dst);

/* torchvision's RandomResizedCrop.get_params for an h x w image, its
 * randomness drawn from key: the box (x0, y0, bw, bh). scale/ratio NULL:
 * (0.08, 1) and (3/4, 4/3). Returns the attempt that succeeded (0..9), or 10
 * for the center-crop fallback. */
int ts_random_resized_crop_box(int h, int w, uint64_t key, const double scale[2], const double ratio[2],
                               int box[4]);

typedef struct {
  int size;            /* output side: (3, size, size) (required, >= 8) */
  bool train;          /* random resized crop (train) or resize + center crop (val) */
  int resize;          /* val: shorter side before the crop [size * 256 / 224] */
  /* A file that cannot be decoded: an error naming it (false), or (true)
   * counted, reported once on stderr, and replaced by the next readable
   * sample of the split (i + 1, i + 2, ...; the same on every process and
   * after a resume). */
  bool skip_bad_files;
} ts_imagefolder_options;

/* Lists ROOT/<split> (split "train" or "val"). The source is the caller's
 * (ts_source_free, after every loader over it). Errors name the folder: no
 * such folder, no class folders, a class folder without images. */
ts_source *ts_imagefolder_open(const char *root, const char *split, const ts_imagefolder_options *o);
/* Class k's folder name (0 <= k < num_classes); NULL for a bad k or a source
 * that is not an ImageFolder. */
const char *ts_imagefolder_class(const ts_source *s, int k);
/* Sample i's path, relative to ROOT/<split>, and its label (from the
 * listing: no file is read; -1 for a bad i). */
const char *ts_imagefolder_path(const ts_source *s, int64_t i);
int32_t ts_imagefolder_label(const ts_source *s, int64_t i);
/* A 64-bit FNV-1a hash of the listing (classes, relative paths and file
 * sizes, in order): equal on every process that sees the same files. */
uint64_t ts_imagefolder_hash(const ts_source *s);
/* Files skipped so far (skip_bad_files), and files ignored when listing
 * (no image extension). */
int64_t ts_imagefolder_bad_files(const ts_source *s);
/* The error message of the k-th bad file found (the first 64 are kept);
 * NULL past them. Borrowed from s. */
const char *ts_imagefolder_bad_file(const ts_source *s, int64_t k);
int64_t ts_imagefolder_ignored_files(const ts_source *s);

/* ImageNet channel statistics (of pixel/255), torchvision's. */
#define TS_IMAGENET_MEAN {0.485f, 0.456f, 0.406f}
#define TS_IMAGENET_STD {0.229f, 0.224f, 0.225f}

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
