"""PyTorch Distributed Checkpoint (torch.distributed.checkpoint, torch 2.x)
storage on sluice.

    import torch.distributed.checkpoint as dcp
    from sluice.torch import StorageWriter, StorageReader
    dcp.save(state_dict, storage_writer=StorageWriter("/data/ckpt", "run1", step))
    dcp.load(state_dict, storage_reader=StorageReader("/data/ckpt", "run1", step))
    # or with a checkpoint id "STORE/NAME@STEP" (any sluice store URI):
    dcp.save(state_dict, checkpoint_id="/data/ckpt/run1@100", storage_writer=StorageWriter())
    # async: one copy, into sluice's staging arena, before training resumes
    response = sluice.torch.async_save(state_dict, checkpoint_id="/data/ckpt/run1@100")

How a DCP save maps onto a sluice checkpoint name@step written by `world`
ranks: every rank writes the items its plan gives it (one sluice item per
DCP WriteItem, keyed "dcp/<fqn>@<offsets>"), as rank r of world, in
write_data. sluice commits a multi-rank checkpoint once: rank 0 publishes the
commit record when every rank's manifest is there, and every rank's
write_data returns only after that commit. So the DCP metadata, which DCP
hands to finish() only after write_data, cannot wait for finish(): rank 0
stores it among its own items, built in write_data from what the planner
decided in the global planning step (the coordinator planner's `metadata`,
or, for planners without one, the same metadata made from the global plans
that prepare_global_plan saw). Storage keys are a function of each item's
MetadataIndex, so nothing that write_data learns is needed to find an item
again. finish() checks that the metadata DCP hands it is the one stored.

Without collectives (use_collectives=False) no rank sees another's plan:
each rank writes every item it holds under "dcp/r<rank>/..." (replicas
included: no rank can know what another holds), stores the metadata of its
own items ("dcp.metadata.rank<r>", whose storage_data names those keys), and
the reader merges the ranks' metadata.
"""

import dataclasses
import io
import json
import os
import pickle
import re
import threading
import uuid
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import metadata as _metadata
from torch.distributed.checkpoint import planner as _planner
from torch.distributed.checkpoint.staging import AsyncStager as _AsyncStager
from torch.distributed.checkpoint.storage import WriteResult as _WriteResult

from . import _backlog, _sluice, _state_dict, pipeline

METADATA_KEY = "dcp.metadata"
_RANK_METADATA_PREFIX = "dcp.metadata.rank"
_KEY_PREFIX = "dcp/"

__all__ = ["StorageWriter", "StorageReader", "async_save", "parse_checkpoint_id", "dcp"]


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
    any sluice store URI: a path, file:///path, rados://pool/prefix), or
    "NAME@STEP", (name, step) or {"name":..., "step":...} with store None.
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
    else:
        raise ValueError(f"sluice: checkpoint_id must be 'STORE/NAME@STEP', 'NAME@STEP' or "
                         f"(name, step), not {checkpoint_id!r}")
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


class _Staged:
    """A save whose bytes an async stage() already put into staging."""

    def __init__(self, name, step, handle, results, metadata, world):
        self.name, self.step, self.world = name, step, world
        self.handle = handle
        self.results = {r.index: r for r in results}
        self.metadata = metadata


class StorageWriter(dcp.StorageWriter, _AsyncStager):
    """Writes a DCP save as sluice checkpoint `name`@`step` of `store` (a URI
    or a list of tier URIs, fastest first), or as the checkpoint_id DCP
    passes ("STORE/NAME@STEP", or "NAME@STEP" for this writer's store).
    After dcp.save returns, the checkpoint is committed on the fastest tier;
    `handle` (this rank's sluice.SaveHandle) tells when later tiers have it.

    It is also DCP's AsyncStager: dcp.async_save with this writer copies the
    state once, into sluice's staging arena, before it returns (see
    async_save() below)."""

    # dcp.async_save returns once stage() did: the copy is complete by then.
    _synchronize_after_execute = False

    def __init__(self, store=None, name=None, step=None, *, checkpoint_id=None,
                 process_group=None, no_dist=False, incremental=True):
        super().__init__()
        # Chunks unchanged since the newest committed step of the name are
        # referenced there, per rank, instead of written (sluice.save's
        # incremental); False writes every chunk.
        self.incremental = bool(incremental)
        # What stage() plans over: the group (None: the default one) and
        # whether the save is of this process alone, as given to dcp.async_save.
        self.process_group = process_group
        self.no_dist = no_dist
        self.store = store
        self.name = name
        self.step = None if step is None else _check_step(step)
        self.handle = None
        self._is_coordinator = False
        self._rank = None
        self._use_collectives = True
        self._global_plans = None
        self._stored_metadata = None
        self._staged = None
        if checkpoint_id is not None:
            self.reset(checkpoint_id)

    def _set_id(self, checkpoint_id):
        store, name, step = parse_checkpoint_id(checkpoint_id)
        if step in _LATEST:
            raise ValueError(f"sluice: a save needs a step number, not '{step}' ({checkpoint_id!r})")
        if store is not None:
            self.store = store
        self.name, self.step = name, step

    def _require_id(self):
        if self.store is None or self.name is None or self.step is None:
            raise ValueError("sluice.torch.StorageWriter: no checkpoint to write: give "
                             "StorageWriter(store, name, step) or checkpoint_id='STORE/NAME@STEP'")

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self._set_id(checkpoint_id)
        staged = self._staged
        if staged is not None and (staged.name, staged.step) != (self.name, self.step):
            self._staged = None  # it commits as staged; this save is refused
            raise RuntimeError(f"sluice.torch.StorageWriter: staged {staged.name}@{staged.step} "
                               f"but DCP now saves {self.name}@{self.step}")
        self.handle = staged.handle if staged is not None else None
        self._global_plans = None
        self._stored_metadata = staged.metadata if staged is not None else None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            _, _, step = parse_checkpoint_id(checkpoint_id)
            return step not in _LATEST
        except (ValueError, TypeError):
            return False

    def set_up_storage_writer(self, is_coordinator, *args, rank=None, use_collectives=True,
                              **kwargs):
        self._require_id()
        self._is_coordinator = is_coordinator
        self._rank = rank
        self._use_collectives = use_collectives
        pipeline(self.store)  # open (or reuse) now: a bad store fails in planning, on every rank

    def storage_meta(self):
        self._require_id()
        return _storage_meta(self.name, self.step)

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        self._global_plans = plans
        if not self._use_collectives:
            # Each rank plans alone (DCP hands it its own plan only).
            rank, world = _dist_world(self.process_group)
            rank = self._rank if self._rank is not None else rank
            return [dataclasses.replace(plans[0], storage_data=_RankAssignment(
                rank, world, _attempt_from_environment(), False))]
        attempt = uuid.uuid4().hex
        return [dataclasses.replace(p, storage_data=_RankAssignment(rank, len(plans), attempt, True))
                for rank, p in enumerate(plans)]

    def write_data(self, plan, planner):
        staged, self._staged = self._staged, None
        if staged is not None:
            return self._write_staged(staged, plan)
        assignment = plan.storage_data
        if not isinstance(assignment, _RankAssignment):
            raise RuntimeError("sluice.torch.StorageWriter: the plan carries no rank assignment "
                               "(prepare_global_plan of this writer did not run on the coordinator)")
        try:
            pending, results = self._stage(plan, planner, assignment)
        except Exception as error:
            _agree_before_writing(assignment, error)
            raise
        try:
            _agree_before_writing(assignment, None)
        except BaseException:
            pending.abandon()  # a peer failed: its writer lock and staging slot go now
            raise
        self.handle = pending.snapshot()
        _backlog.warn_if_behind(pipeline(self.store), self.handle.backlog())
        # Committed on tier 0: on rank 0 it published the commit record, on
        # the others the commit record lists their manifest.
        self.handle.wait(tier=0)
        future = torch.futures.Future()
        future.set_result(results)
        return future

    def _write_staged(self, staged, plan):
        """write_data of a save stage() already snapshotted: its bytes are on
        their way; the plan DCP made since must be the one staged."""
        if not self._use_collectives and staged.world > 1:
            raise RuntimeError(
                f"sluice.torch.StorageWriter: stage() planned {staged.name}@{staged.step} over "
                f"{staged.world} ranks together, but DCP saves it with use_collectives=False; "
                f"sluice's staging needs the collective plan (the staged save commits as planned)")
        missing = [item.index.fqn for item in plan.items if item.index not in staged.results]
        if missing:
            raise RuntimeError(
                f"sluice.torch.StorageWriter: DCP planned items that stage() did not stage "
                f"({', '.join(sorted(set(missing))[:5])}): a custom planner cannot be used with "
                f"sluice's staging; pass none, or stage with DCP's default stager")
        self.handle = staged.handle
        self.handle.wait(tier=0)
        future = torch.futures.Future()
        future.set_result([staged.results[item.index] for item in plan.items])
        return future

    def _stage(self, plan, planner, assignment):
        # A collective save's attempt id is a fresh uuid: a rank that gives up
        # can tell the others at once (an abort note).
        p = pipeline(self.store)
        pending = _state_dict.Staging(p, p.begin(self.name, self.step, assignment.rank, assignment.world,
                                                 assignment.attempt, attempt_is_unique=assignment.collective,
                                                 incremental=self.incremental))
        try:
            return self._add_items(pending, plan, planner, assignment)
        except BaseException:
            # At once, not whenever the traceback (which holds `pending`)
            # goes: abandoning releases the save's writer lock.
            pending.abandon()
            raise

    def _add_items(self, pending, plan, planner, assignment):
        results = []
        for item in plan.items:
            key = storage_key(item.index, None if assignment.collective else assignment.rank)
            data = planner.resolve_data(item)
            if item.type == _planner.WriteItemType.BYTE_IO:
                view = data.getbuffer()
                pending.add_buffer(key, b'{"bytes":true}', view)
                size = view.nbytes
            else:
                _state_dict.check_tensor(data, f"'{item.index.fqn}'")
                tensor = _state_dict.host_bytes_of(data)
                size = pending.add_tensor(key, _state_dict.tensor_metadata(tensor), tensor)
            results.append(_WriteResult(index=item.index, size_in_bytes=size, storage_data=key))
        if assignment.collective:
            if self._is_coordinator:
                metadata = self._metadata_for(planner)
                pending.add_buffer(METADATA_KEY, b'{"format":"torch.dcp.metadata/pickle"}',
                                   pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL))
                self._stored_metadata = metadata
        else:
            metadata = self._metadata_for(planner, assignment.rank)
            pending.add_buffer(f"{_RANK_METADATA_PREFIX}{assignment.rank}",
                               b'{"format":"torch.dcp.metadata/pickle","part":true}',
                               pickle.dumps(metadata, protocol=pickle.HIGHEST_PROTOCOL))
            self._stored_metadata = metadata
        return pending, results

    def finish(self, metadata, results):
        if self._stored_metadata is None:
            raise RuntimeError("sluice.torch.StorageWriter.finish: this rank stored no metadata "
                               "(finish runs on the coordinator after its write_data)")
        if (metadata is not self._stored_metadata and
                metadata.state_dict_metadata != self._stored_metadata.state_dict_metadata):
            raise RuntimeError(
                f"sluice.torch.StorageWriter: the planner changed the checkpoint metadata after "
                f"global planning; {self.name}@{self.step} holds the metadata as planned")

    def _metadata_for(self, planner, rank=None):
        metadata = getattr(planner, "metadata", None)
        if not isinstance(metadata, _metadata.Metadata):
            if self._global_plans is None:
                raise RuntimeError("sluice.torch.StorageWriter: no global plan seen on the "
                                   "coordinator")
            metadata = _metadata_from_plans(self._global_plans)
        # Every stored item, whichever rank wrote it; keys follow from the
        # index alone.
        metadata.storage_data = {item.index: storage_key(item.index, rank)
                                 for p in (self._global_plans or []) for item in p.items}
        return metadata

    # AsyncStager ---------------------------------------------------------
    def stage(self, state_dict):
        """Copies `state_dict` into sluice's staging arena and returns it: the
        tensors may change once this returns. Plans the save the way dcp.save
        will (DCP's default planner; in a process group, over
        `self.process_group` from this thread: gather the local plans to its
        rank 0, scatter the global plan, agree that every rank could stage)
        and snapshots it; the DCP save that async_save then runs in the
        background finds its bytes staged and waits for the commit. Give the
        writer the process_group and no_dist you give dcp.async_save
        (sluice.torch.async_save does)."""
        self._require_id()
        if self._staged is not None:
            raise RuntimeError(f"sluice.torch.StorageWriter: {self._staged.name}@{self._staged.step} "
                               f"is staged and its DCP save has not run yet; use one writer per "
                               f"save in flight")
        group = self.process_group
        rank, world = (0, 1) if self.no_dist else _dist_world(group)
        if world > 1 and threading.current_thread() is not threading.main_thread():
            # Collectives here would interleave with the training thread's.
            _warn_once("sluice.torch: stage() off the main thread in a process group copies the "
                       "state twice (to CPU memory now, to staging in the background)")
            return _cpu_copy(state_dict)
        planner = dcp.DefaultSavePlanner()
        planner.set_up_planner(state_dict=state_dict, storage_meta=self.storage_meta(),
                               is_coordinator=rank == 0)
        self.set_up_storage_writer(rank == 0, rank=rank, use_collectives=True)
        local = self.prepare_local_plan(planner.create_local_plan())
        plan = planner.finish_plan(self._plan_globally(planner, local, rank, world, group))
        assignment = plan.storage_data
        try:
            pending, results = self._stage(plan, planner, assignment)
        except Exception as error:
            _agree_before_writing(assignment, error, group)
            raise
        try:
            _agree_before_writing(assignment, None, group)
        except BaseException:
            pending.abandon()
            raise
        handle = pending.snapshot()
        _backlog.warn_if_behind(pipeline(self.store), handle.backlog())
        self._staged = _Staged(self.name, self.step, handle, results, self._stored_metadata, world)
        self.handle = handle
        return state_dict

    def _plan_globally(self, planner, local, rank, world, group):
        """This rank's part of the global plan, as DCP's coordinator makes it."""
        if world == 1:
            plans, _ = planner.create_global_plan([local])
            return self.prepare_global_plan(plans)[0]
        dist = torch.distributed
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(local, gathered, group=group, group_dst=0)
        parts = None
        if rank == 0:
            try:
                plans, _ = planner.create_global_plan(gathered)
                parts = self.prepare_global_plan(plans)
            except Exception as error:
                parts = [f"{type(error).__name__}: {error}"] * world
                dist.scatter_object_list([None], parts, group=group, group_src=0)
                raise
        mine = [None]
        dist.scatter_object_list(mine, parts, group=group, group_src=0)
        if isinstance(mine[0], str):
            raise RuntimeError(f"sluice.torch.StorageWriter: rank 0 could not plan the save "
                               f"({mine[0]}); nothing was written")
        return mine[0]

    def synchronize_staging(self):
        """Nothing to wait for: stage() returns once the copy is complete."""

    def close(self):
        """Nothing to release: the staging arena belongs to the process's
        pipeline (sluice.close() ends it)."""


_warned = set()


def _warn_once(message):
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _cpu_copy(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return {k: _cpu_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cpu_copy(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_cpu_copy(v) for v in obj)
    return obj


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, **kwargs):
    """dcp.async_save with sluice's staging: copies the state once, into
    sluice's staging arena, and returns what dcp.async_save returns (a Future
    of the checkpoint's Metadata, done once every rank's save is committed
    on the fastest tier). `checkpoint_id` ("STORE/NAME@STEP") names the
    checkpoint; `storage_writer` (a sluice StorageWriter) is made from it
    when not given. Other keyword arguments go to dcp.async_save; its
    process_group and no_dist also tell stage() whom to plan with. A custom
    planner, or use_collectives=False over several ranks, is refused before
    anything is staged: sluice's staging plans with DCP's default planner,
    collectively."""
    if kwargs.get("planner") is not None:
        raise ValueError("sluice.torch.async_save: a custom planner cannot be combined with "
                         "sluice's staging (it plans as DCP's DefaultSavePlanner does)")
    if storage_writer is None:
        storage_writer = StorageWriter(checkpoint_id=checkpoint_id)
    elif not isinstance(storage_writer, StorageWriter):
        raise TypeError("sluice.torch.async_save: storage_writer must be a "
                        "sluice.torch.StorageWriter")
    elif checkpoint_id is not None:
        storage_writer.reset(checkpoint_id)
    storage_writer.process_group = kwargs.get("process_group")
    storage_writer.no_dist = bool(kwargs.get("no_dist", False))
    if kwargs.get("use_collectives", True) is False and not storage_writer.no_dist and \
            _dist_world(storage_writer.process_group)[1] > 1:
        raise ValueError("sluice.torch.async_save: use_collectives=False over several ranks is not "
                         "supported with sluice's staging; use dcp.save with it, or collectives")
    return dcp.async_save(state_dict, checkpoint_id=checkpoint_id,
                          storage_writer=storage_writer, **kwargs)


def _chunk_bytes():
    from . import _options
    return _options["chunk_bytes"]


def _merge_rank_metadata(parts):
    """One Metadata from the per-rank metadata of a save made without
    collectives: every rank's chunks of each tensor (each chunk once), rank
    0's planner data."""
    state = {}
    storage_data = {}
    for part in parts:
        for fqn, entry in part.state_dict_metadata.items():
            have = state.get(fqn)
            if have is None or not isinstance(entry, _metadata.TensorStorageMetadata):
                if have is None:
                    state[fqn] = dataclasses.replace(entry, chunks=list(entry.chunks)) \
                        if isinstance(entry, _metadata.TensorStorageMetadata) else entry
                continue
            seen = {(tuple(c.offsets), tuple(c.sizes)) for c in have.chunks}
            for chunk in entry.chunks:
                if (tuple(chunk.offsets), tuple(chunk.sizes)) not in seen:
                    have.chunks.append(chunk)
        storage_data.update(part.storage_data or {})
    return _metadata.Metadata(state_dict_metadata=state, planner_data=parts[0].planner_data,
                              storage_data=storage_data, storage_meta=parts[0].storage_meta)


class StorageReader(dcp.StorageReader):
    """Reads a DCP checkpoint that StorageWriter wrote: name@step of `store`
    (step 'latest' for the newest), or the checkpoint_id DCP passes
    ("STORE/NAME@STEP" or "STORE/NAME@latest"). Each read item is served by a
    byte-range read of the chunks it overlaps, checksums verified."""

    def __init__(self, store=None, name=None, step="latest", *, checkpoint_id=None):
        super().__init__()
        self.store = store
        self.name = name
        self.step = step if step in _LATEST else _check_step(step)
        self._reader = None
        self._items = None
        self._metadata = None
        # Bytes of tensor data read_data asked the store for (each request
        # reads and verifies the chunks it overlaps): what a resharded load
        # costs this rank.
        self.bytes_requested = 0
        if checkpoint_id is not None:
            self.reset(checkpoint_id)

    def reset(self, checkpoint_id=None):
        self.bytes_requested = 0
        if checkpoint_id is not None:
            store, self.name, self.step = parse_checkpoint_id(checkpoint_id)
            if store is not None:
                self.store = store
        self._reader = None
        self._items = None
        self._metadata = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            parse_checkpoint_id(checkpoint_id)
            return True
        except (ValueError, TypeError):
            return False

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self._open()
        if metadata is not None:
            self._metadata = metadata

    def storage_meta(self):
        return _storage_meta(self.name, self.step)

    def _open(self):
        if self._reader is None:
            if self.store is None or self.name is None:
                raise ValueError("sluice.torch.StorageReader: no checkpoint to read: give "
                                 "StorageReader(store, name, step) or checkpoint_id="
                                 "'STORE/NAME@STEP'")
            p = pipeline(self.store, _reading=True)
            try:
                self._reader = p.open(self.name, None if self.step in _LATEST else self.step)
            except _sluice.CorruptionError as e:
                # A damaged newest step is never skipped unless asked for.
                if self.step != "latest-good":
                    raise
                good = p.latest_good_step(self.name)
                warnings.warn(f"sluice.torch.StorageReader: {e}; reading {self.name}@{good}, the newest "
                              f"intact step", stacklevel=2)
                self._reader = p.open(self.name, good)
            items = {key: (metadata, size) for key, metadata, size, _ in self._reader.items()}
            if METADATA_KEY not in items and not any(k.startswith(_RANK_METADATA_PREFIX) for k in items):
                info = self._reader.info
                self._reader = None
                raise ValueError(f"sluice: {info['name']}@{info['step']} is not a DCP checkpoint "
                                 f"(no '{METADATA_KEY}' item); read it with sluice.load")
            self._items = items
        return self._reader

    def read_metadata(self):
        reader = self._open()
        if METADATA_KEY in self._items:
            self._metadata = pickle.loads(reader.read_bytes(METADATA_KEY))
            return self._metadata
        parts = sorted((k for k in self._items if k.startswith(_RANK_METADATA_PREFIX)),
                       key=lambda k: int(k[len(_RANK_METADATA_PREFIX):]))
        self._metadata = _merge_rank_metadata([pickle.loads(reader.read_bytes(k)) for k in parts])
        return self._metadata

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def _key_of(self, index):
        """Where the item at `index` is stored: the metadata says (a save
        without collectives keeps each rank's copy under its rank); else the
        key follows from the index."""
        stored = getattr(self._metadata, "storage_data", None) if self._metadata is not None else None
        if isinstance(stored, dict) and index in stored:
            return stored[index]
        return storage_key(index)

    def read_data(self, plan, planner):
        reader = self._open()
        for item in plan.items:
            key = self._key_of(item.storage_index)
            if key not in self._items:
                raise ValueError(f"sluice: {self.name}@{self.step} has no item '{key}' "
                                 f"for {item.storage_index.fqn}")
            if item.type == _planner.LoadItemType.BYTE_IO:
                planner.load_bytes(item, io.BytesIO(reader.read_bytes(key)))
                continue
            target = planner.resolve_tensor(item)
            self._read_tensor_region(key, item, target)
            planner.commit_tensor(item, target)
        future = torch.futures.Future()
        future.set_result(None)
        return future

    def _read_tensor_region(self, key, item, target):
        """Reads the region (storage_offsets, lengths) of the stored chunk
        `key` into `target`, reading only the bytes that span it."""
        metadata, _ = self._items[key]
        meta = json.loads(metadata)
        dtype = _state_dict._DTYPES[meta["dtype"]]
        shape = [int(d) for d in meta["shape"]]
        offsets = [int(o) for o in item.storage_offsets]
        lengths = [int(n) for n in item.lengths]
        if list(target.shape) != lengths:
            raise ValueError(f"sluice: read of '{key}': destination {list(target.shape)}, "
                             f"read {lengths}")
        element = torch.tensor([], dtype=dtype).element_size()
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        count = 1
        for n in lengths:
            count *= n
        if count == 0:
            return
        first = sum(o * s for o, s in zip(offsets, strides))
        last = sum((o + n - 1) * s for o, n, s in zip(offsets, lengths, strides))
        span = last - first + 1  # elements from the region's first to its last
        direct = (target.device.type == "cpu" and target.dtype == dtype and target.is_contiguous()
                  and not target.is_conj() and not target.is_neg())
        if not shape:  # a scalar: one element, into a buffer when it cannot go direct
            if direct:
                self._reader.read_range(key, 0, target.data_ptr(), element)
            else:
                buffer = torch.empty((), dtype=dtype)
                self._reader.read_range(key, 0, buffer.data_ptr(), element)
                with torch.no_grad():
                    target.copy_(buffer)
            self.bytes_requested += element
            return
        if span == count and direct:
            # The region is one run of storage: straight into the destination.
            self._reader.read_range(key, first * element, target.data_ptr(), count * element)
            self.bytes_requested += count * element
            return
        # The region is runs of storage (one per index of the dimensions
        # before its contiguous tail). Runs closer than a chunk are read as
        # one: every chunk they touch is read and verified whole anyway.
        # Farther apart, each group is read alone, so chunks that hold
        # nothing of the region are never fetched.
        tail = len(shape) - 1
        while tail > 0 and offsets[tail] == 0 and lengths[tail] == shape[tail]:
            tail -= 1
        run = lengths[tail] * strides[tail]
        starts = torch.tensor([first], dtype=torch.int64)
        for d in range(tail):
            starts = (starts[:, None] + torch.arange(lengths[d], dtype=torch.int64) * strides[d]).reshape(-1)
        ends = starts + run
        gaps = starts[1:] - ends[:-1]
        cuts = (torch.nonzero(gaps * element >= _chunk_bytes()).flatten() + 1).tolist()
        buffer = torch.empty(span, dtype=dtype)
        for a, b in zip([0] + cuts, cuts + [len(starts)]):
            lo, hi = int(starts[a]), int(ends[b - 1])
            self._reader.read_range(key, lo * element, buffer.data_ptr() + (lo - first) * element,
                                    (hi - lo) * element)
            self.bytes_requested += (hi - lo) * element
        region = buffer.as_strided(lengths, strides) if lengths else buffer.view(())
        with torch.no_grad():
            target.copy_(region)
