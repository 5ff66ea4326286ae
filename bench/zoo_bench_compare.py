#!/usr/bin/env python3
"""zoo_bench_compare: runs bench/zoo_bench (tgrad) and bench/zoo_bench_torch.py (PyTorch eager)
for each device and precision asked, alternating tgrad and PyTorch for --rounds rounds in the
same run, and prints one markdown table: per side the median over rounds of each round's median
step, the ratio of those (tgrad / torch: below 1 means tgrad is faster), and the lowest and
highest per-round ratio. The steps are short (milliseconds on a GPU) and bound by the host's
launch work, so a busy host moves one round's numbers; the rounds show by how much.

  zoo_bench_compare.py --zoo-bench BUILD/bench/zoo_bench [--devices cpu cuda] [--rounds 3]
                       [--precisions highest high] [--batch 32] [--iters 30] [--threads N]

Both sides get the same CPU thread count (TGRAD_NUM_THREADS and torch.set_num_threads).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_json(cmd, env=None):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo-bench", required=True, help="path of the zoo_bench binary")
    ap.add_argument("--python", default=sys.executable, help="the python with torch")
    ap.add_argument("--devices", nargs="+", choices=["cpu", "cuda"], default=["cpu"])
    ap.add_argument("--precisions", nargs="+", choices=["highest", "high"],
                    default=["highest", "high"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=3,
                    help="tgrad and PyTorch runs, alternating, per device and precision")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error(f"--rounds={args.rounds} must be at least 1")
    env = dict(os.environ, TGRAD_NUM_THREADS=str(args.threads))
    common = ["--batch", str(args.batch), "--warmup", str(args.warmup), "--iters",
              str(args.iters), "--json"]
    rows = []
    for device in args.devices:
        # On the CPU the precision setting changes nothing (no TF32 there): one row per model.
        for precision in (args.precisions if device == "cuda" else args.precisions[:1]):
            flags = ["--device", device, "--precision", precision] + common
            ours, theirs = [], []  # one list of per-model results per round
            for _ in range(args.rounds):
                ours.append(run_json([args.zoo_bench] + flags, env))
                theirs.append(run_json([args.python, os.path.join(HERE, "zoo_bench_torch.py"),
                                        "--threads", str(args.threads)] + flags))
            for m, first in enumerate(ours[0]):
                t = [r[m]["median_ms"] for r in ours]
                p = [r[m]["median_ms"] for r in theirs]
                ratios = [a / b for a, b in zip(t, p)]
                rows.append((first["model"], device, precision if device == "cuda" else "-",
                             statistics.median(t), statistics.median(p), min(ratios),
                             max(ratios)))
    print(f"# model zoo training step, batch {args.batch}, median of {args.iters} after "
          f"{args.warmup} warm-up, {args.rounds} alternating rounds; "
          f"{platform.processor() or platform.machine()}, {args.threads} CPU threads")
    print("| model | device | precision | tgrad ms | PyTorch ms | tgrad / PyTorch | rounds' range |")
    print("|---|---|---|---:|---:|---:|---|")
    for model, device, precision, t, p, lo, hi in rows:
        print(f"| {model} | {device} | {precision} | {t:.2f} | {p:.2f} | {t / p:.2f} | "
              f"{lo:.2f}-{hi:.2f} |")


if __name__ == "__main__":
    main()
