#!/usr/bin/env python3
"""The checkpoint stall, made visible: one small PyTorch training loop on the
CPU, run three times -- without checkpoints, checkpointing every N steps with
torch.save + fsync in the training thread, and with sluice.save (async) --
and the figures side by side.

    PYTHONPATH=build/python python3 examples/train_demo.py            # ~1 minute
    PYTHONPATH=build/python python3 examples/train_demo.py --hidden 4096 --layers 6 \\
        --steps 40 --every 10                                        # 100M params, 1.2 GB state

Compute runs on one thread (torch.set_num_threads(1)), as a GPU trainer leaves
the host's cores to the data loader and the checkpoint engine. Step time is
the wall time of a training step plus the checkpoint call made after it, so
"overhead" is what checkpointing cost the training loop.
"""

import argparse
import os
import shutil
import statistics
import sys
import time

import torch

import sluice


def build(hidden, layers, seed=0):
    torch.manual_seed(seed)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks)
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def state_of(model, optimizer, step):
    return {"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step}


def state_bytes(state):
    total = 0
    stack = [state]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            total += obj.numel() * obj.element_size()
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return total


def torch_save_fsync(state, path):
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def run(mode, args, model, optimizer, x, y, directory):
    """Trains args.steps steps; returns (step seconds, [(stall, durable)])."""
    step_seconds, checkpoints, pending = [], [], []
    loss_fn = torch.nn.MSELoss()
    for step in range(1, args.steps + 1):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
        if mode != "none" and step % args.every == 0:
            t0 = time.perf_counter()
            if mode == "torch.save":
                path = os.path.join(directory, f"ckpt-{step}.pt")
                torch_save_fsync(state_of(model, optimizer, step), path)
                stall = time.perf_counter() - t0
                checkpoints.append((stall, stall))
                for old in os.listdir(directory):  # keep the newest only, like keep_last=1
                    if old != os.path.basename(path):
                        os.remove(os.path.join(directory, old))
            else:
                handle = sluice.save(directory, "demo", step, state_of(model, optimizer, step))
                pending.append((time.perf_counter() - t0, handle))
        step_seconds.append(time.perf_counter() - start)
        # Handles whose save is durable: record (stall, time to durable).
        for item in [p for p in pending if p[1].done()]:
            item[1].wait()  # re-raises if the save failed
            checkpoints.append((item[0], item[1].durable_seconds))
            pending.remove(item)
    for stall, handle in pending:
        handle.wait()
        checkpoints.append((stall, handle.durable_seconds))
    return step_seconds, checkpoints


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=2048, help="width of each Linear layer")
    parser.add_argument("--layers", type=int, default=6, help="number of Linear+ReLU blocks")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per mode")
    parser.add_argument("--every", type=int, default=10, help="checkpoint every N steps")
    parser.add_argument("--dir", default="/tmp/sluice-train-demo",
                        help="where checkpoints go (the same disk for both)")
    parser.add_argument("--threads", type=int, default=1, help="torch compute threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model, optimizer = build(args.hidden, args.layers)
    x = torch.randn(args.batch, args.hidden)
    y = torch.randn(args.batch, args.hidden)
    for _ in range(3):  # warm up; creates Adam's state
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    nbytes = state_bytes(state_of(model, optimizer, 0))
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.1f} M parameters, checkpoint {nbytes / 2**30:.2f} GiB "
          f"(weights + Adam), checkpoint every {args.every} of {args.steps} steps, "
          f"{args.threads} compute thread(s)")

    shutil.rmtree(args.dir, ignore_errors=True)
    dirs = {m: os.path.join(args.dir, m.replace(".", "_")) for m in ("torch.save", "sluice")}
    for d in dirs.values():
        os.makedirs(d)
    # Staging holds one whole checkpoint, so a save never streams; keep the
    # newest two steps on disk.
    sluice.configure(staging_bytes=nbytes + (64 << 20), keep_last=[2])
    sluice.pipeline(dirs["sluice"])  # open once: the arena is allocated and faulted here

    results = {}
    for mode in ("none", "torch.save", "sluice"):
        print(f"  running {mode} ...", file=sys.stderr, flush=True)
        results[mode] = run(mode, args, model, optimizer, x, y, dirs.get(mode, args.dir))

    base = statistics.mean(results["none"][0])
    print()
    print(f"{'':28}{'no checkpoint':>16}{'torch.save+fsync':>18}{'sluice async':>16}")

    def row(label, values):
        print(f"{label:28}" + "".join(f"{v:>{w}}" for v, w in zip(values, (16, 18, 16))))

    def med(xs):
        return f"{statistics.median(xs):.3f} s" if xs else "-"

    row("mean step time", [f"{statistics.mean(results[m][0]):.3f} s"
                           for m in ("none", "torch.save", "sluice")])
    row("stall per checkpoint (med)", ["-"] + [med([c[0] for c in results[m][1]])
                                               for m in ("torch.save", "sluice")])
    row("time to durable (med)", ["-"] + [med([c[1] for c in results[m][1]])
                                          for m in ("torch.save", "sluice")])
    row("checkpoints", ["-"] + [str(len(results[m][1])) for m in ("torch.save", "sluice")])
    row("step-time overhead", ["-"] + [
        f"{100 * (statistics.mean(results[m][0]) - base) / base:+.1f} %"
        for m in ("torch.save", "sluice")])
    sluice.close()


if __name__ == "__main__":
    main()
