"""sluice as torch-checkpointing's Storage (sluice.torch_checkpointing),
driven by that library's own CheckpointManager: sync and async saves on 1
and 2 ranks, loads, a second save of one directory, and saves killed at
random moments."""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch_checkpointing", reason="torch-checkpointing is not installed "
                    "(scripts/install-deps.sh installs it)")

import sluice  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "tc_worker.py")


def run_ranks(mode, root, world, tmp_path, step=1, expect_ok=True):
    init = tmp_path / f"init-{mode}-{step}-{time.monotonic_ns()}"
    procs = [subprocess.Popen([sys.executable, WORKER, mode, str(root), str(r), str(world), str(init),
                               str(step)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    results = [p.communicate(timeout=180) for p in procs]
    if expect_ok:
        for rank, (p, (out, err)) in enumerate(zip(procs, results)):
            assert p.returncode == 0, f"{mode} rank {rank}: {err}"
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, results)]


@pytest.mark.parametrize("mode", ["save-sync", "save-async"])
@pytest.mark.parametrize("world", [1, 2])
def test_the_librarys_own_save_and_load_round_trip(tmp_path, mode, world):
    root = tmp_path / "ckpt"
    run_ranks(mode, root, world, tmp_path, step=5)
    listed = sluice.list_checkpoints(str(root), "step_")
    assert [(c["step"], c["complete"]) for c in listed] == [(5, True)]
    run_ranks("load", root, world, tmp_path, step=5)
    # Each rank's files are its part: model_<rank>.pt, step_<rank>.pt.
    reader = sluice.pipeline(str(root), _reading=True).open("step_", 5)
    keys = sorted(k for k, _, _, _ in reader.items())
    assert keys == sorted(f"{item}_{r}.pt" for item in ("model", "step") for r in range(world)) or \
        all(k.endswith(".pt") for k in keys)
    sluice.close()


def test_saving_a_committed_directory_again_fails_and_keeps_the_first(tmp_path):
    root = tmp_path / "ckpt"
    run_ranks("save-sync", root, 1, tmp_path, step=3)
    (rc, _, err), = run_ranks("save-sync", root, 1, tmp_path, step=3, expect_ok=False)
    assert rc != 0 and "FileExistsError" in err and "already committed" in err
    run_ranks("load", root, 1, tmp_path, step=3)


def test_a_missing_checkpoint_does_not_exist_for_the_library(tmp_path):
    from torch_checkpointing import CheckpointManager
    import sluice.torch_checkpointing as stc
    manager = CheckpointManager(stc.manager_config(tmp_path / "ckpt"))
    with pytest.raises(FileNotFoundError):
        manager.load(str(tmp_path / "ckpt" / "step_9"), into={})
    storage = stc.SluiceStorageConfig(root=str(tmp_path / "ckpt")).create_storage()
    assert not storage.exists(tmp_path / "ckpt" / "step_9")
    with pytest.raises(OSError, match="not under the storage's root"):
        storage.exists(tmp_path / "elsewhere")
    manager.close()


def test_a_save_killed_at_any_moment_never_loads_as_complete(tmp_path):
    # kill -9 of a process saving step after step, at random moments: every
    # step either loads whole and right, or does not exist for the library
    # or for sluice; nothing in between.
    root = tmp_path / "ckpt"
    rng = random.Random(7)
    trials = int(os.environ.get("TC_KILL_TRIALS", "6"))
    for trial in range(trials):
        p = subprocess.Popen([sys.executable, WORKER, "save-loop", str(root / f"t{trial}"), "0", "1",
                              str(tmp_path / f"init{trial}")], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        time.sleep(rng.uniform(1.0, 3.0))
        p.send_signal(signal.SIGKILL)
        out, _ = p.communicate()
        said = [int(line.split()[1]) for line in out.splitlines() if line.startswith("saved")]
        complete = sorted(c["step"] for c in sluice.list_checkpoints(str(root / f"t{trial}"), "step_")
                          if c["complete"])
        # What it said it saved is there; at most one more (killed after the commit).
        assert set(said) <= set(complete) and len(complete) <= len(said) + 1, (said, complete)
        for step in sorted({complete[0], complete[-1]}) if complete else []:
            run_ranks("load", root / f"t{trial}", 1, tmp_path, step=step)
        missing = (max(complete) if complete else 0) + 1
        (rc, _, err), = run_ranks("load", root / f"t{trial}", 1, tmp_path, step=missing, expect_ok=False)
        assert rc != 0 and "FileNotFoundError" in err, err
    sluice.close()
