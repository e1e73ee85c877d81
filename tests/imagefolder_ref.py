#!/usr/bin/python3
"""imagefolder_ref.py — the reference side of tests/test_imagefolder.c (PIL
and numpy only; torchvision is not installed, so its rules are written out
here from its source):

  imagefolder_ref.py tree ROOT
      writes ROOT/train and ROOT/val: classes whose names sort subtly
      ("A", "a", "a b", "a-b", "b"), nested sub-folders, JPEGs (colour,
      greyscale, 4:2:0 and 4:4:4, progressive), PNGs (RGB, RGBA, greyscale,
      palette with transparency, 16-bit), a file without an image extension.
  imagefolder_ref.py ref ROOT SPLIT SIZE RESIZE BOXES OUT
      OUT/listing.txt: "label relpath" per sample in torchvision's
      make_dataset order; OUT/dec_<i>.raw: PIL's decode (h, w, 3) with a
      "w h" header line in OUT/dec_<i>.txt; OUT/val_<i>.raw: Resize(RESIZE) +
      CenterCrop(SIZE) as torchvision does it on a PIL image, (3, S, S);
      OUT/crop_<i>.raw: crop to the box on line i of BOXES ("x0 y0 w h") then
      resize to SIZE x SIZE (torchvision's resized_crop), (3, S, S)."""
import os
import sys

import numpy as np
from PIL import Image

EXTS = (".jpg", ".jpeg", ".png")


def tree(root):
    rng = np.random.default_rng(5)

    def img(w, h, mode="RGB"):
        yy, xx = np.mgrid[0:h, 0:w]
        a = np.stack([(xx * 7 + yy * 3) % 256, (xx * 2 + yy * 11) % 256, (xx * yy) % 256], -1)
        a = (a + rng.integers(0, 40, a.shape)).clip(0, 255).astype(np.uint8)
        im = Image.fromarray(a, "RGB")
        return im.convert(mode) if mode != "RGB" else im

    for split in ("train", "val"):
        for cls in ("b", "a b", "A", "a-b", "a"):
            os.makedirs(os.path.join(root, split, cls), exist_ok=True)
        d = lambda *p: os.path.join(root, split, *p)
        img(37, 29).save(d("b", "z.jpg"), quality=90)
        img(30, 41).save(d("b", "Y.JPEG"), quality=85, subsampling=0)  # 4:4:4
        img(50, 20).save(d("A", "one.png"))
        img(23, 31, "L").save(d("A", "grey.jpg"), quality=90)
        img(33, 33).save(d("a", "prog.jpg"), quality=80, progressive=True)
        img(27, 35, "RGBA").save(d("a", "alpha.png"))
        img(40, 30, "L").save(d("a b", "grey.png"))
        img(20, 26).convert("P", palette=Image.ADAPTIVE, colors=16).save(d("a b", "pal.png"), transparency=3)
        os.makedirs(d("a-b", "sub"), exist_ok=True)
        os.makedirs(d("a-b", "sub-x"), exist_ok=True)
        img(26, 26).save(d("a-b", "top.jpg"), quality=90)
        img(45, 28).save(d("a-b", "sub", "in.jpg"), quality=90)
        img(28, 45).save(d("a-b", "sub-x", "in.png"))
        a16 = (np.arange(24 * 18, dtype=np.uint16).reshape(18, 24) * 151).astype(np.uint16)
        Image.fromarray(a16, "I;16").save(d("a-b", "sub", "deep16.png"))
        with open(d("a", "notes.txt"), "w") as f:
            f.write("not an image\n")
        img(64, 48).save(d("b", "big.jpg"), quality=95)


def listing(root, split):
    classes = sorted(e.name for e in os.scandir(os.path.join(root, split)) if e.is_dir())
    out = []
    for k, c in enumerate(classes):
        base = os.path.join(root, split, c)
        for r, _, names in sorted(os.walk(base, followlinks=True)):
            for n in sorted(names):
                if n.lower().endswith(EXTS):
                    out.append((k, os.path.relpath(os.path.join(r, n), os.path.join(root, split))))
    return out


def chw(im):
    return np.ascontiguousarray(np.asarray(im, dtype=np.uint8).transpose(2, 0, 1))


def ref(root, split, size, resize, boxes, out):
    os.makedirs(out, exist_ok=True)
    items = listing(root, split)
    bx = [tuple(int(v) for v in l.split()) for l in open(boxes)] if boxes != "-" else []
    with open(os.path.join(out, "listing.txt"), "w") as f:
        for k, p in items:
            f.write("%d %s\n" % (k, p))
    for i, (k, p) in enumerate(items):
        im = Image.open(os.path.join(root, split, p))
        if im.mode.startswith("I"):  # 16-bit grey (PIL: "I" or "I;16"): tessel takes the high byte; PIL's convert would clamp at 255
            im = Image.fromarray((np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8), "L")
        im = im.convert("RGB")
        w, h = im.size
        np.asarray(im, dtype=np.uint8).tofile(os.path.join(out, "dec_%d.raw" % i))
        # torchvision Resize(resize): shorter side to resize, the other int(resize * long / short)
        if w <= h:
            nw, nh = resize, int(resize * h / w)
        else:
            nw, nh = int(resize * w / h), resize
        r = im.resize((nw, nh), Image.BILINEAR)
        top, left = int(round((nh - size) / 2.0)), int(round((nw - size) / 2.0))
        chw(r.crop((left, top, left + size, top + size))).tofile(os.path.join(out, "val_%d.raw" % i))
        if i < len(bx):
            x0, y0, bw, bh = bx[i]
            c = im.crop((x0, y0, x0 + bw, y0 + bh)).resize((size, size), Image.BILINEAR)
            chw(c).tofile(os.path.join(out, "crop_%d.raw" % i))


if __name__ == "__main__":
    if sys.argv[1] == "tree":
        tree(sys.argv[2])
    else:
        ref(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7])
