#!/usr/bin/env python3
"""The PyTorch side of tests/test_checkpoint_interop.cpp.

  checkpoint_interop.py load   MODEL CKPT INPUT OUTPUT  load a tgrad checkpoint into the torch
                                                         model, run INPUT, write OUTPUT
  checkpoint_interop.py export MODEL CKPT INPUT OUTPUT  save a fresh torch model's state_dict as
                                                         CKPT, and INPUT with its OUTPUT
MODEL is "2d" or "1d"; every file is safetensors. Needs only torch and numpy: the format is
read and written here with struct/json when the `safetensors` package is missing.
"""
import json
import struct
import sys

import numpy as np
import torch
from torch import nn

DTYPES = {"F32": np.float32, "F64": np.float64}
CODES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64"}


def save_file(tensors, path, metadata=None):
    try:
        from safetensors.torch import save_file as st_save
        st_save({k: v.contiguous() for k, v in tensors.items()}, path, metadata=metadata)
        return
    except ImportError:
        pass
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        a = t.detach().cpu().numpy()
        data = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": CODES[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def load_file(path):
    try:
        from safetensors.torch import load_file as st_load
        return st_load(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        a = np.frombuffer(data[b:end], dtype=np.dtype(DTYPES[e["dtype"]]).newbyteorder("<"))
        out[name] = torch.from_numpy(a.astype(DTYPES[e["dtype"]]).reshape(e["shape"]).copy())
    return out


def make_model(kind):
    # Must match make_model() in tests/test_checkpoint_interop.cpp layer for layer.
    if kind == "2d":
        return nn.Sequential(
            nn.Linear(5, 32), nn.LeakyReLU(0.1), nn.Unflatten(1, (2, 4, 4)),
            nn.ConvTranspose2d(2, 4, (3, 2), stride=(2, 1), padding=(1, 0),
                               output_padding=(1, 0), dilation=(1, 2)),
            nn.Tanh(),
            nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, groups=2, bias=False),
            nn.Sigmoid())
    return nn.Sequential(
        nn.ConvTranspose1d(3, 4, 5, stride=3, padding=2, output_padding=1, dilation=2),
        nn.ReLU(), nn.ConvTranspose1d(4, 2, 3, groups=2))


def input_shape(kind):
    return (3, 5) if kind == "2d" else (2, 3, 7)


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in ("load", "export") or sys.argv[2] not in ("2d", "1d"):
        sys.exit(__doc__)
    action, kind, ckpt, inp, outp = sys.argv[1:]
    model = make_model(kind)
    if action == "load":
        model.load_state_dict(load_file(ckpt), strict=True)
        x = load_file(inp)["x"]
    else:
        torch.manual_seed(1234)
        model = make_model(kind)
        save_file(model.state_dict(), ckpt, {"format": "pt"})
        x = torch.randn(*input_shape(kind))
    with torch.no_grad():
        y = model(x)
    save_file({"x": x, "y": y}, outp, {"format": "pt"})


if __name__ == "__main__":
    main()
