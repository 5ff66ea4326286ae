#!/usr/bin/python3
"""Writes tests/data/torch_nn_layer_cases.json: PyTorch's float64 results for tgrad's
normalization layers and padded convolution modules on fixed inputs, so that
tests/test_nn_layers.cpp can compare values, gradients and running statistics.
Run with Debian's python3-torch: /usr/bin/python3 tests/python/make_nn_layer_cases.py"""

import json
import os

import torch
import torch.nn as nn


def t(x):
    return {"shape": list(x.shape), "data": x.detach().flatten().tolist()}


def ramp(*shape, scale=0.1, shift=-1.0):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float64).reshape(shape) * scale + shift).sin() * 2.0


def main():
    out = {"torch_version": torch.__version__}
    # BatchNorm2d: two training steps then eval, with an affine weight and bias set.
    bn = nn.BatchNorm2d(3, momentum=0.2).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1.5, -0.5, 2.0], dtype=torch.float64))
        bn.bias.copy_(torch.tensor([0.1, 0.2, -0.3], dtype=torch.float64))
    x1 = ramp(2, 3, 2, 3).requires_grad_(True)
    x2 = ramp(2, 3, 2, 3, scale=0.37, shift=0.5)
    y1 = bn(x1)
    y1.backward(ramp(2, 3, 2, 3, scale=0.21, shift=0.3))
    bn(x2)
    bn.eval()
    y_eval = bn(x2)
    out["batchnorm2d"] = {"x1": t(x1), "x2": t(x2), "y1": t(y1), "dx1": t(x1.grad),
                          "dweight": t(bn.weight.grad), "dbias": t(bn.bias.grad),
                          "running_mean": t(bn.running_mean), "running_var": t(bn.running_var),
                          "y_eval": t(y_eval),
                          "state_dict_keys": list(bn.state_dict().keys())}
    # BatchNorm1d on (N, C) with momentum None (cumulative average), two steps.
    bn1 = nn.BatchNorm1d(4, momentum=None).double()
    a = ramp(5, 4)
    b = ramp(5, 4, scale=0.3)
    bn1(a)
    y_b = bn1(b)
    out["batchnorm1d_cumulative"] = {"a": t(a), "b": t(b), "y_b": t(y_b),
                                     "running_mean": t(bn1.running_mean),
                                     "running_var": t(bn1.running_var)}
    # GroupNorm(2, 4), LayerNorm([3, 2]), InstanceNorm2d(2, affine).
    gn = nn.GroupNorm(2, 4).double()
    ln = nn.LayerNorm([3, 2]).double()
    inn = nn.InstanceNorm2d(2, affine=True).double()
    with torch.no_grad():
        gn.weight.copy_(torch.tensor([1.0, 2.0, -1.0, 0.5], dtype=torch.float64))
        gn.bias.copy_(torch.tensor([0.0, 0.1, 0.2, 0.3], dtype=torch.float64))
        ln.weight.copy_(ramp(3, 2, scale=0.5))
        ln.bias.copy_(ramp(3, 2, scale=0.25, shift=0.4))
        inn.weight.copy_(torch.tensor([0.7, -1.2], dtype=torch.float64))
        inn.bias.copy_(torch.tensor([0.5, 0.0], dtype=torch.float64))
    xg = ramp(2, 4, 3, scale=0.17)
    xl = ramp(2, 5, 3, 2, scale=0.13)
    xi = ramp(2, 2, 3, 4, scale=0.11)
    out["groupnorm"] = {"x": t(xg), "y": t(gn(xg))}
    out["layernorm"] = {"x": t(xl), "weight": t(ln.weight), "bias": t(ln.bias), "y": t(ln(xl))}
    out["instancenorm2d"] = {"x": t(xi), "y": t(inn(xi))}
    # Conv2d with reflect and replicate padding, and Conv1d with padding='same' (even kernel).
    for mode in ["reflect", "replicate"]:
        conv = nn.Conv2d(2, 3, (3, 2), padding=(1, 2), padding_mode=mode).double()
        with torch.no_grad():
            conv.weight.copy_(ramp(3, 2, 3, 2, scale=0.07))
            conv.bias.copy_(torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64))
        xc = ramp(1, 2, 4, 5, scale=0.19)
        out["conv2d_" + mode] = {"x": t(xc), "weight": t(conv.weight), "bias": t(conv.bias),
                                 "y": t(conv(xc))}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                        "torch_nn_layer_cases.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
