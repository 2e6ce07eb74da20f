#!/usr/bin/env python3
"""The checkpoint stall, made visible: one small PyTorch training loop on the
CPU, trained without checkpoints, checkpointing with torch.save + fsync in the
training thread, with sluice.save (async; -lazy: snapshot="lazy"), with
torch's dcp.async_save to its FileSystemWriter, and with dcp.async_save to
sluice's StorageWriter (each in DCP's default thread mode and in its process
mode, -process; dcp+sluice-lazy: async_staging=True, the loop waiting on
staging_completion before optimizer.step() as DCP's tutorial does), and the
figures side by side. A lazy save's stall is the save call plus every wait
it caused before a step (the pre-hook, staging_completion).

    PYTHONPATH=build/python .venv/bin/python examples/train_demo.py            # ~1 minute
    PYTHONPATH=build/python .venv/bin/python examples/train_demo.py --hidden 4096 --layers 6 \\
        --steps 40 --every 10                                        # 100M params, 1.2 GB state

The modes take turns in rounds of --every steps (one checkpoint in the
middle of each round), so that they share the machine's ups and downs; the
overhead is the median round's, against that round's no-checkpoint steps.
Compute runs on one thread (torch.set_num_threads(1)), as a GPU trainer leaves
the host's cores to the data loader and the checkpoint engine. Step time is
the wall time of a training step plus the checkpoint call made after it, so
"overhead" is what checkpointing cost the training loop.
"""

import argparse
import warnings
import os
import shutil
import statistics
import sys
import time

import torch
import torch.distributed.checkpoint as dcp

import sluice
import sluice.torch

MODES = ("none", "torch.save", "sluice", "sluice-lazy", "dcp", "dcp+sluice", "dcp+sluice-lazy",
         "dcp-process", "dcp+sluice-process")
# DCP's process-based checkpointer (AsyncCheckpointerType.PROCESS): the save
# runs in a daemon process DCP starts at the first checkpoint.
PROCESS_MODES = ("dcp-process", "dcp+sluice-process")


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


class Mode:
    """One way of checkpointing, trained in segments of `every` steps with
    one checkpoint in the middle of each (so its background work, if any,
    falls inside the segment that caused it)."""

    instances = []

    def __init__(self, name, directory):
        Mode.instances.append(self)
        self.name, self.directory = name, directory
        self.step = 0
        self.segments = []     # mean step seconds of each segment
        self.checkpoints = []  # (stall, time to durable)
        self.pending = []      # (stall, sluice handle) not yet durable
        self.staging = None    # dcp+sluice-lazy: the last save's staging_completion
        self.staging_waits = []  # dcp+sluice-lazy: seconds the loop waited on it, per save
        self.writers = []      # dcp+sluice-lazy: each save's writer (its handle)

    def collect(self, wait=False):
        for item in list(self.pending):
            stall, handle, started, done_at = item
            if self.name in ("sluice", "sluice-lazy"):
                if wait or handle.done():
                    handle.wait()  # re-raises if the save failed
                    # A lazy save also blocks the trainer in optimizer
                    # pre-hooks: that is stall too.
                    stall += getattr(handle, "wait_seconds", 0.0)
                    self.checkpoints.append((stall, handle.durable_seconds))
                    self.pending.remove(item)
            elif wait or handle.done():
                handle.result()  # re-raises if the save failed
                if self.name == "dcp+sluice-lazy":
                    # The loop's wait on staging_completion, and any pre-hook wait.
                    stall += self.staging_waits.pop(0) + self.writers.pop(0).handle.wait_seconds
                self.checkpoints.append((stall, done_at[0] - started))
                self.pending.remove(item)
                self._keep_newest_dirs(2)

    def _keep_newest_dirs(self, keep):
        if self.name not in ("dcp", "dcp-process"):
            return
        steps = sorted(int(d.split("-")[1]) for d in os.listdir(self.directory))
        for step in steps[:-keep]:
            shutil.rmtree(os.path.join(self.directory, f"step-{step}"), ignore_errors=True)

    def checkpoint(self, model, optimizer):
        state = state_of(model, optimizer, self.step)
        if self.name in PROCESS_MODES:
            # One checkpoint process serves the whole trainer, one save at a
            # time: the other process mode's save must be done first (not
            # counted in this mode's stall).
            for other in Mode.instances:
                if other is not self and other.name in PROCESS_MODES:
                    other.collect(wait=True)
        t0 = time.perf_counter()
        if self.name == "torch.save":
            path = os.path.join(self.directory, f"ckpt-{self.step}.pt")
            torch_save_fsync(state, path)
            stall = time.perf_counter() - t0
            self.checkpoints.append((stall, stall))
            for old in os.listdir(self.directory):  # keep the newest only
                if old != os.path.basename(path):
                    os.remove(os.path.join(self.directory, old))
        elif self.name in ("sluice", "sluice-lazy"):
            snapshot = "lazy" if self.name == "sluice-lazy" else "eager"
            handle = sluice.save(self.directory, "demo", self.step, state, snapshot=snapshot)
            self.pending.append((time.perf_counter() - t0, handle, t0, None))
        else:
            if self.name.startswith("dcp+sluice"):
                lazy = self.name == "dcp+sluice-lazy"
                writer = sluice.torch.StorageWriter(self.directory, "demo", self.step, async_staging=lazy)
                if lazy:
                    self.writers.append(writer)
            else:
                writer = dcp.FileSystemWriter(os.path.join(self.directory, f"step-{self.step}"))
            kwargs = {}
            if self.name in PROCESS_MODES:
                from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
                kwargs["async_checkpointer_type"] = AsyncCheckpointerType.PROCESS
            future = dcp.async_save(state, storage_writer=writer, no_dist=True, **kwargs)
            stall = time.perf_counter() - t0
            if self.name == "dcp+sluice-lazy":
                self.staging, future = future.staging_completion, future.upload_completion
                self.staging_waits.append(0.0)
            done_at = [None]
            future.add_done_callback(lambda _: done_at.__setitem__(0, time.perf_counter()))
            self.pending.append((stall, future, t0, done_at))

    def segment(self, args, model, optimizer, x, y):
        loss_fn = torch.nn.MSELoss()
        seconds = []
        for i in range(args.every):
            self.step += 1
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            if self.staging is not None:
                # DCP's tutorial loop: wait for staging before the step.
                waited = time.perf_counter()
                self.staging.result()
                self.staging_waits[-1] += time.perf_counter() - waited
                self.staging = None
            optimizer.step()
            if self.name != "none" and i == args.every // 2:
                self.checkpoint(model, optimizer)
            seconds.append(time.perf_counter() - start)
            self.collect()
        self.segments.append(statistics.mean(seconds))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=2048, help="width of each Linear layer")
    parser.add_argument("--layers", type=int, default=6, help="number of Linear+ReLU blocks")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=80,
                        help="timed steps per mode (rounds of --every steps)")
    parser.add_argument("--every", type=int, default=10,
                        help="checkpoint every N steps (one per round, mid-round)")
    parser.add_argument("--dir", default="/tmp/sluice-train-demo",
                        help="where checkpoints go (the same disk for both)")
    parser.add_argument("--threads", type=int, default=1, help="torch compute threads")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, 'none' always included (default: {','.join(MODES)})")
    args = parser.parse_args()
    chosen = ["none"] + [m for m in args.modes.split(",") if m and m != "none"]
    unknown = set(chosen) - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s) {sorted(unknown)}; known: {', '.join(MODES)}")
    torch.set_num_threads(args.threads)
    # DCP says, once per save, that it saves in one process: as intended here.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")

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
    dirs = {m: os.path.join(args.dir, m.replace(".", "_").replace("+", "_")) for m in chosen[1:]}
    for d in dirs.values():
        os.makedirs(d)
    # Staging holds one whole checkpoint, so a save never streams; keep the
    # newest two steps on disk.
    sluice.configure(staging_bytes=nbytes + (64 << 20), keep_last=[2])
    for m in ("sluice", "sluice-lazy", "dcp+sluice", "dcp+sluice-lazy", "dcp+sluice-process"):
        if m in dirs:
            sluice.pipeline(dirs[m])  # open once: the arena is allocated and faulted here
    if any(m in PROCESS_MODES for m in chosen):
        # DCP's process mode needs a process group (here one of one rank).
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method=f"file://{args.dir}/pg-init", rank=0, world_size=1)

    modes = {m: Mode(m, dirs.get(m)) for m in chosen}
    order = list(modes)
    rounds = max(1, args.steps // args.every)
    print(f"  {rounds} rounds of {args.every} steps per mode, modes interleaved ...",
          file=sys.stderr, flush=True)
    for r in range(rounds):
        # Rotate the order so that no mode always follows another's tail.
        k = r % len(order)
        for name in order[k:] + order[:k]:
            modes[name].segment(args, model, optimizer, x, y)
    for m in modes.values():
        m.collect(wait=True)

    titles = {"none": "no checkpoint", "torch.save": "torch.save+fsync", "sluice": "sluice async",
              "sluice-lazy": "sluice lazy", "dcp": "DCP async_save", "dcp+sluice": "DCP+sluice",
              "dcp+sluice-lazy": "DCP+sluice lazy", "dcp-process": "DCP process",
              "dcp+sluice-process": "DCP+sluice proc"}
    print()
    print(f"{'':28}" + "".join(f"{titles[m]:>18}" for m in modes))

    def row(label, values):
        print(f"{label:28}" + "".join(f"{v:>18}" for v in values))

    def med(xs):
        return f"{statistics.median(xs):.3f} s" if xs else "-"

    def overhead(name):
        # Per round, against that round's no-checkpoint segment (the machine
        # drifts between rounds); the median round.
        return statistics.median(m / b - 1 for m, b in zip(modes[name].segments,
                                                           modes["none"].segments))

    named = [m for m in modes if m != "none"]
    row("mean step time", [f"{statistics.mean(modes[m].segments):.3f} s" for m in modes])
    row("stall per checkpoint (med)", ["-"] + [med([c[0] for c in modes[m].checkpoints])
                                               for m in named])
    row("time to durable (med)", ["-"] + [med([c[1] for c in modes[m].checkpoints])
                                          for m in named])
    row("checkpoints", ["-"] + [str(len(modes[m].checkpoints)) for m in named])
    row("step-time overhead (med)", ["-"] + [f"{100 * overhead(m):+.1f} %" for m in named])
    # What one checkpoint cost the loop: the round's extra seconds over its
    # no-checkpoint round (one checkpoint per round).
    row("overhead per checkpoint (med)", ["-"] + [
        f"{statistics.median((m - b) * args.every for m, b in zip(modes[n].segments, modes['none'].segments)):+.3f} s"
        for n in named])
    sluice.close()
    if any(m in PROCESS_MODES for m in chosen):
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
