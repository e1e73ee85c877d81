/* image_internal.h — helpers shared by the ImageFolder files (not public). */
#ifndef TS_DATA_IMAGE_INTERNAL_H
#define TS_DATA_IMAGE_INTERNAL_H

/* torchvision's CenterCrop offset: int(round((len - crop) / 2.0)), half to even. */
int img_center_offset(int len, int crop);
/* torchvision's Resize(resize) of the shorter side: the output size. */
int img_resize_shorter(int h, int w, int resize, int *out_h, int *out_w);

#endif
