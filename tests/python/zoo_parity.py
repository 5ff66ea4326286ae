#!/usr/bin/env python3
"""The PyTorch twin of the model zoo (examples/zoo), run by ctest as zoo_parity_<model>_<dtype>.

  zoo_parity.py --driver ZOO_PARITY --model dcgan|hifigan|unet --dtype float64|float32 --out DIR

Runs the C++ driver (which trains N steps in tgrad and writes DIR/init, batches and result
.safetensors), then builds the same model in PyTorch, loads the same initial weights, replays
the same batches with the same optimizer and compares the per-step losses, the final
parameters and buffers (BatchNorm running statistics and num_batches_tracked included) and the
optimizer state (step, exp_avg, exp_avg_sq, lr). In float32 the twin's ReLUs take tgrad's side
of each kink (see "ReLU kinks" below). Exits 77 (ctest's skip) when torch is missing.
"""
import argparse
import json
import struct
import subprocess
import sys

try:
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError as e:  # ctest shows this line and counts the test as skipped
    print(f"zoo_parity: skipped: PyTorch is not importable ({e})")
    sys.exit(77)

DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
EPS32 = torch.finfo(torch.float32).eps


def load_file(path):
    """A safetensors file as ({name: tensor}, metadata), read with struct/json."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    base, out = 8 + n, {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        data = bytearray(blob[base + begin:base + end])
        t = torch.frombuffer(data, dtype=dtype) if data else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"])
    return out, meta


# ---- the models, as examples/zoo/models.cpp builds them (same names, same order) ----

class DcganGenerator(nn.Module):
    def __init__(self, nz=32, ngf=16):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4),
            nn.ReLU(),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2),
            nn.ReLU(),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf), nn.ReLU(),
            nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class DcganDiscriminator(nn.Module):
    def __init__(self, ndf=16):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(3, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2),
            nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False))

    def forward(self, x):
        return self.main(x).reshape(x.shape[0])


class ResBlock(nn.Module):
    def __init__(self, ch, k, dilations):
        super().__init__()
        self.convs1 = nn.Sequential(*[nn.Conv1d(ch, ch, k, dilation=d, padding=(k * d - d) // 2)
                                      for d in dilations])
        self.convs2 = nn.Sequential(*[nn.Conv1d(ch, ch, k, padding=(k - 1) // 2)
                                      for _ in dilations])

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            xt = c2(F.leaky_relu(c1(F.leaky_relu(x, 0.1)), 0.1))
            x = xt + x
        return x


class HifiGenerator(nn.Module):
    def __init__(self, bins=32, ch=64, rates=(4, 4), kernels=(3, 7), dilations=(1, 3, 5)):
        super().__init__()
        self.num_kernels = len(kernels)
        self.conv_pre = nn.Conv1d(bins, ch, 7, padding=3)
        self.ups = nn.Sequential()
        self.resblocks = nn.Sequential()
        for i, s in enumerate(rates):
            self.ups.append(nn.ConvTranspose1d(ch, ch // 2, 2 * s, s, padding=s // 2))
            ch //= 2
            for k in kernels:
                self.resblocks.append(ResBlock(ch, k, dilations))
        self.conv_post = nn.Conv1d(ch, 1, 7, padding=3)

    def forward(self, x):
        x = self.conv_pre(x)
        for i, up in enumerate(self.ups):
            x = up(F.leaky_relu(x, 0.1))
            xs = None
            for j in range(self.num_kernels):
                r = self.resblocks[i * self.num_kernels + j](x)
                xs = r if xs is None else xs + r
            x = xs / self.num_kernels
        return torch.tanh(self.conv_post(F.leaky_relu(x)))


def double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(4, cout),
                         nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                         nn.GroupNorm(4, cout), nn.ReLU())


class UNet(nn.Module):
    def __init__(self, channels=3, b=16):
        super().__init__()
        self.enc1 = double_conv(channels, b)
        self.down1 = nn.Sequential(nn.Conv2d(b, 2 * b, 4, 2, 1), nn.ReLU())
        self.enc2 = double_conv(2 * b, 2 * b)
        self.down2 = nn.Sequential(nn.Conv2d(2 * b, 4 * b, 4, 2, 1), nn.ReLU())
        self.mid = double_conv(4 * b, 4 * b)
        self.up2 = nn.Sequential(nn.ConvTranspose2d(4 * b, 2 * b, 4, 2, 1))
        self.dec2 = double_conv(4 * b, 2 * b)
        self.up1 = nn.Sequential(nn.ConvTranspose2d(2 * b, b, 4, 2, 1))
        self.dec1 = double_conv(2 * b, b)
        self.out = nn.Conv2d(b, channels, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.down1(e1))
        m = self.mid(self.down2(e2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return x + self.out(d1)


# ---- ReLU kinks: tgrad's side, replayed ----
#
# ReLU's derivative jumps at 0. When a ReLU input lies within float32 rounding of zero, the sign
# a float32 evaluation gets there is decided by rounding, and the two sides give gradients that
# differ by that element's whole upstream gradient: far more than rounding elsewhere ever moves
# anything (the U-Net met one at step 3, an enc2 GroupNorm output of -7e-8 in float64: tgrad
# rounded it positive and PyTorch negative, so the GroupNorm bias gradient of that channel
# differed by the 8.3e-7 flowing into that one element, while float32 rounding moves the others
# by ~1e-11). Both are correct float32 results; they are points on two branches of the exact
# trajectory. So in float32 the driver records the input of every ReLU call, and the twin's
# ReLUs (float32 and float64) take tgrad's side: y = x * m, dy/dx = m with m = [x_tgrad > 0].
# Every element where that side differs from the float64 run's own sign is then checked to be
# one rounding may decide: |x64| within 4x PyTorch's own float32 error on that ReLU's input.

class _SidedRelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, dy):
        (mask,) = ctx.saved_tensors
        return dy * mask, None


class ReluSides:
    """Replaces nn.ReLU's forward: takes the sides in `tgrad_inputs` {(step, call): x} and
    records each call's own input."""

    def __init__(self, tgrad_inputs):
        self.tgrad_inputs, self.seen, self.step, self.call = tgrad_inputs, {}, 0, 0

    def __enter__(self):
        self.saved = nn.ReLU.forward
        sides = self

        def forward(_module, x):
            key = (sides.step, sides.call)
            sides.call += 1
            sides.seen[key] = x.detach().double()
            mask = (sides.tgrad_inputs[key].reshape(x.shape) > 0).to(x.dtype)
            return _SidedRelu.apply(x, mask)
        nn.ReLU.forward = forward
        return self

    def __exit__(self, *exc):
        nn.ReLU.forward = self.saved

    def start(self, step):
        self.step, self.call = step, 0


def relu_inputs(batches):
    """{(step, call): tgrad's float32 ReLU input} from the driver's relu.<step>.<call> tensors."""
    out = {}
    for name, t in batches.items():
        if name.startswith("relu."):
            _, s, c = name.split(".")
            out[(int(s), int(c))] = t
    return out


def check_sides(tgrad_inputs, seen32, seen64):
    """Failures for sides tgrad took that rounding cannot explain; and how many it took."""
    failures, flipped = [], 0
    for key, x64 in sorted(seen64.items()):
        xt = tgrad_inputs[key].double().reshape(x64.shape)
        differs = (xt > 0) != (x64 > 0)
        if not differs.any():
            continue
        flipped += int(differs.sum())
        tau = 4.0 * max_abs(seen32[key] - x64)
        worst = max_abs(x64[differs])
        if worst > tau:
            failures.append(f"  ReLU call {key[1]} of step {key[0]}: tgrad's input has the other "
                            f"sign at |x64| = {worst:.3e}, beyond rounding's reach {tau:.3e}")
    return failures, flipped


# ---- training, as examples/zoo/train.cpp steps ----

def build(model):
    """(modules {prefix: module}, optimizers {prefix: optimizer}, step(batches, s) -> losses)."""
    if model == "dcgan":
        g, d = DcganGenerator(), DcganDiscriminator()
        og = torch.optim.Adam(g.parameters(), lr=2e-4, betas=(0.5, 0.999))
        od = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999))

        def step(b, s):
            real, z = b[f"real.{s}"], b[f"z.{s}"]
            # On the batch's device: the benchmark runs these steps on CUDA too.
            ones = torch.ones(real.shape[0], dtype=real.dtype, device=real.device)
            zeros = torch.zeros(real.shape[0], dtype=real.dtype, device=real.device)
            od.zero_grad()
            err_real = F.binary_cross_entropy_with_logits(d(real), ones)
            fake = g(z)
            err_fake = F.binary_cross_entropy_with_logits(d(fake.detach()), zeros)
            err_d = err_real + err_fake
            err_d.backward()
            od.step()
            og.zero_grad()
            err_g = F.binary_cross_entropy_with_logits(d(fake), ones)
            err_g.backward()
            og.step()
            return [err_d.item(), err_g.item()]
        return {"netG": g, "netD": d}, {"optG": og, "optD": od}, step
    if model == "hifigan":
        g = HifiGenerator()
        opt = torch.optim.AdamW(g.parameters(), lr=2e-3, betas=(0.8, 0.99), weight_decay=0.01)

        def step(b, s):
            opt.zero_grad()
            loss = F.l1_loss(g(b[f"spec.{s}"]), b[f"wave.{s}"])
            loss.backward()
            opt.step()
            return [loss.item()]
        return {"generator": g}, {"optim_g": opt}, step
    net = UNet()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)

    def step(b, s):
        opt.zero_grad()
        loss = F.mse_loss(net(b[f"noisy.{s}"]), b[f"clean.{s}"])
        loss.backward()
        opt.step()
        return [loss.item()]
    return {"unet": net}, {"optim": opt}, step


def replay(model, init, batches, steps, dtype, sides=None):
    """Trains the PyTorch twin from `init` on `batches` in `dtype`; returns its final state.
    With `sides` (a ReluSides, entered), each step's ReLUs take tgrad's sides."""
    modules, optimizers, step = build(model)
    for prefix, m in modules.items():
        sd = {k[len(prefix) + 1:]: v for k, v in init.items() if k.startswith(prefix + ".")}
        m.to(dtype)
        m.load_state_dict(sd, strict=True)
        m.train()
    cast = {k: v.to(dtype) for k, v in batches.items()}
    losses = []
    for s in range(steps):
        if sides is not None:
            sides.start(s)
        losses.append(step(cast, s))
    state = {}
    for prefix, m in modules.items():
        for k, v in m.state_dict().items():
            state[f"{prefix}.{k}"] = v.detach().clone()
    for prefix, opt in optimizers.items():
        for i, p in enumerate(opt.param_groups[0]["params"]):
            for k, v in opt.state[p].items():
                state[f"{prefix}.state.{i}.{k}"] = torch.as_tensor(v, dtype=torch.float64).clone()
        state[f"{prefix}.param_groups.0.lr"] = torch.tensor(opt.param_groups[0]["lr"],
                                                            dtype=torch.float64)
    for j, column in enumerate(zip(*losses)):
        state[f"loss.{j}"] = torch.tensor(column, dtype=torch.float64)
    return state


def max_abs(t):
    return t.double().abs().max().item() if t.numel() else 0.0


def group_of(name):
    """'unet.mid.4.bias' -> 'unet/bias'; 'optD.state.3.exp_avg' -> 'optD/exp_avg'."""
    parts = name.split(".")
    return f"{parts[0]}/{parts[-1]}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--model", required=True, choices=["dcgan", "hifigan", "unet"])
    ap.add_argument("--dtype", required=True, choices=["float64", "float32"])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    subprocess.run([args.driver, "--model", args.model, "--dtype", args.dtype, "--steps",
                    str(args.steps), "--batch", str(args.batch), "--out", args.out], check=True)
    torch.set_num_threads(2)
    init, _ = load_file(f"{args.out}/init.safetensors")
    batches, _ = load_file(f"{args.out}/batches.safetensors")
    ours, _ = load_file(f"{args.out}/result.safetensors")

    if args.dtype == "float64":
        ref = replay(args.model, init, batches, args.steps, torch.float64)
        ref64 = None
    else:
        tgrad_inputs = relu_inputs(batches)
        batches = {k: v for k, v in batches.items() if not k.startswith("relu.")}
        with ReluSides(tgrad_inputs) as sides32:
            ref = replay(args.model, init, batches, args.steps, torch.float32, sides32)
        # The same run in float64 from the same (float32-valued, so exactly converted) start, on
        # the same branch: it measures how far float32 rounding carries PyTorch itself from the
        # exact trajectory.
        with ReluSides(tgrad_inputs) as sides64:
            ref64 = replay(args.model, init, batches, args.steps, torch.float64, sides64)
        side_failures, flipped = check_sides(tgrad_inputs, sides32.seen, sides64.seen)
        print(f"zoo_parity: {len(tgrad_inputs)} ReLU calls replayed on tgrad's side; "
              f"{flipped} inputs on the other side of 0 than float64's, all within rounding"
              if not side_failures else "zoo_parity: ReLU sides beyond rounding")
        if side_failures:
            print("FAIL:\n" + "\n".join(side_failures))
            return 1

    missing = sorted(set(ref) - set(ours))
    unexpected = sorted(set(ours) - set(ref))
    if missing or unexpected:
        print(f"FAIL: state names differ; missing in tgrad {missing}, only in tgrad {unexpected}")
        return 1
    group_err = {}
    if ref64 is not None:
        for name in ref:
            g = group_of(name)
            group_err[g] = max(group_err.get(g, 0.0),
                               max_abs(ref[name].double() - ref64[name].double()))
    failures, worst = [], (0.0, "")
    for name in sorted(ref):
        a, b = ours[name].double().reshape(ref[name].shape), ref[name].double()
        diff = max_abs(a - b)
        if ref[name].dtype == torch.int64:
            bound = 0.0  # num_batches_tracked: a count, equal or wrong
        elif ref64 is None:
            # float64: the tensor's largest difference within 1e-9 of its largest magnitude.
            bound = 1e-9 * max(max_abs(b), 1e-300)
        else:
            # float32: tgrad and PyTorch are two float32 evaluations of the same exact steps,
            # each off the exact trajectory by its own rounding. PyTorch's distance from its
            # float64 run, e = |p32 - p64|, measures that error; if tgrad's rounding is of the
            # same size, |t32 - p32| <= 2e by the triangle inequality. e is taken over the
            # tensor's group (same module or optimizer, same kind: every conv bias of the U-Net,
            # every exp_avg_sq of optD...), not the tensor alone: Adam moves each parameter by
            # about lr per step whatever its scale, so the rounding a step lets through is a
            # property of the whole run, and one tensor's own e can be a lucky small draw.
            # Twice 2e covers the draw being small for the group too, and a floor of 8 ulps of
            # the tensor's scale covers groups that happen to agree with float64 exactly.
            bound = 4.0 * group_err[group_of(name)] + 8.0 * EPS32 * max_abs(ref64[name])
        ratio = diff / bound if bound > 0 else (0.0 if diff == 0 else float("inf"))
        if ratio > worst[0]:
            worst = (ratio, name)
        if diff > bound:
            failures.append(f"  {name}: max |tgrad - torch| = {diff:.3e} > bound {bound:.3e}")
    losses = [n for n in sorted(ref) if n.startswith("loss.")]
    print(f"zoo_parity {args.model} {args.dtype}: {args.steps} steps, {len(ref)} tensors "
          f"compared; losses tgrad {[round(v, 6) for v in ours[losses[0]].tolist()]}; "
          f"worst diff/bound {worst[0]:.3g} ({worst[1]})")
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
