#!/usr/bin/env python3
"""zoo_bench_torch: one training step of each model zoo model in PyTorch eager, timed like
bench/zoo_bench (the same models, optimizers, losses and batch shapes: the twins in
tests/python/zoo_parity.py; the batch holds random values, as a step's cost does not depend on
them), for the ratio that bench/zoo_bench_compare.py prints.

  zoo_bench_torch.py [--device cpu|cuda] [--precision highest|high] [--models ...] [--batch 32]
                     [--warmup 5] [--iters 30] [--threads N] [--json]

cuDNN runs in benchmark mode. --precision highest disables TF32 for matmuls and cuDNN
convolutions, high enables both (tgrad's set_float32_matmul_precision has the same two levels).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "python"))
import zoo_parity  # noqa: E402  (the models and steps, shared with the parity twins)


def batches(model, batch, device):
    """One fixed batch under the names zoo_parity's step functions read (step 0)."""
    g = torch.Generator().manual_seed(1)
    if model == "dcgan":
        real = torch.rand(batch, 3, 32, 32, generator=g) * 2 - 1
        z = torch.randn(batch, 32, 1, 1, generator=g)
        b = {"real.0": real, "z.0": z}
    elif model == "hifigan":
        b = {"spec.0": torch.rand(batch, 32, 8, generator=g),
             "wave.0": torch.rand(batch, 1, 128, generator=g) * 1.8 - 0.9}
    else:
        clean = torch.rand(batch, 3, 32, 32, generator=g) * 2 - 1
        b = {"clean.0": clean, "noisy.0": clean + 0.3 * torch.randn(clean.shape, generator=g)}
    return {k: v.to(device) for k, v in b.items()}


def time_steps(model, batch, warmup, iters, device):
    torch.manual_seed(1)
    modules, _, step = zoo_parity.build(model)
    for m in modules.values():
        m.to(device).train()
    b = batches(model, batch, device)
    ms = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        step(b, 0)  # ends with loss.item(), as tgrad's step ends with Tensor::item()
        if device == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        if i >= warmup:
            ms.append((t1 - t0) * 1e3)
    ms.sort()
    return statistics.median(ms), ms[int(0.1 * (len(ms) - 1))], ms[int(0.9 * (len(ms) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["highest", "high"], default="highest")
    ap.add_argument("--models", nargs="+", choices=["dcgan", "hifigan", "unet"],
                    default=["dcgan", "hifigan", "unet"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads (torch.set_num_threads); 0 keeps torch's default")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("zoo_bench_torch: --device cuda: torch.cuda.is_available() is False")
    torch.backends.cudnn.benchmark = True
    tf32 = args.precision == "high"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision(args.precision)
    if not args.json:
        print(f"# torch {torch.__version__} zoo train step, {args.device} "
              f"({torch.get_num_threads()} CPU threads), precision {args.precision}, batch "
              f"{args.batch}, median of {args.iters} after {args.warmup}")
        print(f"{'model':<8} {'median_ms':>10} {'p10_ms':>10} {'p90_ms':>10}")
    for model in args.models:
        med, p10, p90 = time_steps(model, args.batch, args.warmup, args.iters, args.device)
        if args.json:
            print(json.dumps({"framework": "torch", "model": model, "device": args.device,
                              "precision": args.precision, "batch": args.batch,
                              "median_ms": round(med, 4), "p10_ms": round(p10, 4),
                              "p90_ms": round(p90, 4)}), flush=True)
        else:
            print(f"{model:<8} {med:10.3f} {p10:10.3f} {p90:10.3f}", flush=True)


if __name__ == "__main__":
    main()
