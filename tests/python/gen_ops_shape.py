"""Prints the PyTorch (float64) expected values pasted into tests/test_ops_shape.cpp,
test_ops_math.cpp and test_ops_resample.cpp. Run: /usr/bin/python3 tests/python/gen_ops_shape.py"""
import torch
import torch.nn.functional as F

x = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4) * 0.5 - 3
x4 = x.reshape(1, 2, 3, 4)
s = torch.tensor([[1., 3., 3., -2.], [0.5, -1., 7., 7.]], dtype=torch.float64)


def show(name, t):
    print(name, list(t.shape), ", ".join(repr(v) for v in t.flatten().tolist()))


show("nearest_size", F.interpolate(x4, size=(5, 7), mode="nearest"))
show("nearest_scale", F.interpolate(x4, scale_factor=1.7, mode="nearest"))
show("bilinear_false", F.interpolate(x4, size=(5, 7), mode="bilinear", align_corners=False))
show("bilinear_true", F.interpolate(x4, size=(5, 7), mode="bilinear", align_corners=True))
show("bilinear_scale", F.interpolate(x4, scale_factor=(1.5, 0.6), mode="bilinear"))
show("reflect", F.pad(x, (2, 1, 1, 2), mode="reflect"))
show("replicate", F.pad(x, (2, 1, 1, 2), mode="replicate"))
show("constant", F.pad(x, (1, -1, 0, 1), value=2.5))
show("pixel_shuffle", F.pixel_shuffle(torch.arange(16., dtype=torch.float64).reshape(1, 4, 2, 2), 2))
show("softmax1", torch.softmax(s, 1))
show("log_softmax0", torch.log_softmax(s, 0))
show("permute", x.permute(2, 0, 1))
show("flip", x.flip(0, 2))
show("slice", x[:, :, 1:4:2])
show("cat1", torch.cat([x, x[:, :1]], 1))
show("index_select", x.index_select(2, torch.tensor([3, 0, 3])))
show("nearest_1d", F.interpolate(x, size=7, mode="nearest"))
show("nearest_3d", F.interpolate(x.reshape(1, 1, 2, 3, 4), scale_factor=(1.0, 0.7, 1.5), mode="nearest"))
