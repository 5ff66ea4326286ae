#!/usr/bin/env python3
"""Times the upsampling_decoder training step (forward, MSE loss, backward, Adam step) in
PyTorch, on the CPU and on CUDA when available, for comparison with bench/train_step_bench.
The model mirrors examples/upsampling_decoder/model.cpp layer for layer.

  python3 bench/train_step_torch.py [--mode 2d|1d] [--batch 32] [--steps 50] [--warmup 5]
"""
import argparse
import statistics
import time

import torch
from torch import nn


def make_decoder(mode):
    if mode == "2d":
        c0, c1, c2 = 64, 32, 16
        return nn.Sequential(
            nn.Linear(9, c0 * 16), nn.LeakyReLU(0.1), nn.Unflatten(1, (c0, 4, 4)),
            nn.ConvTranspose2d(c0, c1, 4, stride=2, padding=1), nn.LeakyReLU(0.1),
            nn.ConvTranspose2d(c1, c2, 4, stride=2, padding=1), nn.LeakyReLU(0.1),
            nn.ConvTranspose2d(c2, 3, 4, stride=2, padding=1), nn.Sigmoid())
    c0, c1, c2 = 32, 32, 16
    return nn.Sequential(
        nn.Linear(4, c0 * 8), nn.LeakyReLU(0.1), nn.Unflatten(1, (c0, 8)),
        nn.ConvTranspose1d(c0, c1, 4, stride=2, padding=1), nn.LeakyReLU(0.1),
        nn.ConvTranspose1d(c1, c2, 4, stride=2, padding=1), nn.LeakyReLU(0.1),
        nn.ConvTranspose1d(c2, 1, 4, stride=2, padding=1), nn.Tanh())


def time_steps(mode, batch, warmup, steps, device):
    torch.manual_seed(1)
    net = make_decoder(mode).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=5e-3)
    x = torch.randn(batch, 9 if mode == "2d" else 4, device=device)
    target = (torch.rand(batch, 3, 32, 32) if mode == "2d" else torch.rand(batch, 1, 64) * 2 - 1)
    target = target.to(device)
    ms = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(net(x), target)
        loss.backward()
        opt.step()
        if device == "cuda":
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        if i >= warmup:
            ms.append((t1 - t0) * 1e3)
    ms.sort()
    return statistics.median(ms), ms[int(0.1 * (len(ms) - 1))], ms[int(0.9 * (len(ms) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["2d", "1d"], default="2d")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"# torch {torch.__version__} ({torch.get_num_threads()} CPU threads), mode {args.mode}, "
          f"batch {args.batch}, median of {args.steps} steps after {args.warmup} warm-up")
    print(f"{'device':<8} {'median_ms':>12} {'p10_ms':>10} {'p90_ms':>10} {'steps/s':>10}")
    for d in devices:
        med, p10, p90 = time_steps(args.mode, args.batch, args.warmup, args.steps, d)
        print(f"{d:<8} {med:12.3f} {p10:10.3f} {p90:10.3f} {1000.0 / med:10.1f}")


if __name__ == "__main__":
    main()
