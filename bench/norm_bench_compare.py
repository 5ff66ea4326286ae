#!/usr/bin/env python3
"""norm_bench_compare: runs bench/norm_bench (tgrad) and times the same normalization layers
(read from norm_bench's JSON: type, groups, input shape) forward + backward in PyTorch eager on
the same device, alternating for --rounds rounds, and prints one markdown table with the ratio
(tgrad / PyTorch: below 1 means tgrad is faster).

  norm_bench_compare.py --norm-bench BUILD/bench/norm_bench [--device cuda] [--rounds 3]
                        [--warmup 5] [--iters 30]
"""
import argparse
import json
import statistics
import subprocess
import time

import torch


def run_tgrad(args):
    out = subprocess.run([args.norm_bench, "--device", args.device, "--warmup", str(args.warmup),
                          "--iters", str(args.iters)], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def make(layer, device):
    c = layer["shape"][1]
    t = layer["type"]
    if t == "BatchNorm1d":
        m = torch.nn.BatchNorm1d(c)
    elif t == "BatchNorm2d":
        m = torch.nn.BatchNorm2d(c)
    elif t == "GroupNorm":
        m = torch.nn.GroupNorm(layer["groups"], c)
    elif t == "InstanceNorm2d":
        m = torch.nn.InstanceNorm2d(c, affine=True)
    else:
        m = torch.nn.LayerNorm(layer["shape"][-1])
    return m.to(device).train()


def time_torch(layer, args):
    torch.manual_seed(3)
    m = make(layer, args.device)
    x = torch.randn(layer["shape"], device=args.device, requires_grad=True)
    dy = torch.randn(layer["shape"], device=args.device)
    ms = []
    for i in range(args.warmup + args.iters):
        t0 = time.perf_counter()
        m.zero_grad(set_to_none=True)
        x.grad = None
        m(x).backward(dy)
        if args.device == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        if i >= args.warmup:
            ms.append((t1 - t0) * 1e3)
    return statistics.median(ms)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--norm-bench", required=True, help="path of the norm_bench binary")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    ours, theirs = [], []
    for _ in range(args.rounds):
        tg = run_tgrad(args)
        ours.append(tg)
        theirs.append([time_torch(layer, args) for layer in tg])
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"# normalization layers, forward + backward, {name}, median of {args.iters} after "
          f"{args.warmup} warm-up, {args.rounds} alternating rounds; torch {torch.__version__}")
    print("| layer | type | input | tgrad ms | PyTorch ms | tgrad / PyTorch | rounds' range |")
    print("|---|---|---|---:|---:|---:|---|")
    for i, layer in enumerate(ours[0]):
        t = [r[i]["median_ms"] for r in ours]
        p = [r[i] for r in theirs]
        ratios = [a / b for a, b in zip(t, p)]
        shape = "x".join(str(v) for v in layer["shape"])
        print(f"| {layer['layer']} | {layer['type']} | {shape} | {statistics.median(t):.3f} | "
              f"{statistics.median(p):.3f} | {statistics.median(t) / statistics.median(p):.2f} | "
              f"{min(ratios):.2f}-{max(ratios):.2f} |")


if __name__ == "__main__":
    main()
