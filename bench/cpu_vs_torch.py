#!/usr/bin/env python3
"""tgrad's CPU backend against PyTorch's, side by side in one run: the conv-transpose passes
(forward, dgrad, wgrad) of the scaled S1-S5 workloads and of the scaled decoder-layer suite
(bench/cpu_conv_bench --json gives their geometries and tgrad's times), and the
upsampling_decoder demo's training step (bench/train_step_bench --json, and
bench/train_step_torch.py's model), at 1 thread, 4 threads and every CPU. Prints one table per
thread count with the ratio PyTorch time / tgrad time (above 1: tgrad is faster) and the
geometric mean. Each side is timed in --rounds rounds, tgrad's whole suite then PyTorch's, each
side in a new process every round, and each row keeps each side's lowest median: a shared or
drifting host moves both sides alike within a round, and a single slow stretch does not decide a
row. With --recheck R, the layers with a row under --recheck-below after the rounds are timed
again, alone, in R more rounds of both sides (tgrad's layer, then PyTorch's, then the next layer):
their two sides are then timed seconds apart rather than a whole suite apart, as both sides' other
rows were. A bench tool only: tgrad itself never needs Python.

  python3 bench/cpu_vs_torch.py --build build-cpu [--threads 1,4,all] [--suite all] [--runs 5]
                                [--rounds 2] [--recheck 0] [--random N [--seed S]]

--random N replaces the suites with N geometries drawn at random (seeded, so a seed names the same
layers on every machine): 1-D and 2-D, any channel counts from 1 to 384, groups and depthwise,
kernels 1-8, strides 1-4, dilations, paddings and output paddings, batch 1-16, about 20-300
MFLOP a pass. It checks that the speed holds on layers no kernel was tuned for; the rows below
1.0 are listed at the end with their geometries.
"""
import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

# PyTorch runs in a child process of its own (--torch-worker), never in this one: an idle
# PyTorch's OpenMP threads in the parent took cores from tgrad's runs on the 16-core host. A
# child lives through one round (or one recheck round) and is then replaced, so that PyTorch, like
# tgrad's bench, runs in a new process every round: on the 16-core host the same binary's speed
# changed by up to 1.6x from one process to the next, and a side kept in one process for all
# rounds got one draw where the other got one per round. After each answer tgrad waits
# OMP_SETTLE_SECONDS, past the time OpenMP's threads spin before they sleep (libgomp's spin,
# libiomp's 200 ms KMP_BLOCKTIME), so that they are asleep while tgrad runs.
OMP_SETTLE_SECONDS = 0.3


def median_ms(runs, fn):
    fn()  # warm-up, as cpu_conv_bench does
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def torch_conv_passes(entry, runs):
    """PyTorch's times for one geometry: forward through F.conv_transpose{1,2}d, dgrad and wgrad
    through aten.convolution_backward, the call autograd makes for each."""
    import torch
    import torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x = torch.randn(entry["x"], generator=g)
    w = torch.randn(entry["w"], generator=g)
    cout = entry["w"][1] * entry["groups"]
    b = torch.randn(cout, generator=g)
    conv = F.conv_transpose1d if entry["dims"] == 1 else F.conv_transpose2d
    kw = dict(stride=entry["stride"], padding=entry["padding"],
              output_padding=entry["output_padding"], groups=entry["groups"],
              dilation=entry["dilation"])
    with torch.no_grad():
        y = conv(x, w, b, **kw)
        dy = torch.randn(y.shape, generator=g)

        def backward(mask):
            return torch.ops.aten.convolution_backward(
                dy, x, w, [cout], entry["stride"], entry["padding"], entry["dilation"], True,
                entry["output_padding"], entry["groups"], mask)

        return {
            "forward": median_ms(runs, lambda: conv(x, w, b, **kw)),
            "dgrad": median_ms(runs, lambda: backward([True, False, False])),
            "wgrad": median_ms(runs, lambda: backward([False, True, False])),
        }


def torch_worker():
    """The child's side: reads requests {threads, runs, steps, geometries, train}, one JSON line
    each, on stdin until it closes; for each, times every geometry's passes and the demo's steps
    in PyTorch and prints the times as one JSON line."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train_step_torch  # the demo's model in PyTorch
    print("ready", flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        torch.set_num_threads(req["threads"])
        conv = [torch_conv_passes(entry, req["runs"]) for entry in req["geometries"]]
        train = {}
        for mode, batch in req["train"]:
            train[mode] = train_step_torch.time_steps(mode, batch, 5, req["steps"], "cpu")[0]
        print(json.dumps(dict(conv=conv, train=train)), flush=True)


def random_layers(count, seed):
    """`count` valid geometries as cpu_conv_bench --shape specs, the same for the same seed."""
    import random
    rng = random.Random(seed)
    channels = [1, 3, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384]
    specs = []
    while len(specs) < count:
        dims = rng.choice([1, 2, 2])
        groups = rng.choice([1, 1, 1, 1, 2, 4, "depthwise"])
        ci, co = rng.choice(channels), rng.choice(channels)
        if groups == "depthwise":
            co = groups = ci
        if ci % groups or co % groups:
            continue
        k = [rng.choice([1, 2, 3, 3, 4, 4, 5, 7, 8]) for _ in range(dims)]
        if dims == 2 and rng.random() < 0.7:
            k[1] = k[0]
        s = [rng.choice([1, 1, 2, 2, 2, 3, 4]) for _ in range(dims)]
        if dims == 2 and rng.random() < 0.8:
            s[1] = s[0]
        d = [rng.choice([1, 1, 1, 1, 2]) for _ in range(dims)]
        p = [rng.randint(0, (k[i] - 1) * d[i] // 2 + (1 if rng.random() < 0.2 else 0))
             for i in range(dims)]
        op = [rng.randint(0, max(s[i], d[i]) - 1) if rng.random() < 0.3 else 0
              for i in range(dims)]
        n = rng.choice([1, 1, 2, 4, 8, 16])
        # Positions for about 20-300 MFLOP a forward pass (2 n ci co/g taps per input position).
        target = math.exp(rng.uniform(math.log(2e7), math.log(3e8)))
        positions = max(1.0, target / (2 * n * ci * (co // groups) * math.prod(k)))
        if dims == 1:
            size = [int(min(200000, max(4, positions)))]
            extent = f"l={size[0]}"
        else:
            hw = int(max(2, min(512, math.sqrt(positions))))
            size = [hw, hw + rng.choice([0, 0, 3])]
            extent = f"h={size[0]} w={size[1]}"
        if any((size[i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1 <= 0
               for i in range(dims)):
            continue
        pair = lambda v: str(v[0]) if dims == 1 or v[0] == v[1] else f"{v[0]}x{v[1]}"
        specs.append(f"n={n} ci={ci} co={co} g={groups} {extent} k={pair(k)} s={pair(s)} "
                     f"p={pair(p)} op={pair(op)} d={pair(d)}")
    return specs


def run_json(cmd, threads):
    env = dict(os.environ, TGRAD_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return out


def keep_min(times, key, ms):
    """times[key] = the lowest ms seen for key."""
    times[key] = min(times.get(key, math.inf), ms)


class TorchWorker:
    """PyTorch in a child process (see the note at the top), started once per round and asked for
    one set of times after another (an import of torch takes seconds)."""

    def __init__(self, threads):
        self.threads = threads
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--torch-worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
        # Wait out the import (seconds of work on a core) before anything is timed.
        if self.proc.stdout.readline().strip() != "ready":
            sys.exit(f"cpu_vs_torch.py: the PyTorch worker did not start (exit {self.proc.wait()})")

    def times(self, runs, steps, geometries, train):
        self.proc.stdin.write(json.dumps(dict(threads=self.threads, runs=runs, steps=steps,
                                              geometries=geometries, train=train)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"cpu_vs_torch.py: the PyTorch worker stopped (exit {self.proc.wait()})")
        time.sleep(OMP_SETTLE_SECONDS)
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def recheck(args, conv_bench, shapes, threads, geometries, index, tgrad_ms, torch_ms):
    """Times again, a layer at a time, each conv layer with a row under args.recheck_below:
    args.recheck rounds of tgrad's passes then PyTorch's, each side keeping its lowest. Every pass
    of such a layer gets the same extra rounds on both sides. Returns the layers' ids."""
    if args.recheck <= 0:
        return []
    low = []
    for (suite, ident, passname), ms in tgrad_ms.items():
        if suite != "train" and torch_ms[(suite, ident, passname)] / ms < args.recheck_below:
            if (suite, ident) not in low:
                low.append((suite, ident))
    for _ in range(args.recheck if low else 0):
        worker = TorchWorker(threads)
        for suite, ident in low:
            if suite == "shape":  # a random layer: its spec, under the id shape1 in that run
                sel = ["--shape", shapes[int(ident[len("shape"):]) - 1]]
            else:
                sel = ["--suite", suite, "--id", ident]
            report = json.loads(run_json([conv_bench, "--json"] + sel +
                                         ["--runs", str(args.runs), "--threads", str(threads)],
                                         threads))
            for r in report["results"]:
                keep_min(tgrad_ms, (suite, ident, r["pass"]), r["ms"])
            answer = worker.times(args.runs, args.steps, [geometries[index[(suite, ident)]]], [])
            for passname, ms in answer["conv"][0].items():
                keep_min(torch_ms, (suite, ident, passname), ms)
        worker.close()
    return [ident for _, ident in low]


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


# Below this, PyTorch's one-thread 512 x 512 matmul is not on an optimized BLAS (OpenBLAS, MKL
# and oneDNN reach 40-150 GFLOP/s on one AVX2 or AVX-512 core; the reference BLAS 1-5).
MIN_TORCH_MATMUL_GFLOPS = 15.0


def machine_probe():
    """PyTorch's version, a fixed in-cache GEMM's rate and a memory copy's rate, one thread each.

    The rate of the GEMM also tells a PyTorch on the reference BLAS (a fresh Debian's python3-torch
    without OpenBLAS runs its convolutions many times slower, and the ratios would flatter tgrad).
    Both rates, taken at the start and the end of a run, tell a shared host's slow state (the 16-core
    host has run whole suites 1.35x slower for both sides) from a slow row: they do the same work
    on every run, so they move only with the machine."""
    probe = ("import time, torch; torch.set_num_threads(1); a = torch.randn(512, 512); a @ a; "
             "best = lambda f: min((lambda t: (f(), time.perf_counter() - t)[1])"
             "(time.perf_counter()) for _ in range(3)); "
             "g = best(lambda: [a @ a for _ in range(5)]); "
             "src = torch.ones(1 << 26); dst = torch.empty_like(src); dst.copy_(src); "
             "c = best(lambda: dst.copy_(src)); "
             "print(torch.__version__, 5 * 2 * 512 ** 3 / g / 1e9, 2 * src.numel() * 4 / c / 1e9)")
    return subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                          text=True, env=dict(os.environ, OMP_NUM_THREADS="1")).stdout.split()


def main():
    if sys.argv[1:] == ["--torch-worker"]:
        torch_worker()
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build", help="tgrad build folder with bench/ built")
    ap.add_argument("--threads", default="1,4,all", help="comma list; 'all' = every CPU")
    ap.add_argument("--suite", choices=["s", "decoders", "all"], default="all")
    ap.add_argument("--runs", type=int, default=5, help="timed runs per pass (median)")
    ap.add_argument("--steps", type=int, default=20, help="timed training steps (median)")
    ap.add_argument("--rounds", type=int, default=2,
                    help="rounds of both sides; each row keeps each side's fastest")
    ap.add_argument("--recheck", type=int, default=0,
                    help="more rounds, layer by layer, for the layers with a low row")
    ap.add_argument("--recheck-below", type=float, default=1.1,
                    help="a layer is rechecked when one of its rows is under this ratio")
    ap.add_argument("--no-train", action="store_true", help="skip the training step")
    ap.add_argument("--json", help="also write every row to this file")
    ap.add_argument("--random", type=int, default=0,
                    help="time this many random geometries instead of the suites")
    ap.add_argument("--seed", type=int, default=1, help="the random geometries' seed")
    ap.add_argument("--shape", action="append", default=[],
                    help="a geometry in conv_bench's keys instead of the suites (repeatable), "
                         "e.g. \"n=32 ci=64 co=32 h=4 w=4 k=4 s=2 p=1\"")
    args = ap.parse_args()
    shapes = args.shape or (random_layers(args.random, args.seed) if args.random > 0 else [])
    workloads = (["--suite", args.suite] if not shapes
                 else [a for spec in shapes for a in ("--shape", spec)])

    conv_bench = os.path.join(args.build, "bench", "cpu_conv_bench")
    train_bench = os.path.join(args.build, "bench", "train_step_bench")
    for exe in [conv_bench] + ([] if args.no_train else [train_bench]):
        if not os.access(exe, os.X_OK):
            sys.exit(f"cpu_vs_torch.py: {exe} not found: build it "
                     f"(cmake --build {args.build} --target cpu_conv_bench train_step_bench)")
    cpus = len(os.sched_getaffinity(0))
    thread_counts = []
    for t in args.threads.split(","):
        n = cpus if t == "all" else int(t)
        if n not in thread_counts:
            thread_counts.append(n)

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    cpu_name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu_name = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    torch_version, matmul_gflops, copy_gbs = machine_probe()
    print(f"# tgrad (commit {commit}) vs torch {torch_version}, {cpu_name}, {cpus} CPUs, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if float(matmul_gflops) < MIN_TORCH_MATMUL_GFLOPS:
        print(f"# warning: PyTorch's 512 x 512 matmul ran at {float(matmul_gflops):.1f} GFLOP/s on "
              "one thread: it is likely on the reference BLAS (on Debian install "
              "libopenblas0-openmp), so its times are no fair reference")
    print(f"# machine probe at the start: {float(matmul_gflops):.1f} GFLOP/s (512^3 matmul, one "
          f"thread), {float(copy_gbs):.1f} GB/s (256 MB copy, one thread)")
    print("# ratio = torch ms / tgrad ms (above 1: tgrad faster); medians of "
          f"{args.runs} runs per pass, {args.steps} training steps, the lower of "
          f"{max(1, args.rounds)} rounds" +
          (f"; layers with a row under {args.recheck_below} then {args.recheck} more rounds, "
           "a layer at a time" if args.recheck > 0 else ""))

    rows = []
    for threads in thread_counts:
        tgrad_ms, torch_ms, level = {}, {}, None
        for _ in range(max(1, args.rounds)):
            worker = TorchWorker(threads)
            report = json.loads(run_json([conv_bench, "--json"] + workloads +
                                         ["--runs", str(args.runs), "--threads", str(threads)],
                                         threads))
            level = report["cpu_capability"]
            geometries, index = [], {}
            for r in report["results"]:
                key = (r["suite"], r["id"])
                if key not in index:
                    index[key] = len(geometries)
                    geometries.append(r)
                keep_min(tgrad_ms, (r["suite"], r["id"], r["pass"]), r["ms"])
            train = []
            if not args.no_train:
                for mode in ("2d", "1d"):
                    out = run_json([train_bench, "--device", "cpu", "--json", "--mode", mode,
                                    "--steps", str(args.steps), "--threads", str(threads)], threads)
                    tg = json.loads(out.strip().splitlines()[-1])
                    keep_min(tgrad_ms, ("train", f"demo_{mode}", "step"), tg["median_ms"])
                    train.append((mode, tg["batch"]))
            answer = worker.times(args.runs, args.steps, geometries, train)
            for r in report["results"]:
                keep_min(torch_ms, (r["suite"], r["id"], r["pass"]),
                         answer["conv"][index[(r["suite"], r["id"])]][r["pass"]])
            for mode, med in answer["train"].items():
                keep_min(torch_ms, ("train", f"demo_{mode}", "step"), med)
            worker.close()
        rechecked = recheck(args, conv_bench, shapes, threads, geometries, index, tgrad_ms,
                            torch_ms)
        print(f"\n## {threads} thread(s), tgrad CPU level {level}")
        if rechecked:
            print(f"(rechecked, {args.recheck} more rounds each: {', '.join(rechecked)})")
        print(f"{'suite':<9} {'id':<16} {'pass':<8} {'tgrad ms':>10} {'torch ms':>10} {'ratio':>7}")
        for key in tgrad_ms:
            suite, ident, passname = key
            row = dict(threads=threads, level=level, suite=suite, id=ident, passname=passname,
                       tgrad_ms=tgrad_ms[key], torch_ms=torch_ms[key],
                       ratio=torch_ms[key] / tgrad_ms[key])
            rows.append(row)
            print(f"{row['suite']:<9} {row['id']:<16} {row['passname']:<8} {row['tgrad_ms']:10.3f} "
                  f"{row['torch_ms']:10.3f} {row['ratio']:7.2f}", flush=True)
        mine = [r for r in rows if r["threads"] == threads]
        worst = min(mine, key=lambda r: r["ratio"])
        print(f"geomean ratio {geomean([r['ratio'] for r in mine]):.2f} over {len(mine)} rows; "
              f"slowest {worst['suite']} {worst['id']} {worst['passname']} {worst['ratio']:.2f}")
        for suite in ("s", "decoders", "shape", "train"):
            part = [r["ratio"] for r in mine if r["suite"] == suite]
            if part:
                print(f"  {suite}: geomean {geomean(part):.2f}, min {min(part):.2f} "
                      f"({len(part)} rows)")
    _, end_gflops, end_gbs = machine_probe()
    print(f"\n# machine probe at the end: {float(end_gflops):.1f} GFLOP/s, {float(end_gbs):.1f} "
          "GB/s (as at the start)")
    below = sorted({r["id"] for r in rows if r["suite"] == "shape" and r["ratio"] < 1.0},
                   key=lambda i: int(i[len("shape"):]))
    if below:
        print("\n## random geometries with a row below 1.0")
        for ident in below:
            print(f"{ident:<16} {shapes[int(ident[len('shape'):]) - 1]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(commit=commit, cpu=cpu_name, cpus=cpus, torch=torch_version,
                           rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
