"""Loads that read each stored byte once per job: when several ranks of a
DCP load want the same region of a stored item (a DDP model, the replicated
optimizer state of HSDP), one of them reads it from the store and the
others receive it over the process group (sluice.torch.StorageReader).

How the split is chosen: the coordinator sees every rank's load plan in
prepare_global_plan. A region is an item's (storage index, offsets,
lengths); one that two or more ranks want is shared. Each shared region
gets one owner among the ranks that want it: regions largest first, each
to the wanting rank that owns the fewest bytes so far, so the reads spread
evenly. Owned regions are grouped into batches of up to _BATCH_BYTES per
owner. Every rank gets the same schedule in its plan's storage_data.

In read_data each rank first reads what it alone wants and what it owns,
then every rank says whether that worked (all_gather_object: a rank that
failed fails every rank at once, instead of leaving them waiting in a
broadcast), then each batch is broadcast from its owner, in schedule order,
and each rank copies out the regions it wants. Ranks that want different
regions of one item (a resharded load) read their own, as before. A batch
goes to every rank of the group, including ranks that want none of it:
store bytes are read once, network bytes are not minimised.

Used only when the default process group is exactly the load's ranks and
the load runs on the main thread (as the writer's agreement step); else
every rank reads what it wants itself.

Sluice reads a file store with O_DIRECT, so ranks on one host do not
share reads through the page cache: sharing cuts the store's reads there
too (measured on one 2-core host, 4 ranks, 0.94 GiB replicated: the same
wall time as each rank reading all, at a quarter of the store bytes; the
broadcast's copies cost what the reads saved). StorageReader(share_reads=
False) turns it off.
"""

import dataclasses
import threading

import torch

_BATCH_BYTES = 64 << 20


@dataclasses.dataclass(frozen=True)
class _Region:
    storage_index: object  # MetadataIndex
    offsets: tuple
    lengths: tuple
    nbytes: int


@dataclasses.dataclass(frozen=True)
class SharedReads:
    """The schedule: (owner rank, regions) batches in broadcast order."""
    world: int
    batches: tuple


def region_of(item):
    return (item.storage_index, tuple(int(o) for o in item.storage_offsets),
            tuple(int(n) for n in item.lengths))


def plan_shared_reads(plans, nbytes_of, holds=None):
    """The schedule for `plans` (one per rank), or None when no region is
    wanted by two ranks. `nbytes_of(item)` is a tensor read item's size in
    stored bytes (None for an item that is not shared). `holds(rank, item)`
    (optional): whether that rank's host holds the item's bytes already;
    owners are chosen among those first (a restore from peer replicas then
    moves fewer parts)."""
    from torch.distributed.checkpoint import planner as _planner
    wanted = {}
    for rank, plan in enumerate(plans):
        for item in plan.items:
            if item.type == _planner.LoadItemType.BYTE_IO:
                continue
            wanted.setdefault(region_of(item), (item, set()))[1].add(rank)
    shared = []
    for region, (item, ranks) in wanted.items():
        if len(ranks) < 2:
            continue
        nbytes = nbytes_of(item)
        if nbytes:
            shared.append((nbytes, region, sorted(ranks), item))
    if not shared:
        return None
    shared.sort(key=lambda s: (-s[0], repr(s[1])))
    load = [0] * len(plans)
    per_owner = {}
    for nbytes, region, ranks, item in shared:
        owner = min(ranks, key=lambda r: (holds is not None and not holds(r, item), load[r], r))
        load[owner] += nbytes
        per_owner.setdefault(owner, []).append(_Region(region[0], region[1], region[2], nbytes))
    batches = []
    for owner in sorted(per_owner):
        batch, size = [], 0
        for region in per_owner[owner]:
            if batch and size + region.nbytes > _BATCH_BYTES:
                batches.append((owner, tuple(batch)))
                batch, size = [], 0
            batch.append(region)
            size += region.nbytes
        if batch:
            batches.append((owner, tuple(batch)))
    return SharedReads(world=len(plans), batches=tuple(batches))


def usable(schedule):
    """Whether this rank can take part in `schedule` (every rank computes
    the same answer)."""
    dist = torch.distributed
    return (isinstance(schedule, SharedReads) and dist.is_available() and dist.is_initialized()
            and dist.get_world_size() == schedule.world
            and threading.current_thread() is threading.main_thread())


def owned_regions(schedule, rank):
    return {(r.storage_index, r.offsets, r.lengths) for owner, batch in schedule.batches
            if owner == rank for r in batch}


def all_regions(schedule):
    return {(r.storage_index, r.offsets, r.lengths) for _, batch in schedule.batches for r in batch}


_ALIGN = 64  # each region starts aligned in its batch: any dtype can view it


def _layout(batch):
    """(offset of each region in the batch buffer, buffer size)."""
    offsets, size = [], 0
    for r in batch:
        size = (size + _ALIGN - 1) // _ALIGN * _ALIGN
        offsets.append(size)
        size += r.nbytes
    return offsets, size


def exchange(schedule, rank, read_region, deliver):
    """Runs the schedule on this rank. read_region(region, uint8 tensor)
    fills the buffer with the region's stored bytes (owned regions only);
    deliver(region, uint8 tensor) takes a region this rank may want."""
    dist = torch.distributed
    owned, error = [], None
    try:
        for owner, batch in schedule.batches:
            if owner != rank:
                continue
            offsets, size = _layout(batch)
            buffer = torch.empty(size, dtype=torch.uint8)
            for r, offset in zip(batch, offsets):
                read_region((r.storage_index, r.offsets, r.lengths), buffer[offset:offset + r.nbytes])
            owned.append(buffer)
    except Exception as e:  # told to every rank below, then raised here
        error = e
    said = [None] * schedule.world
    dist.all_gather_object(said, None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    failed = [(r, why) for r, why in enumerate(said) if why is not None]
    if failed:
        raise RuntimeError("sluice.torch.StorageReader: rank(s) " +
                           ", ".join(f"{r} ({why})" for r, why in failed) +
                           " could not read the regions they share with other ranks")
    mine = iter(owned)
    for owner, batch in schedule.batches:
        offsets, size = _layout(batch)
        buffer = next(mine) if owner == rank else torch.empty(size, dtype=torch.uint8)
        dist.broadcast(buffer, src=owner)
        for r, offset in zip(batch, offsets):
            deliver((r.storage_index, r.offsets, r.lengths), buffer[offset:offset + r.nbytes])
