"""One rank of a torch-checkpointing save or load through sluice (run by
test_torch_checkpointing.py).

    tc_worker.py MODE ROOT RANK WORLD INIT_FILE [STEP]

MODE save-sync / save-async: saves ROOT/step_STEP ({"model": tensors whose
values depend on the rank and step, "step": STEP}) and prints "saved".
load: loads ROOT/step_STEP into zeros and exits 1 on a wrong value.
save-loop: saves steps 1, 2, ... until killed, printing each one saved
(the crash test kills it at a random moment).
manager: with sluice's SluiceCheckpointManager, an async save of STEP loaded
right away (no wait), then a save of STEP+1 still in flight at exit.
manager-again: that manager's save of STEP must raise FileExistsError at
once; prints "refused".
"""
import sys

import torch
import torch.distributed as dist
from torch_checkpointing import CheckpointManager
from torch_checkpointing.config import AsyncCheckpointSaverConfig, SyncCheckpointSaverConfig

import sluice
import sluice.torch_checkpointing as stc


def state(rank, step):
    return {"model": {"w": torch.full((256, 1024), float(rank * 1000 + step)),
                      "b": torch.arange(512, dtype=torch.float32) + rank + step},
            "step": step}


def main():
    mode, root, rank, world, init_file = sys.argv[1:6]
    step = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    rank, world = int(rank), int(world)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    if mode.startswith("manager"):
        return sluice_manager(mode, root, rank, step)
    save = AsyncCheckpointSaverConfig() if mode == "save-async" else SyncCheckpointSaverConfig()
    manager = CheckpointManager(stc.manager_config(root, save=save))
    if mode in ("save-sync", "save-async"):
        result = manager.save(f"{root}/step_{step}", state(rank, step))
        if result is not None:
            result.result()
        print("saved", flush=True)
    elif mode == "save-loop":
        step = 1
        while True:
            manager.save(f"{root}/step_{step}", state(rank, step))
            print(f"saved {step}", flush=True)
            step += 1
    else:
        want = state(rank, step)
        into = {"model": {k: torch.zeros_like(v) for k, v in want["model"].items()}, "step": None}
        got = manager.load(f"{root}/step_{step}", into=into)
        ok = all(torch.equal(into["model"][k], v) for k, v in want["model"].items()) and got["step"] == step
        if not ok:
            print(f"rank {rank}: wrong values", file=sys.stderr)
            sys.exit(1)
        print("loaded", flush=True)
    manager.close()
    if world > 1:
        dist.destroy_process_group()
    sluice.close()


def sluice_manager(mode, root, rank, step):
    manager = stc.SluiceCheckpointManager(stc.manager_config(root))  # async saves
    if mode == "manager-again":
        try:
            manager.save(f"{root}/step_{step}", state(rank, step))
        except FileExistsError as e:
            print("refused:", e, flush=True)
            return
        sys.exit("the save of a committed directory was not refused")
    manager.save(f"{root}/step_{step}", state(rank, step))
    want = state(rank, step)
    into = {"model": {k: torch.zeros_like(v) for k, v in want["model"].items()}}
    manager.load(f"{root}/step_{step}", into=into)
    if not all(torch.equal(into["model"][k], v) for k, v in want["model"].items()):
        sys.exit(f"rank {rank}: wrong values")
    print("loaded", flush=True)
    manager.save(f"{root}/step_{step + 1}", state(rank, step + 1))  # in flight at exit


if __name__ == "__main__":
    main()
