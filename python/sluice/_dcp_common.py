"""What sluice's DCP writer and reader share: storage keys, checkpoint ids
("STORE/NAME@STEP"), the step and world checks, and the collective that
lets every rank agree before any writes (sluice.torch)."""

import dataclasses
import os
import re
import threading

import torch
from torch.distributed.checkpoint import metadata as _metadata
from torch.distributed.checkpoint import planner as _planner

from . import _state_dict


METADATA_KEY = "dcp.metadata"
_RANK_METADATA_PREFIX = "dcp.metadata.rank"
_KEY_PREFIX = "dcp/"


def storage_key(index, rank=None):
    """The sluice item key of the DCP item at `index` (a MetadataIndex):
    deterministic, so every rank and every reader computes the same one.
    Saves without collectives put each rank's items under "dcp/r<rank>/":
    ranks that hold the same item (replicas) then never clash, and the
    metadata's storage_data says which copy a reader takes."""
    fqn = _state_dict._escape_component(index.fqn)
    prefix = _KEY_PREFIX if rank is None else f"{_KEY_PREFIX}r{int(rank)}/"
    if index.offset is None:
        return f"{prefix}{fqn}"
    return f"{prefix}{fqn}@{'_'.join(str(int(o)) for o in index.offset)}"


@dataclasses.dataclass(frozen=True)
class _RankAssignment:
    """What the coordinator tells each rank in its plan's storage_data."""
    rank: int
    world: int
    attempt: str  # one id per save, so sluice never mixes ranks of two launches
    collective: bool  # False: each rank planned alone (use_collectives=False)


def _metadata_from_plans(plans):
    """DCP metadata of a save whose global plans are `plans`: per fqn, a
    BytesStorageMetadata or a TensorStorageMetadata listing every chunk."""
    state = {}
    for plan in plans:
        for item in plan.items:
            fqn = item.index.fqn
            if item.type == _planner.WriteItemType.BYTE_IO:
                state[fqn] = _metadata.BytesStorageMetadata()
                continue
            data = item.tensor_data
            entry = state.get(fqn)
            if entry is None:
                entry = _metadata.TensorStorageMetadata(properties=data.properties, size=data.size,
                                                        chunks=[])
                state[fqn] = entry
            entry.chunks.append(data.chunk)
    return _metadata.Metadata(state_dict_metadata=state)


def parse_checkpoint_id(checkpoint_id):
    """(store, name, step) of a DCP checkpoint_id: "STORE/NAME@STEP" (STORE
    any sluice store URI: a path, file:///path, rados://pool/prefix), a
    directory path without "@" (directory_id: "/ckpt/step_1000" is
    /ckpt's step_@1000), or "NAME@STEP", (name, step) or
    {"name":..., "step":...} with store None.
    STEP may be "latest" or "latest-good" for a reader. ValueError on
    anything else."""
    store = None
    if isinstance(checkpoint_id, os.PathLike):
        checkpoint_id = os.fspath(checkpoint_id)
    if isinstance(checkpoint_id, (tuple, list)) and len(checkpoint_id) == 2:
        name, step = checkpoint_id
    elif isinstance(checkpoint_id, dict):
        name, step = checkpoint_id.get("name"), checkpoint_id.get("step")
    elif isinstance(checkpoint_id, str) and re.fullmatch(r"(.*/)?[^/]+@(\d+|latest|latest-good)", checkpoint_id):
        head, _, last = checkpoint_id.rpartition("/")
        name, _, step = last.rpartition("@")
        store = head or None
        if store is not None and not store.strip("/"):
            store = "/"  # "/NAME@STEP": a store at the root
    elif isinstance(checkpoint_id, str) and "@" not in checkpoint_id and checkpoint_id.rstrip("/"):
        store, name, step = directory_id(checkpoint_id)
    else:
        raise ValueError(f"sluice: checkpoint_id must be 'STORE/NAME@STEP', 'NAME@STEP', a "
                         f"directory path (its parent is the store) or (name, step), "
                         f"not {checkpoint_id!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"sluice: bad checkpoint name in {checkpoint_id!r}")
    if step not in _LATEST:
        try:
            step = int(step)
        except (TypeError, ValueError):
            raise ValueError(f"sluice: bad step in {checkpoint_id!r}") from None
        if step < 0:
            raise ValueError(f"sluice: bad step in {checkpoint_id!r}")
    return store, name, step


def directory_id(path):
    """(store, name, step) of a checkpoint named as a directory, the way
    users name DCP and torch-checkpointing checkpoints ("/ckpt/step_1000"):
    the store is the parent directory, and the directory's name, when it
    ends in a number, is the checkpoint name before the number and the step
    (step_1000 -> name "step_", step 1000; a name of digits alone, "1000",
    gets the name "checkpoint"); otherwise the whole name at step 0. A
    bare name without a parent takes the writer's or reader's store. No
    directory is made: the checkpoint is a name@step of the sluice store.
    Two directories that differ only in the number's leading zeros are the
    same step."""
    path = os.fspath(path).rstrip("/")
    head, _, base = path.rpartition("/")
    if not base or base in (".", ".."):
        raise ValueError(f"sluice: {path!r} names no checkpoint directory")
    store = head or None  # a bare directory name: the writer's or reader's store
    match = re.fullmatch(r"(.*?)(\d+)", base)
    if match is None:
        return store, base, 0
    return store, match.group(1) or "checkpoint", int(match.group(2))


# Steps a reader resolves when it opens: the newest committed one, or the
# newest one that is intact (a damaged newest step is skipped, with a warning).
_LATEST = ("latest", "latest-good")


def _storage_meta(name, step):
    return _metadata.StorageMeta(checkpoint_id=f"{name}@{step}")


def _check_step(step):
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"sluice: step must be a non-negative int, not {step!r}")
    return step


def _dist_world(group=None):
    """(rank, world) in `group` (None: the default group), (0, 1) without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(group), dist.get_world_size(group)
    return 0, 1


def _attempt_from_environment():
    """One id per launch that every rank computes alike without talking:
    $SLUICE_ATTEMPT, else torchrun's run id and restart count, else "" (a
    re-launch is then told apart on one host only)."""
    if os.environ.get("SLUICE_ATTEMPT"):
        return os.environ["SLUICE_ATTEMPT"]
    run = os.environ.get("TORCHELASTIC_RUN_ID")
    if run:
        return f"{run}.{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return ""


def _agree_before_writing(assignment, error, group=None):
    """Every rank of a multi-rank save says whether it could stage its items
    before any of them writes: a rank that failed (a bad tensor, a store it
    cannot write) would otherwise leave rank 0 waiting for its manifest for
    the whole rank timeout. Done over the default process group when it is
    exactly the ranks of this save, from the main thread (DCP does not tell
    the storage layer its group; with a subgroup, or from another thread, the
    wait stays bounded by the rank timeout). A custom planner whose
    finish_plan fails on one rank only makes that rank skip write_data: the
    others then meet DCP's own collective here, and it fails or times out.
    Raises `error` on the rank that had it, a RuntimeError naming the failed
    ranks on the others; nothing is then written or committed."""
    dist = torch.distributed
    if error is None and assignment.world <= 1:
        return
    # Only on the main thread: a save run from a background thread (an async
    # DCP save) would interleave this collective with the training loop's.
    if (assignment.world > 1 and assignment.collective and dist.is_available()
            and dist.is_initialized() and dist.get_world_size(group) == assignment.world
            and threading.current_thread() is threading.main_thread()):
        said = [None] * assignment.world
        dist.all_gather_object(said, None if error is None else f"{type(error).__name__}: {error}",
                               group=group)
        failed = [(rank, why) for rank, why in enumerate(said) if why is not None]
        if error is None and failed:
            raise RuntimeError("sluice.torch.StorageWriter: rank(s) "
                               + ", ".join(f"{r} ({why})" for r, why in failed)
                               + " could not stage their items; nothing was written or committed")
