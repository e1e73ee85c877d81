#!/usr/bin/python3
"""make_imagefolder.py — writes a small ImageFolder tree of generated JPEG and
PNG files for the tests and the loader benchmark (PIL only, no network):

  make_imagefolder.py ROOT [--classes K] [--train N] [--val N] [--size WxH]
                           [--seed S] [--png-every M] [--vary]

ROOT/train/class_<k>/img_<i>.jpg (every M-th a .png) and ROOT/val/... . Each
class has its own colour and stripe direction plus noise, so the labels are
learnable; --vary gives the images different sizes and aspect ratios
(0.5x..1.5x each side), as real photographs have."""
import argparse
import os
import random

from PIL import Image


def make_image(rng, k, w, h):
    # class colour + stripes (horizontal for even classes, vertical for odd) + noise
    base = [(k * 97 + 40 * c) % 200 + 30 for c in range(3)]
    period = 6 + (k % 5) * 3
    img = Image.new("RGB", (w, h))
    px = []
    for y in range(h):
        for x in range(w):
            t = y if k % 2 == 0 else x
            s = 30 if (t // period) % 2 else -30
            px.append(tuple(max(0, min(255, base[c] + s + rng.randint(-20, 20))) for c in range(3)))
    img.putdata(px)
    return img


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--train", type=int, default=8, help="images per class")
    ap.add_argument("--val", type=int, default=3, help="images per class")
    ap.add_argument("--size", default="40x32")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--png-every", type=int, default=4)
    ap.add_argument("--vary", action="store_true")
    ap.add_argument("--quality", type=int, default=90)
    a = ap.parse_args()
    w0, h0 = (int(v) for v in a.size.split("x"))
    rng = random.Random(a.seed)
    for split, n in (("train", a.train), ("val", a.val)):
        for k in range(a.classes):
            d = os.path.join(a.root, split, "class_%02d" % k)
            os.makedirs(d, exist_ok=True)
            for i in range(n):
                w, h = w0, h0
                if a.vary:
                    w = max(8, int(w0 * rng.uniform(0.5, 1.5)))
                    h = max(8, int(h0 * rng.uniform(0.5, 1.5)))
                img = make_image(rng, k, w, h)
                png = a.png_every > 0 and i % a.png_every == a.png_every - 1
                path = os.path.join(d, "img_%04d.%s" % (i, "png" if png else "jpg"))
                if png:
                    img.save(path)
                else:
                    img.save(path, quality=a.quality)


if __name__ == "__main__":
    main()
