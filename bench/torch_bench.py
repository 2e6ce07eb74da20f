#!/usr/bin/env python3
"""sluice.save / sluice.load against torch.save + fsync / torch.load, same
state, same disk, same run.

    PYTHONPATH=build/python .venv/bin/python bench/torch_bench.py [--gib 2.25] [--runs 3] [--dir DIR]

The state is shaped like a model + torch.optim.Adam state dict: square fp32
weight matrices with their exp_avg and exp_avg_sq, plus param_groups. For each
of --runs rounds it measures
  - torch.save(state, f) + flush + fsync: the stall is the whole call;
  - sluice.save(store, ...): the stall is the save() call, time to durable
    the commit on disk (handle.wait());
  - sluice.save(..., snapshot="lazy"): the save() call, then wait_staged()
    (the background copy, with nothing training meanwhile), then durable;
  - torch.load and sluice.load (fresh tensors) and sluice.load(into=...)
    (preallocated tensors) from a cold page cache (sync; echo 3 >
    /proc/sys/vm/drop_caches, which needs root: without it the figures are
    marked warm).
and prints medians (min-max) and the ratios the project targets: stall <= 1/10
of torch.save's, durable <= torch.save's, load >= 3x torch.load.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import time

import torch

import sluice


def make_state(total_bytes, width=4096):
    matrix = width * width * 4
    layers = max(1, round(total_bytes / (3 * matrix)))
    g = torch.Generator().manual_seed(0)
    model, optim_state = {}, {}
    for i in range(layers):
        model[f"layers.{i}.weight"] = torch.randn(width, width, generator=g)
        optim_state[i] = {"step": torch.tensor(100.0),
                          "exp_avg": torch.randn(width, width, generator=g),
                          "exp_avg_sq": torch.rand(width, width, generator=g)}
    groups = [{"lr": 1e-4, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0,
               "amsgrad": False, "params": list(range(layers))}]
    return {"model": model, "optim": {"state": optim_state, "param_groups": groups}}


def nbytes(state):
    total, stack = 0, [state]
    while stack:
        obj = stack.pop()
        if isinstance(obj, torch.Tensor):
            total += obj.numel() * obj.element_size()
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return total


def drop_caches():
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def summary(xs):
    return f"{statistics.median(xs):7.3f} s ({min(xs):.3f}-{max(xs):.3f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gib", type=float, default=2.25, help="state size in GiB")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/sluice-torch-bench")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (torch.load)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    shutil.rmtree(args.dir, ignore_errors=True)
    store = os.path.join(args.dir, "sluice")
    os.makedirs(store)
    pt_path = os.path.join(args.dir, "state.pt")

    state = make_state(int(args.gib * 2**30))
    size = nbytes(state)
    gib = size / 2**30
    print(f"state: {gib:.2f} GiB in {len(state['model']) * 4} tensors; {args.runs} runs; "
          f"dir {args.dir}")
    sluice.configure(staging_bytes=size + (64 << 20), keep_last=[1])  # one arena for both names
    t0 = time.perf_counter()
    sluice.pipeline(store)
    print(f"sluice pipeline open (staging arena of {gib:.2f} GiB allocated and faulted, once "
          f"per process): {time.perf_counter() - t0:.3f} s")

    r = {k: [] for k in ("torch_save", "sluice_stall", "sluice_durable", "lazy_stall", "lazy_staged",
                         "lazy_durable", "torch_load", "sluice_load", "sluice_load_into")}
    cold = True
    dest = None
    for run in range(args.runs):
        t0 = time.perf_counter()
        with open(pt_path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        r["torch_save"].append(time.perf_counter() - t0)

        t0 = time.perf_counter()
        handle = sluice.save(store, "bench", run, state)
        r["sluice_stall"].append(time.perf_counter() - t0)
        handle.wait()
        r["sluice_durable"].append(time.perf_counter() - t0)

        # Lazy: the call returns before the large tensors are copied; here
        # nothing trains meanwhile, so the copy's time is not hidden behind
        # anything (train_demo.py and lazy_stall.py measure that).
        t0 = time.perf_counter()
        handle = sluice.save(store, "lazy", run, state, snapshot="lazy")
        r["lazy_stall"].append(time.perf_counter() - t0)
        handle.wait_staged()
        r["lazy_staged"].append(time.perf_counter() - t0)
        handle.wait()
        r["lazy_durable"].append(time.perf_counter() - t0)

        cold &= drop_caches()
        t0 = time.perf_counter()
        loaded = torch.load(pt_path)
        r["torch_load"].append(time.perf_counter() - t0)
        del loaded

        cold &= drop_caches()
        t0 = time.perf_counter()
        loaded = sluice.load(store, "bench")
        r["sluice_load"].append(time.perf_counter() - t0)
        if run == 0:
            ok = all(torch.equal(loaded["model"][k], state["model"][k]) for k in state["model"])
            assert ok, "sluice.load returned other values"
            dest = loaded  # preallocated and touched: the resume case
        del loaded

        cold &= drop_caches()
        t0 = time.perf_counter()
        sluice.load(store, "bench", into=dest)
        r["sluice_load_into"].append(time.perf_counter() - t0)

    med = {k: statistics.median(v) for k, v in r.items()}
    cache = "cold page cache" if cold else "WARM page cache (no root: could not drop caches)"
    print()
    print(f"{'torch.save + fsync':34}{summary(r['torch_save'])}  {gib / med['torch_save']:.2f} GiB/s")
    print(f"{'sluice.save stall':34}{summary(r['sluice_stall'])}  "
          f"{gib / med['sluice_stall']:.2f} GiB/s")
    print(f"{'sluice.save time to durable':34}{summary(r['sluice_durable'])}  "
          f"{gib / med['sluice_durable']:.2f} GiB/s")
    print(f"{'sluice.save lazy: save() returns':34}{summary(r['lazy_stall'])}")
    print(f"{'sluice.save lazy: all staged':34}{summary(r['lazy_staged'])}  "
          f"{gib / med['lazy_staged']:.2f} GiB/s")
    print(f"{'sluice.save lazy: durable':34}{summary(r['lazy_durable'])}  "
          f"{gib / med['lazy_durable']:.2f} GiB/s")
    print(f"{'torch.load, ' + ('cold' if cold else 'warm'):34}{summary(r['torch_load'])}  "
          f"{gib / med['torch_load']:.2f} GiB/s")
    print(f"{'sluice.load (new tensors)':34}{summary(r['sluice_load'])}  "
          f"{gib / med['sluice_load']:.2f} GiB/s")
    print(f"{'sluice.load(into=preallocated)':34}{summary(r['sluice_load_into'])}  "
          f"{gib / med['sluice_load_into']:.2f} GiB/s")
    print()
    print(f"stall ratio sluice/torch.save:      {med['sluice_stall'] / med['torch_save']:.3f} "
          f"(target <= 0.1)")
    print(f"durable ratio sluice/torch.save:    {med['sluice_durable'] / med['torch_save']:.3f} "
          f"(target <= 1)")
    print(f"lazy save() / eager stall:          {med['lazy_stall'] / med['sluice_stall']:.3f}")
    print(f"load speedup vs torch.load:         {med['torch_load'] / med['sluice_load']:.2f}x new "
          f"tensors, {med['torch_load'] / med['sluice_load_into']:.2f}x into= (target >= 3x; "
          f"{cache})")
    sluice.close()
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
