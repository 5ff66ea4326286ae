#!/usr/bin/python3
"""Writes torch_conv_regular_cases.json: regular convolutions (F.conv1d / F.conv2d) computed by
PyTorch in float64: inputs, weight, bias, arguments, output, the gradients for a given upstream
gradient, and the second-order gradients of <dw, u> with respect to x and the upstream gradient
(what a gradient penalty differentiates), so that tests/test_conv_regular.cpp can check tgrad's
conv1d/conv2d, which run the transposed-convolution kernels with the passes swapped.
Run with Debian's python3-torch: /usr/bin/python3 tests/data/make_torch_conv_regular_cases.py"""

import json
import os

import torch
import torch.nn.functional as F

# (name, dims, x shape, w shape, bias, stride, padding, groups, dilation); padding may be
# "same" or "valid".
CASES = [
    ("1d_plain", 1, (2, 3, 7), (4, 3, 3), True, 1, 1, 1, 1),
    ("1d_strided_dilated_grouped", 1, (2, 4, 11), (6, 2, 3), True, 2, 2, 2, 2),
    ("1d_unbatched_same", 1, (3, 9), (2, 3, 5), False, 1, "same", 1, 1),
    ("1d_stride_leaves_rows", 1, (1, 2, 10), (3, 2, 4), True, 3, 0, 1, 1),
    ("2d_plain", 2, (2, 3, 5, 6), (4, 3, 3, 3), True, 1, 1, 1, 1),
    ("2d_strided_mixed_axes", 2, (1, 2, 7, 8), (3, 2, 3, 2), True, (2, 3), (1, 0), 1, (1, 2)),
    ("2d_depthwise_same", 2, (2, 4, 5, 5), (4, 1, 3, 3), True, 1, "same", 4, 1),
    ("2d_valid_no_bias", 2, (2, 2, 6, 4), (2, 2, 2, 3), False, 2, "valid", 1, 1),
]


def as_list(v, dims):
    return list(v) if isinstance(v, (tuple, list)) else [v] * dims


def tensor_json(t):
    return {"shape": list(t.shape), "data": t.detach().flatten().tolist()}


def main():
    torch.manual_seed(4321)
    out = {"torch_version": torch.__version__, "cases": []}
    for name, dims, xs, ws, has_bias, s, p, g, d in CASES:
        x = torch.randn(xs, dtype=torch.float64, requires_grad=True)
        w = torch.randn(ws, dtype=torch.float64, requires_grad=True)
        b = torch.randn(ws[0], dtype=torch.float64, requires_grad=True) if has_bias else None
        fn = F.conv1d if dims == 1 else F.conv2d
        y = fn(x, w, b, stride=s, padding=p, groups=g, dilation=d)
        dy = torch.randn(y.shape, dtype=torch.float64, requires_grad=True)
        dx, dw = torch.autograd.grad(y, (x, w), dy, create_graph=True)
        u = torch.randn(dw.shape, dtype=torch.float64)
        ggx, ggdy = torch.autograd.grad(dw, (x, dy), u)
        db = None
        if has_bias:
            (db,) = torch.autograd.grad(y, (b,), dy)
        case = {
            "name": name,
            "op": "conv%dd" % dims,
            "stride": as_list(s, dims),
            "padding": p if isinstance(p, str) else as_list(p, dims),
            "dilation": as_list(d, dims),
            "groups": g,
            "x": tensor_json(x),
            "w": tensor_json(w),
            "b": tensor_json(b) if has_bias else None,
            "y": tensor_json(y),
            "dy": tensor_json(dy),
            "dx": tensor_json(dx),
            "dw": tensor_json(dw),
            "db": tensor_json(db) if has_bias else None,
            "u": tensor_json(u),
            "ggx": tensor_json(ggx),
            "ggdy": tensor_json(ggdy),
        }
        out["cases"].append(case)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_conv_regular_cases.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
