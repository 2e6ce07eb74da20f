"""PyTorch Distributed Checkpoint (DCP) storage on sluice.

    from sluice.torch import StorageWriter, StorageReader, dcp
    dcp.save_state_dict(state_dict, storage_writer=StorageWriter("/data/ckpt", "run1", step))
    dcp.load_state_dict(state_dict, storage_reader=StorageReader("/data/ckpt", "run1", step))

`dcp` is torch.distributed.checkpoint, or on torch 1.13
torch.distributed._shard.checkpoint, imported so that it works on Python 3.11
(see _dcp_import.py).

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
"""

import dataclasses
import io
import json
import pickle
import re
import threading
import uuid

import torch

from . import _state_dict, pipeline
from ._dcp_import import import_checkpoint_module

dcp = import_checkpoint_module()
_metadata = dcp.metadata
_planner = dcp.planner

METADATA_KEY = "dcp.metadata"
_KEY_PREFIX = "dcp/"

__all__ = ["StorageWriter", "StorageReader", "dcp"]


def storage_key(index):
    """The sluice item key of the DCP item at `index` (a MetadataIndex):
    deterministic, so every rank and every reader computes the same one."""
    fqn = _state_dict._escape_component(index.fqn)
    if index.offset is None:
        return f"{_KEY_PREFIX}{fqn}"
    return f"{_KEY_PREFIX}{fqn}@{'_'.join(str(int(o)) for o in index.offset)}"


@dataclasses.dataclass(frozen=True)
class _RankAssignment:
    """What the coordinator tells each rank in its plan's storage_data."""
    rank: int
    world: int
    attempt: str  # one id per save, so sluice never mixes ranks of two launches


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


def _parse_checkpoint_id(checkpoint_id):
    """(name, step) from "name@step", (name, step) or {"name":..., "step":...}."""
    if isinstance(checkpoint_id, (tuple, list)) and len(checkpoint_id) == 2:
        name, step = checkpoint_id
    elif isinstance(checkpoint_id, dict):
        name, step = checkpoint_id.get("name"), checkpoint_id.get("step")
    elif isinstance(checkpoint_id, str) and re.fullmatch(r".+@\d+", checkpoint_id):
        name, _, step = checkpoint_id.rpartition("@")
    else:
        raise ValueError(f"sluice: checkpoint_id must be 'name@step' or (name, step), not "
                         f"{checkpoint_id!r}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"sluice: bad checkpoint name in {checkpoint_id!r}")
    step = int(step)
    if step < 0:
        raise ValueError(f"sluice: bad step in {checkpoint_id!r}")
    return name, step


def _storage_meta(name, step):
    storage_meta_class = getattr(dcp.metadata, "StorageMeta", None)
    if storage_meta_class is None:  # torch < 2.4 has no StorageMeta
        return None
    return storage_meta_class(checkpoint_id=f"{name}@{step}")


def _check_step(step):
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"sluice: step must be a non-negative int, not {step!r}")
    return step


def _agree_before_writing(assignment, error):
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
    if (assignment.world > 1 and dist.is_available() and dist.is_initialized()
            and dist.get_world_size() == assignment.world
            and threading.current_thread() is threading.main_thread()):
        said = [None] * assignment.world
        dist.all_gather_object(said, None if error is None else f"{type(error).__name__}: {error}")
        failed = [(rank, why) for rank, why in enumerate(said) if why is not None]
        if error is None and failed:
            raise RuntimeError("sluice.torch.StorageWriter: rank(s) "
                               + ", ".join(f"{r} ({why})" for r, why in failed)
                               + " could not stage their items; nothing was written or committed")


class StorageWriter(dcp.StorageWriter):
    """Writes a DCP save as sluice checkpoint `name`@`step` of `store` (a URI
    or a list of tier URIs, fastest first). After save_state_dict returns,
    the checkpoint is committed on the fastest tier; `handle` (this rank's
    sluice.SaveHandle) tells when later tiers have it."""

    def __init__(self, store, name, step):
        super().__init__()
        self.store = store
        self.name = name
        self.step = _check_step(step)
        self.handle = None
        self._is_coordinator = False
        self._global_plans = None
        self._stored_metadata = None

    # torch >= 2.x names -------------------------------------------------
    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.name, self.step = _parse_checkpoint_id(checkpoint_id)
        self.handle = None
        self._global_plans = None
        self._stored_metadata = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        try:
            _parse_checkpoint_id(checkpoint_id)
            return True
        except (ValueError, TypeError):
            return False

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        self.init(is_coordinator)

    def storage_meta(self):
        return _storage_meta(self.name, self.step)

    # the torch 1.13 interface --------------------------------------------
    def init(self, is_coordinator):
        self._is_coordinator = is_coordinator
        pipeline(self.store)  # open (or reuse) now: a bad store fails in planning, on every rank

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        self._global_plans = plans
        attempt = uuid.uuid4().hex
        return [dataclasses.replace(p, storage_data=_RankAssignment(rank, len(plans), attempt))
                for rank, p in enumerate(plans)]

    def write_data(self, plan, planner):
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
        self.handle = _state_dict.SaveHandle(pending.snapshot())
        # Committed on tier 0: on rank 0 it published the commit record, on
        # the others the commit record lists their manifest.
        self.handle.wait(tier=0)
        future = torch.futures.Future()
        future.set_result(results)
        return future

    def _stage(self, plan, planner, assignment):
        pending = pipeline(self.store).begin(self.name, self.step, assignment.rank,
                                             assignment.world, assignment.attempt)
        try:
            return self._add_items(pending, plan, planner)
        except BaseException:
            # At once, not whenever the traceback (which holds `pending`)
            # goes: abandoning releases the save's writer lock.
            pending.abandon()
            raise

    def _add_items(self, pending, plan, planner):
        results = []
        for item in plan.items:
            key = storage_key(item.index)
            data = planner.resolve_data(item)
            if item.type == _planner.WriteItemType.BYTE_IO:
                view = data.getbuffer()
                pending.add_buffer(key, b'{"bytes":true}', view)
                size = view.nbytes
            else:
                _state_dict.check_tensor(data, f"'{item.index.fqn}'")
                tensor = _state_dict.host_bytes_of(data)
                size = tensor.numel() * tensor.element_size()
                pending.add_address(key, _state_dict.tensor_metadata(tensor), tensor.data_ptr(),
                                    size, tensor)
            results.append(dcp.storage.WriteResult(index=item.index, size_in_bytes=size,
                                                   storage_data=key))
        if self._is_coordinator:
            metadata = self._metadata_for(planner)
            pending.add_buffer(METADATA_KEY, b'{"format":"torch.dcp.metadata/pickle"}',
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

    def _metadata_for(self, planner):
        metadata = getattr(planner, "metadata", None)
        if not isinstance(metadata, _metadata.Metadata):
            if self._global_plans is None:
                raise RuntimeError("sluice.torch.StorageWriter: no global plan seen on the "
                                   "coordinator")
            metadata = _metadata_from_plans(self._global_plans)
        # Every stored item, whichever rank wrote it; keys follow from the
        # index alone.
        metadata.storage_data = {item.index: storage_key(item.index)
                                 for p in (self._global_plans or []) for item in p.items}
        return metadata


class StorageReader(dcp.StorageReader):
    """Reads a DCP checkpoint that StorageWriter wrote (name@step of `store`;
    step 'latest' for the newest). Each read item is served by a byte-range
    read of the chunks it overlaps, checksums verified."""

    def __init__(self, store, name, step="latest"):
        super().__init__()
        self.store = store
        self.name = name
        self.step = step if step == "latest" else _check_step(step)
        self._reader = None
        self._items = None
        self._metadata = None

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.name, self.step = _parse_checkpoint_id(checkpoint_id)
        self._reader = None
        self._items = None
        self._metadata = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return StorageWriter.validate_checkpoint_id(checkpoint_id)

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.init(metadata, is_coordinator)

    def storage_meta(self):
        return _storage_meta(self.name, self.step)

    def _open(self):
        if self._reader is None:
            step = None if self.step == "latest" else self.step
            self._reader = pipeline(self.store, _reading=True).open(self.name, step)
            self._items = {key: (metadata, size) for key, metadata, size, _ in self._reader.items()}
        return self._reader

    def read_metadata(self):
        reader = self._open()
        if METADATA_KEY not in self._items:
            info = reader.info
            raise ValueError(f"sluice: {info['name']}@{info['step']} is not a DCP checkpoint "
                             f"(no '{METADATA_KEY}' item); read it with sluice.load")
        self._metadata = pickle.loads(reader.read_bytes(METADATA_KEY))
        return self._metadata

    def init(self, metadata, is_coordinator):
        self._open()

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        reader = self._open()
        for item in plan.items:
            key = storage_key(item.storage_index)
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
        if span == count and target.dtype == dtype and target.is_contiguous():
            # The region is one run of storage: straight into the destination.
            self._reader.read_range(key, first * element, target.data_ptr(), count * element)
            return
        buffer = torch.empty(span, dtype=dtype)
        self._reader.read_range(key, first * element, buffer.data_ptr(), span * element)
        region = buffer.as_strided(lengths, strides) if lengths else buffer.view(())
        with torch.no_grad():
            target.copy_(region)
