#!/usr/bin/env python3
"""Where a lazy save's stall goes: the eager save's copy against the lazy
save's waits, checkpoint by checkpoint, in a CPU training loop.

    PYTHONPATH=build/python .venv/bin/python bench/lazy_stall.py                 # small model, short steps
    PYTHONPATH=build/python .venv/bin/python bench/lazy_stall.py --hidden 4096 --layers 10 --batch 64

Each checkpoint is taken right after an optimizer step, and the next step's
forward and backward then run while a lazy save copies in the background.
For every lazy checkpoint it prints:
  - stall: the save() call (the small tensors' copy);
  - hook wait: the time the next optimizer.step()'s pre-hook waited;
  - copy: the background copy's time (handle.staged_seconds);
  - remainder: what was left of the copy when the step began (from then
    to the moment sluice's sealing thread saw the copy end, on the same
    clock), the least a pre-hook can wait. When forward and backward are shorter than the copy, the hook's
    wait should be that remainder and nothing more.
Eager and lazy checkpoints alternate; the summary gives medians and the
ratio of the trainer-visible stalls (save + hook wait, lazy; save, eager),
and the ceiling: one bare memcpy of the state (copy_ into tensors allocated
and faulted in once) in the same run.
"""

import argparse
import shutil
import statistics
import time

import torch

import sluice


def build(hidden, layers):
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks)
    return model, torch.optim.Adam(model.parameters(), lr=1e-4)


def state_bytes(model, optimizer):
    n = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    for s in optimizer.state.values():
        n += sum(v.numel() * v.element_size() for v in s.values() if isinstance(v, torch.Tensor))
    return n


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--checkpoints", type=int, default=5, help="per mode")
    parser.add_argument("--threads", type=int, default=1, help="torch compute threads")
    parser.add_argument("--dir", default="/tmp/sluice-lazy-stall")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, optimizer = build(args.hidden, args.layers)
    x, y = torch.randn(args.batch, args.hidden), torch.randn(args.batch, args.hidden)

    def forward_backward():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()

    for _ in range(3):
        forward_backward()
        optimizer.step()
    nbytes = state_bytes(model, optimizer)
    shutil.rmtree(args.dir, ignore_errors=True)
    sluice.configure(staging_bytes=nbytes + (64 << 20), keep_last=[2])
    sluice.pipeline(args.dir)  # the arena is made and faulted in here

    eager, lazy, memcpy = [], [], []
    targets = []  # the memcpy ceiling's destination, allocated once
    for k in range(2 * args.checkpoints):
        mode = "eager" if k % 2 == 0 else "lazy"
        state = {"model": model.state_dict(), "optim": optimizer.state_dict()}
        t0 = time.perf_counter()
        handle = sluice.save(args.dir, "bench", k, state, snapshot=mode)
        stall = time.perf_counter() - t0
        t1 = time.perf_counter()
        forward_backward()
        fb = time.perf_counter() - t1
        hook_start = time.perf_counter()
        optimizer.step()
        handle.wait()
        if mode == "eager":
            eager.append(stall)
            sources = list(state["model"].values())
            sources += [v for s in optimizer.state.values() for v in s.values()]
            if not targets:
                targets.extend(torch.empty_like(t) for t in sources)
                for t in targets:
                    t.fill_(0)  # faulted in once, as sluice's staging is
            t2 = time.perf_counter()
            for dst, src in zip(targets, sources):
                dst.copy_(src)
            memcpy.append(time.perf_counter() - t2)
            print(f"eager #{k // 2}: stall {stall:.4f} s, forward+backward {fb:.4f} s", flush=True)
        else:
            copy = handle.staged_seconds
            # When the sealing thread saw the copy end, on this clock.
            remainder = max(0.0, handle._save.staged_at - hook_start)
            lazy.append((stall, handle.wait_seconds, copy, remainder, fb))
            print(f"lazy  #{k // 2}: stall {stall:.4f} s, hook wait {handle.wait_seconds:.4f} s, "
                  f"copy {copy:.4f} s, remainder at the hook {remainder:.4f} s, "
                  f"forward+backward {fb:.4f} s", flush=True)

    med = statistics.median
    visible = [s + w for s, w, _, _, _ in lazy]
    print(f"\nstate {nbytes / 2**30:.2f} GiB, {args.threads} compute thread(s), "
          f"forward+backward {med(f for *_, f in lazy):.4f} s (median)")
    print(f"one bare memcpy of the state (copy_):  {med(memcpy):.4f} s")
    print(f"eager save stall:                       {med(eager):.4f} s  ({med(eager) / med(memcpy):.2f}x memcpy)")
    print(f"lazy save: save() {med(s for s, *_ in lazy):.4f} s + hook wait "
          f"{med(w for _, w, *_ in lazy):.4f} s = {med(visible):.4f} s trainer-visible")
    print(f"lazy copy {med(c for _, _, c, _, _ in lazy):.4f} s; remainder at the hook "
          f"{med(r for *_, r, _ in lazy):.4f} s; hook wait minus remainder "
          f"{med(w - r for _, w, _, r, _ in lazy):+.4f} s (median)")
    print(f"ratio lazy / eager trainer-visible stall: {med(visible) / med(eager):.3f}")
    sluice.close()
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
