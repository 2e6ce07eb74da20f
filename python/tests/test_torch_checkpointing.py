"""sluice as torch-checkpointing's Storage (sluice.torch_checkpointing),
driven by that library's own CheckpointManager: sync and async saves on 1
and 2 ranks, loads, a second save of one directory, and saves killed at
random moments."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch_checkpointing", reason="torch-checkpointing is not installed "
                    "(scripts/install-deps.sh installs it)")

import sluice  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "tc_worker.py")
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "doc", "python.md")
# What torch-checkpointing prints when its checkpoint process fails or dies.
NOISE = ("Traceback", "terminated unexpectedly", "Exception in subprocess")


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
        try:
            listed = sluice.list_checkpoints(str(root / f"t{trial}"), "step_")
        except sluice.NotFoundError:
            listed = []  # killed before its first save made the store
        complete = sorted(c["step"] for c in listed if c["complete"])
        # What it said it saved is there; at most one more (killed after the commit).
        assert set(said) <= set(complete) and len(complete) <= len(said) + 1, (said, complete)
        for step in sorted({complete[0], complete[-1]}) if complete else []:
            run_ranks("load", root / f"t{trial}", 1, tmp_path, step=step)
        missing = (max(complete) if complete else 0) + 1
        (rc, _, err), = run_ranks("load", root / f"t{trial}", 1, tmp_path, step=missing, expect_ok=False)
        assert rc != 0 and "FileNotFoundError" in err, err
    sluice.close()


def test_sluices_manager_loads_its_own_save_refuses_a_committed_one_and_finishes_at_exit(tmp_path):
    # Issue 48: a load right after an async save found nothing, a second
    # save of a directory failed in the checkpoint process (tracebacks, then
    # future.result() raised), and a save in flight at exit was lost with
    # "Child process terminated unexpectedly".
    root = tmp_path / "ckpt"
    (rc, out, err), = run_ranks("manager", root, 1, tmp_path, step=7)
    assert "loaded" in out and not [n for n in NOISE if n in err], err
    assert [(c["step"], c["complete"]) for c in sluice.list_checkpoints(str(root), "step_")] == \
        [(7, True), (8, True)]
    (rc, out, err), = run_ranks("manager-again", root, 1, tmp_path, step=7)
    assert "refused:" in out and "already committed" in out and "nothing was written" in out
    assert not [n for n in NOISE if n in err], err
    run_ranks("load", root, 1, tmp_path, step=7)
    sluice.close()


def test_peer_replicas_are_refused_not_ignored(tmp_path):
    import sluice.torch_checkpointing as stc
    sluice.configure(tier0_per_host=True, peer_replicas=1)
    try:
        with pytest.raises(ValueError, match="does not replicate to peers yet"):
            stc.SluiceStorageConfig(root=str(tmp_path / "ckpt")).create_storage()
    finally:
        sluice.configure(peer_replicas=0, tier0_per_host=False)
    assert not (tmp_path / "ckpt").exists()


def test_the_docs_example_runs_as_written(tmp_path):
    # doc/python.md's torch-checkpointing example, with its root under
    # tmp_path, in a script: it saves and loads; run again, its save of the
    # committed directory raises FileExistsError from save() itself.
    text = open(DOC).read()
    start = text.index("import sluice.torch_checkpointing as stc\n")
    block = text[start:text.index("```", start)].replace('"/data/ckpt', f'"{tmp_path}/ckpt')
    script = tmp_path / "example.py"
    script.write_text('import torch\nif __name__ == "__main__":\n    model = torch.nn.Linear(4, 3)\n'
                      + textwrap.indent(block, "    ") + '    print("ran")\n')
    first = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert first.returncode == 0 and "ran" in first.stdout, first.stderr
    assert not [n for n in NOISE if n in first.stderr], first.stderr
    again = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert again.returncode != 0 and "ran" not in again.stdout
    assert again.stderr.count("Traceback") == 1 and "in save" in again.stderr
    assert again.stderr.strip().splitlines()[-1].startswith("FileExistsError: sluice.torch_checkpointing")
