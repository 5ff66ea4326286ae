#!/usr/bin/env python3
"""Records PyTorch's optimizer and LR-scheduler trajectories for tests/test_optim.cpp.

Each case runs a torch.optim optimizer for a few steps in float64 on two parameters, with
gradients that depend on the parameters (recorded, so the C++ test replays them exactly); the
second parameter gets no gradient on step 2, which the optimizer must skip.
Run: /usr/bin/python3 tests/python/make_optim_cases.py > tests/data/torch_optim_cases.json
"""
import json
import math

import torch

torch.set_default_dtype(torch.float64)
STEPS = 5


def run_case(name, make_opt):
    torch.manual_seed(0)
    p0 = torch.randn(2, 3)
    p1 = torch.randn(4)
    params = [p0.clone().requires_grad_(), p1.clone().requires_grad_()]
    opt = make_opt(params)
    grads, after = [], []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        g0 = 2.0 * (params[0].detach() - 0.5) + 0.3 * math.sin(step + 1.0)
        g1 = None if step == 1 else params[1].detach() ** 3 - 0.1 * step
        params[0].grad = g0.clone()
        if g1 is not None:
            params[1].grad = g1.clone()
        opt.step()
        grads.append([g0.flatten().tolist(), None if g1 is None else g1.flatten().tolist()])
        after.append([p.detach().flatten().tolist() for p in params])
    return {"name": name, "param0": [p0.flatten().tolist(), p1.flatten().tolist()],
            "shapes": [list(p0.shape), list(p1.shape)], "grads": grads, "params_after": after}


def lr_trajectory(make_sched, epochs=25):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    sched = make_sched(opt)
    lrs = []
    for _ in range(epochs):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def main():
    o = torch.optim
    cases = [
        run_case("sgd", lambda ps: o.SGD(ps, lr=0.1)),
        run_case("sgd_momentum", lambda ps: o.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1,
                                                  weight_decay=0.01)),
        run_case("sgd_nesterov", lambda ps: o.SGD(ps, lr=0.05, momentum=0.8, nesterov=True,
                                                  weight_decay=0.02)),
        run_case("adam", lambda ps: o.Adam(ps, lr=0.01)),
        run_case("adam_wd_amsgrad", lambda ps: o.Adam(ps, lr=0.02, betas=(0.8, 0.95), eps=1e-6,
                                                      weight_decay=0.1, amsgrad=True)),
        run_case("adamw", lambda ps: o.AdamW(ps, lr=0.01)),
        run_case("adamw_amsgrad", lambda ps: o.AdamW(ps, lr=0.03, betas=(0.85, 0.99),
                                                     weight_decay=0.05, amsgrad=True)),
    ]
    out = {
        "torch_version": torch.__version__,
        "cases": cases,
        "step_lr": lr_trajectory(lambda opt: o.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)),
        "cosine_lr": lr_trajectory(
            lambda opt: o.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.01)),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
