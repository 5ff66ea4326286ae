#!/usr/bin/python3
"""Writes torch_conv_cases.json: a few transposed convolutions computed by PyTorch in float64
(inputs, weight, bias, arguments, output, and the gradients for a given upstream gradient), so
that tests/test_conv_reference.cpp can check the naive loops and the backends against PyTorch.
Run with Debian's python3-torch: /usr/bin/python3 tests/data/make_torch_conv_cases.py"""

import json
import os

import torch
import torch.nn.functional as F

# (name, op, x shape, w shape, bias, stride, padding, output_padding, groups, dilation)
CASES = [
    ("1d_grouped_bias", 1, (2, 4, 5), (4, 3, 3), True, 2, 1, 1, 2, 1),
    ("1d_dilated_no_bias", 1, (1, 2, 6), (2, 2, 2), False, 3, 2, 2, 1, 2),
    ("1d_unbatched_op_below_dilation", 1, (3, 4), (3, 2, 4), True, 1, 0, 3, 1, 4),
    ("2d_bias_mixed_axes", 2, (2, 2, 3, 4), (2, 3, 2, 3), True, (2, 1), (1, 0), (1, 0), 1, (1, 2)),
    ("2d_depthwise", 2, (1, 3, 4, 3), (3, 2, 3, 2), True, (3, 2), (2, 1), (0, 1), 3, (2, 1)),
    ("2d_unbatched_no_bias", 2, (2, 5, 5), (2, 2, 1, 3), False, 1, (0, 1), 0, 1, (1, 3)),
    ("2d_grouped_padded", 2, (2, 4, 3, 3), (4, 1, 3, 3), True, 2, 2, 1, 2, (2, 1)),
]


def as_list(v, dims):
    return list(v) if isinstance(v, (tuple, list)) else [v] * dims


def tensor_json(t):
    return {"shape": list(t.shape), "data": t.detach().flatten().tolist()}


def main():
    torch.manual_seed(1234)
    out = {"torch_version": torch.__version__, "cases": []}
    for name, dims, xs, ws, has_bias, s, p, op, g, d in CASES:
        x = torch.randn(xs, dtype=torch.float64, requires_grad=True)
        w = torch.randn(ws, dtype=torch.float64, requires_grad=True)
        c_out = ws[1] * g
        b = torch.randn(c_out, dtype=torch.float64, requires_grad=True) if has_bias else None
        fn = F.conv_transpose1d if dims == 1 else F.conv_transpose2d
        y = fn(x, w, b, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
        dy = torch.randn(y.shape, dtype=torch.float64)
        y.backward(dy)
        case = {
            "name": name,
            "op": "conv_transpose%dd" % dims,
            "stride": as_list(s, dims),
            "padding": as_list(p, dims),
            "output_padding": as_list(op, dims),
            "dilation": as_list(d, dims),
            "groups": g,
            "x": tensor_json(x),
            "w": tensor_json(w),
            "b": tensor_json(b) if has_bias else None,
            "y": tensor_json(y),
            "dy": tensor_json(dy),
            "dx": tensor_json(x.grad),
            "dw": tensor_json(w.grad),
            "db": tensor_json(b.grad) if has_bias else None,
        }
        out["cases"].append(case)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_conv_cases.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main()
