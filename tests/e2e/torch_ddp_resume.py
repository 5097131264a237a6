#!/usr/bin/env python3
"""A plain PyTorch DDP program on CPU (gloo), as users write one that must
survive a restart: it checkpoints after every step to
TRAINCTL_CHECKPOINT_DIR and, started again, resumes from the last
checkpoint. Nothing trainctl-specific but that directory's name.

Training: a float64 linear model (16 inputs) on data fixed by the step
index; each step's batch has 2 x 8 rows and rank r of 2 takes rows r*8 to
r*8+7. DDP averages the two ranks' gradients, so the run equals one process
on all 16 rows (--single), up to float64 rounding.

  torch_ddp_resume.py [--steps 40] [--step-sleep 0.15]
      under a launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT); at start
      each rank appends "ATTEMPT RANK RESTART_COUNT PID MASTER_ADDR" to
      $E2E_RANKS_FILE when set; rank 0 writes the step of its last checkpoint
      to $TRAINCTL_CHECKPOINT_DIR/step, and result.json at the end: params, resumed_from (the step the attempt
      started at), attempt, restart_count, master_addr.
  torch_ddp_resume.py --single --out FILE
      the one-process reference run: FILE gets {"params": [...]}.
E2E_NO_RESUME=1 ignores the checkpoint (a broken resume, for the test's
own check that it notices).
"""

import argparse
import json
import os
import time

import torch

INPUTS, ROWS = 16, 8


def batch(step, world=2):
    """All rows of `step`'s batch (world x ROWS), fixed by the step index."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(world * ROWS, INPUTS, generator=g, dtype=torch.float64)
    w_true = torch.arange(INPUTS, dtype=torch.float64) / INPUTS
    y = x @ w_true + 0.1 * torch.randn(world * ROWS, generator=g, dtype=torch.float64)
    return x, y.unsqueeze(1)


def model_and_opt():
    """The model (the same initial weights everywhere) and its optimizer."""
    torch.manual_seed(7)
    model = torch.nn.Linear(INPUTS, 1).double()
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def flat(model):
    """The parameters as a list of floats."""
    return [float(v) for p in model.parameters() for v in p.detach().reshape(-1)]


def single(args):
    """The one-process reference: the whole batch of every step."""
    model, opt = model_and_opt()
    for step in range(args.steps):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    with open(args.out, "w") as f:
        json.dump({"params": flat(model)}, f)


def ddp(args):
    """One rank of the gang; checkpoints every step, resumes if it can."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    env = os.environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    if env.get("E2E_RANKS_FILE"):
        with open(env["E2E_RANKS_FILE"], "a") as f:
            f.write(f"{env.get('TRAINCTL_ATTEMPT', 0)} {rank} "
                    f"{env.get('TORCHELASTIC_RESTART_COUNT', 0)} {os.getpid()} "
                    f"{env.get('MASTER_ADDR', '')}\n")
    dist.init_process_group("gloo")
    model, opt = model_and_opt()
    ckpt_dir = env["TRAINCTL_CHECKPOINT_DIR"]
    ckpt = os.path.join(ckpt_dir, "ckpt.pt")
    start = 0
    if os.path.exists(ckpt) and not env.get("E2E_NO_RESUME"):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
    model = DDP(model)
    for step in range(start, args.steps):
        x, y = batch(step, world)
        x, y = x[rank * ROWS:(rank + 1) * ROWS], y[rank * ROWS:(rank + 1) * ROWS]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # all-reduced here
        opt.step()
        if rank == 0:
            tmp = ckpt + ".tmp"
            torch.save({"step": step + 1, "model": model.module.state_dict(),
                        "opt": opt.state_dict()}, tmp)
            os.replace(tmp, ckpt)  # a reader sees the old or the new, whole
            with open(ckpt + ".step.tmp", "w") as f:  # for the test, without torch
                f.write(str(step + 1))
            os.replace(ckpt + ".step.tmp", os.path.join(ckpt_dir, "step"))
        time.sleep(args.step_sleep)
    dist.barrier()
    if rank == 0:
        with open(os.path.join(ckpt_dir, "result.json"), "w") as f:
            json.dump({"params": flat(model.module), "resumed_from": start,
                       "attempt": int(env.get("TRAINCTL_ATTEMPT", 0)),
                       "restart_count": int(env.get("TORCHELASTIC_RESTART_COUNT", 0)),
                       "master_addr": env.get("MASTER_ADDR")}, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--step-sleep", type=float, default=0.15)
    ap.add_argument("--single", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    single(args) if args.single else ddp(args)


if __name__ == "__main__":
    main()
