"""The stall of saving CUDA tensors with sluice, against the ceiling: one bare
device-to-host copy of the same bytes into pinned host memory.

    python bench/cuda_stall.py STORE_DIR [--gib 8] [--tensors 64] [--rounds 5]
                                         [--dcp-rounds 2] [--json FILE]

Rounds alternate: the bare copy (a single cudaMemcpy of one flat GPU buffer
into a pinned buffer, then a synchronize), then sluice.save of the state
(`--tensors` CUDA tensors of the same total size) timed from the call to its
return, which is when training may go on. Each save is waited for (durable on
tier 0) and removed before the next round, so no round waits on an earlier
one's writes. With --dcp-rounds, torch's own dcp.async_save (FileSystemWriter
into STORE_DIR/dcp) is timed the same way for reference. Prints medians, GiB/s
and the ratio sluice/bare (the issue asks for <= 1.2)."""

import argparse
import json
import os
import shutil
import statistics
import sys
import time

import torch

import sluice


def gib_per_s(nbytes, seconds):
    return nbytes / seconds / (1 << 30) if seconds > 0 else float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store")
    ap.add_argument("--gib", type=float, default=8.0)
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dcp-rounds", type=int, default=0)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("cuda_stall: torch has no CUDA device here; nothing to measure", file=sys.stderr)
        return 77

    total = int(args.gib * (1 << 30)) // args.tensors // 4096 * 4096 * args.tensors
    per = total // args.tensors
    flat = torch.empty(total, dtype=torch.uint8, device="cuda")
    flat.view(torch.float32).uniform_()
    state = {f"layer{i}": flat[i * per:(i + 1) * per].view(torch.bfloat16).view(-1, 1024)
             for i in range(args.tensors)}
    pinned = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    torch.cuda.synchronize()

    store = os.path.join(args.store, "sluice")
    shutil.rmtree(store, ignore_errors=True)
    sluice.configure(staging_bytes=total + (256 << 20))
    t0 = time.perf_counter()
    pipe = sluice.pipeline(store)  # makes and faults in the arena: once per process
    pipe.pin_for_cuda(torch.cuda.current_device())  # else the first CUDA save pins it
    open_seconds = time.perf_counter() - t0
    pin = dict(pipe.staging_pin)
    print(f"arena {(total + (256 << 20)) / (1 << 30):.2f} GiB opened in {open_seconds:.2f} s, "
          f"pinned={pin['pinned']} in {pin['seconds']:.2f} s {pin['error']}", flush=True)

    bare, stall, durable, dcp_stall = [], [], [], []
    for r in range(args.rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        pinned.copy_(flat, non_blocking=True)
        torch.cuda.synchronize()
        bare.append(time.perf_counter() - t)

        torch.cuda.synchronize()
        t = time.perf_counter()
        handle = sluice.save(store, "bench", r + 1, state)
        stall.append(time.perf_counter() - t)
        handle.wait()
        durable.append(time.perf_counter() - t)
        sluice.remove(store, "bench", r + 1)
        print(f"round {r + 1}: bare {bare[-1]:.3f} s ({gib_per_s(total, bare[-1]):.1f} GiB/s), "
              f"sluice stall {stall[-1]:.3f} s ({gib_per_s(total, stall[-1]):.1f} GiB/s), "
              f"durable {durable[-1]:.2f} s", flush=True)

    if args.dcp_rounds:
        import torch.distributed.checkpoint as dcp
        for r in range(args.dcp_rounds):
            path = os.path.join(args.store, "dcp", str(r))
            torch.cuda.synchronize()
            t = time.perf_counter()
            future = dcp.async_save(state, checkpoint_id=path, no_dist=True)
            dcp_stall.append(time.perf_counter() - t)
            future.result()
            shutil.rmtree(path, ignore_errors=True)
            print(f"dcp round {r + 1}: async_save returned after {dcp_stall[-1]:.3f} s", flush=True)

    med_bare, med_stall = statistics.median(bare), statistics.median(stall)
    result = {
        "bytes": total, "tensors": args.tensors, "rounds": args.rounds,
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "pin_seconds": pin["seconds"], "pinned": pin["pinned"], "open_seconds": open_seconds,
        "bare_seconds": bare, "sluice_stall_seconds": stall, "sluice_durable_seconds": durable,
        "median_bare_seconds": med_bare, "median_sluice_stall_seconds": med_stall,
        "bare_gib_per_s": gib_per_s(total, med_bare), "sluice_gib_per_s": gib_per_s(total, med_stall),
        "ratio_sluice_over_bare": med_stall / med_bare,
        "dcp_async_save_stall_seconds": dcp_stall,
    }
    print(f"median over {args.rounds} rounds, {total / (1 << 30):.2f} GiB in {args.tensors} CUDA "
          f"tensors: bare D2H {med_bare:.3f} s ({result['bare_gib_per_s']:.1f} GiB/s), sluice stall "
          f"{med_stall:.3f} s ({result['sluice_gib_per_s']:.1f} GiB/s): ratio {result['ratio_sluice_over_bare']:.3f}"
          + (f"; dcp.async_save stall median {statistics.median(dcp_stall):.3f} s" if dcp_stall else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    sluice.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
