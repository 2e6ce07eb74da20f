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
import pickle
import threading
import uuid
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import metadata as _metadata
from torch.distributed.checkpoint import planner as _planner
from torch.distributed.checkpoint.staging import AsyncStager as _AsyncStager
from torch.distributed.checkpoint.storage import WriteResult as _WriteResult

from . import _backlog, _peer, _state_dict, pipeline

from ._dcp_common import METADATA_KEY, parse_checkpoint_id, storage_key  # noqa: F401 (re-exported)
from ._dcp_common import (_LATEST, _RANK_METADATA_PREFIX, _RankAssignment,
                          _agree_before_writing, _attempt_from_environment, _check_step,
                          _dist_world, _metadata_from_plans, _storage_meta)
from ._dcp_reader import StorageReader

__all__ = ["StorageWriter", "StorageReader", "async_save", "parse_checkpoint_id", "dcp"]


class _Staged:
    """A save whose bytes an async stage() already put into staging. In the
    process that staged it, `handle` is the save's SaveHandle; in a copy of
    the writer (DCP's checkpoint process) it is None, and the save was
    already committed on tier 0 when the copy was made."""

    def __init__(self, name, step, handle, results, metadata, world):
        self.name, self.step, self.world = name, step, world
        self.handle = handle
        self.results = {r.index: r for r in results}
        self.metadata = metadata


class _Planned:
    """What stage() hands back to DCP in place of one state-dict entry: the
    write items stage() planned for it on this rank, with no data. DCP's
    planner asks it for its items (the `__create_write_items__` protocol
    that DTensor uses), so the save DCP then runs, in a thread or in its
    checkpoint process, plans exactly what was staged, and pickling it for
    that process costs nothing: the bytes are already in sluice's staging."""

    def __init__(self, items):
        self.items = items

    def __create_write_items__(self, fqn, obj):
        return list(self.items)


def _planned_state_dict(plan):
    """A flat state dict of `_Planned` stand-ins, one per planned fqn."""
    by_fqn = {}
    for item in plan.items:
        by_fqn.setdefault(item.index.fqn, []).append(item)
    return {fqn: _Planned(items) for fqn, items in by_fqn.items()}


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
                 process_group=None, no_dist=False, incremental=True, async_staging=False,
                 complete_on="durable"):
        super().__init__()
        # What write_data (dcp.save's return) waits for: "durable" (committed
        # on tier 0, or with tier0_per_host on the shared tier), or "safe"
        # (with peer_replicas: the peer commit, doc/peer.md).
        if complete_on not in ("durable", "safe"):
            raise ValueError(f"sluice.torch.StorageWriter: complete_on must be 'durable' or 'safe', "
                             f"not {complete_on!r}")
        self.complete_on = complete_on
        self._peers = None
        # True: stage() returns a Future, so dcp.async_save returns an
        # AsyncSaveResponse whose staging_completion resolves once the
        # snapshot is in staging. The snapshot is then lazy (sluice.save's
        # snapshot="lazy"): stage() returns before the large tensors are
        # copied, an optimizer's step waits for the ones it owns, and any
        # other in-place change must wait for staging_completion.
        self.async_staging = bool(async_staging)
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
        if self._staged is None:
            # Open (or reuse) now: a bad store fails in planning, on every
            # rank. A staged save has its store open where it was staged.
            pipeline(self.store)
        self._peers = _peer.open_for_store(self.store)
        if self.complete_on == "safe" and self._peers is None and self._staged is None:
            raise ValueError("sluice.torch.StorageWriter: complete_on='safe' needs peer replicas "
                             "(sluice.configure(tier0_per_host=True, peer_replicas=1)) in a multi-process job")

    def __getstate__(self):
        """A copy for another process (DCP's AsyncCheckpointerType.PROCESS
        pickles the writer into its checkpoint process): no handle, no
        process group; the store is opened there, lazily, by the save that
        runs there. A save stage() made here is handed over: pickling waits
        until it is committed on tier 0 (raising its error if it failed), and
        the copy carries its outcome, so that process reports exactly what
        happened here."""
        state = self.__dict__.copy()
        state["handle"] = None
        state["process_group"] = None
        state["_peers"] = None  # replication runs in the process that staged
        staged = self._staged
        if staged is not None and staged.handle is not None:
            self._staged = None  # handed over: the copy finishes this save
            staged.handle.wait(tier=0)
            state["_staged"] = _Staged(staged.name, staged.step, None, staged.results.values(),
                                       staged.metadata, staged.world)
        return state

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
        self._replicate(self.handle, assignment)
        self._wait_complete(self.handle)
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
        if staged.handle is not None:
            self.handle = staged.handle
            self._wait_complete(self.handle)
        future = torch.futures.Future()
        future.set_result([staged.results[item.index] for item in plan.items])
        return future

    def _replicate(self, handle, assignment):
        """With peer replicas: hands this rank's part to the peer thread,
        which sends it once tier 0 holds it (doc/peer.md)."""
        if self._peers is not None:
            handle._peer = _peer.replicate(self._peers, handle._handle, self.name, self.step,
                                           assignment.attempt)

    def _wait_complete(self, handle):
        """What dcp.save's return (and async_save's upload_completion) means:
        safe with complete_on='safe', else committed on tier 0 (on rank 0 it
        published the commit record, on the others the commit record lists
        their manifest; with tier0_per_host, on the shared tier)."""
        if self.complete_on == "safe":
            handle.wait_safe()
        else:
            handle.wait(tier=0)

    def _stage(self, plan, planner, assignment, lazy=False):
        # A collective save's attempt id is a fresh uuid: a rank that gives up
        # can tell the others at once (an abort note).
        p = pipeline(self.store)
        pending = _state_dict.Staging(p, p.begin(self.name, self.step, assignment.rank, assignment.world,
                                                 assignment.attempt, attempt_is_unique=assignment.collective,
                                                 incremental=self.incremental),
                                      lazy=lazy, label=f"{self.name}@{self.step}")
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
        """Copies `state_dict` into sluice's staging arena: the tensors may
        change once this returns (with async_staging=True, once the returned
        Future is done, or, for what an optimizer owns, at its next step). Plans the save the way dcp.save will (DCP's
        default planner; in a process group, over `self.process_group` from
        this thread: gather the local plans to its rank 0, scatter the global
        plan, agree that every rank could stage) and snapshots it. Returns a
        state dict of stand-ins that carry the plan and no data (a Future of
        it with async_staging=True): the DCP save that async_save then runs
        in the background, in a thread or in DCP's checkpoint process, plans
        the same items, finds their bytes staged and waits for the commit.
        Give the writer the process_group and no_dist you give
        dcp.async_save (sluice.torch.async_save does)."""
        staged = self._stage_now(state_dict)
        if not self.async_staging:
            return staged
        from concurrent.futures import Future
        future = Future()
        # A lazy copy resolves it from the thread that finishes the copy (a
        # copy that failed or was changed too early fails the upload, not
        # this future); an eager one is staged already.
        self.handle.when_staged(lambda: future.set_result(staged))
        return future

    def _stage_now(self, state_dict):
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
            pending, results = self._stage(plan, planner, assignment, lazy=self.async_staging)
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
        self._replicate(handle, assignment)
        self._staged = _Staged(self.name, self.step, handle, results, self._stored_metadata, world)
        self.handle = handle
        return _planned_state_dict(plan)

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
        """Waits until the last stage() is in staging: at once, except for a
        lazy one (async_staging=True)."""
        if self.handle is not None:
            self.handle.wait_staged()

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
