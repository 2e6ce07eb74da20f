"""sluice.torch's StorageReader: DCP loads from a sluice checkpoint, each
read item served by byte-range reads of the chunks it overlaps."""

import dataclasses
import io
import json
import pickle
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import metadata as _metadata
from torch.distributed.checkpoint import planner as _planner

from . import _dcp_shared_reads as _shared
import sluice

from . import _peer, _peer_restore, _sluice, _state_dict, pipeline

from ._dcp_common import METADATA_KEY, parse_checkpoint_id, storage_key
from ._dcp_common import (_LATEST, _RANK_METADATA_PREFIX, _check_step, _storage_meta)


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

    def __init__(self, store=None, name=None, step="latest", *, checkpoint_id=None,
                 share_reads=True):
        super().__init__()
        # Regions several ranks want are read from the store by one of them
        # and sent to the others (_dcp_shared_reads); False: each rank reads
        # all it wants itself.
        self.share_reads = bool(share_reads)
        self.store = store
        self.name = name
        self.step = step if step in _LATEST else _check_step(step)
        self._reader = None
        self._items = None
        self._metadata = None
        self._reset_peers()
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
        self._reset_peers()

    def _reset_peers(self):
        # A load of a safe step that other hosts hold parts of: the peer
        # topology, what each host holds (_peer_restore.Survey), and the
        # manifests of the ranks this host lacks. None on every rank, or set
        # on every rank.
        self._peers = None
        self._elsewhere = {}
        self._pipeline = None

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
            topology = _peer.open_for_store(self.store)
            tiers = sluice._tiers(self.store)
            if topology is not None or (sluice._options["tier0_per_host"] is True and len(tiers) > 1):
                # A host that replaced a lost one makes its (empty) tier 0
                # here: to take the parts it fetches from its peers, or, with
                # no peers, to read its ranks from the shared tier.
                _sluice.PeerStore(tiers[0], create=True)
            p = self._pipeline = pipeline(self.store, _reading=True)
            step = self._step_from_peers(p, topology)
            try:
                with _state_dict.in_python_terms():
                    self._reader = p.open(self.name, step, manifests_elsewhere=self._elsewhere)
            except _sluice.CorruptionError as e:
                # A damaged newest step is never skipped unless asked for.
                if self.step != "latest-good":
                    raise
                with _state_dict.in_python_terms():
                    good = p.latest_good_step(self.name)
                warnings.warn(f"sluice.torch.StorageReader: {e}; reading {self.name}@{good}, the newest "
                              f"intact step", stacklevel=2)
                with _state_dict.in_python_terms():
                    self._reader = p.open(self.name, good)
            listed = list(self._reader.items())
            items = {key: (metadata, size) for key, metadata, size, _ in listed}
            self._item_rank = {key: rank for key, _, _, rank in listed}
            self._rank_bytes = {}
            for _, _, size, rank in listed:
                self._rank_bytes[rank] = self._rank_bytes.get(rank, 0) + size
            if METADATA_KEY not in items and not any(k.startswith(_RANK_METADATA_PREFIX) for k in items):
                info = self._reader.info
                self._reader = None
                raise ValueError(f"sluice: {info['name']}@{info['step']} is not a DCP checkpoint "
                                 f"(no '{METADATA_KEY}' item); read it with sluice.load")
            self._items = items
        return self._reader

    def _step_from_peers(self, p, topology):
        """The step to open (None: the newest). With peer replicas, every
        rank first agrees on it (the newest durable or safe step any rank
        sees). Where some host cannot read it alone, the hosts say what
        they hold, and each learns the manifests of the ranks it lacks:
        read_data then fetches the parts its ranks read (doc/peer.md).
        Collective: read_metadata runs on every rank."""
        if topology is None:
            return None if self.step in _LATEST else self.step
        step, attempt = self.step, None
        if step in _LATEST:
            try:
                durable = p.open(self.name, None).info["step"]
            except _sluice.Error:
                durable = None
            step, attempt = _peer_restore.agree_on_step(topology, self.name, durable)
        if step is None:
            return None
        try:
            p.open(self.name, step)
            readable = not _peer_restore.holds_other_save(topology, self.name, step, attempt)
        except _sluice.Error:
            readable = False
        if _peer_restore.all_ranks(topology, readable):
            return step  # every rank reads it already (its part here, the rest on a durable tier)
        survey = _peer_restore.survey(topology, self.name, step, attempt)
        if survey is not None:
            self._peers = (topology, survey)
            self._elsewhere = _peer_restore.manifests_elsewhere(topology, survey)
        return step

    def _small_items(self, keys):
        """The bytes of items every rank reads whole (DCP's metadata): from
        this host's tier 0, or, where some host lacks their parts, each
        read by one holder and given to every rank."""
        if self._peers is not None:
            topology, survey = self._peers
            parts = {k: self._item_rank[k] for k in keys}
            if any(set(parts.values()) - survey.holds.get(h, set()) for h in topology.hosts):
                return _peer_restore.share_items(topology, survey, parts, self._reader.read_bytes)
        return {k: self._reader.read_bytes(k) for k in keys}

    def _byte_items_from_peers(self, plan):
        """Collective, before a load of a safe step whose parts other hosts
        hold: the byte items of `plan` whose parts this host lacks, from
        ranks that hold them (key -> bytes)."""
        topology, survey = self._peers
        here = survey.holds.get(topology.host_of[topology.rank], set())
        wanted = {}
        for item in plan.items:
            if item.type == _planner.LoadItemType.BYTE_IO:
                key = self._key_of(item.storage_index)
                if self._item_rank.get(key) is not None and self._item_rank[key] not in here:
                    wanted[key] = self._item_rank[key]
        return _peer_restore.share_items(topology, survey, wanted, self._reader.read_bytes)

    def read_metadata(self):
        self._open()
        if METADATA_KEY in self._items:
            self._metadata = pickle.loads(self._small_items([METADATA_KEY])[METADATA_KEY])
            return self._metadata
        parts = sorted((k for k in self._items if k.startswith(_RANK_METADATA_PREFIX)),
                       key=lambda k: int(k[len(_RANK_METADATA_PREFIX):]))
        read = self._small_items(parts)
        self._metadata = _merge_rank_metadata([pickle.loads(read[k]) for k in parts])
        return self._metadata

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        # Regions several ranks want are read once and shared
        # (_dcp_shared_reads); the schedule rides in every plan.
        if len(plans) > 1 and self.share_reads:
            schedule = _shared.plan_shared_reads(plans, self._stored_nbytes,
                                                 self._host_holds if self._peers is not None else None)
            if schedule is not None:
                return [dataclasses.replace(p, storage_data=schedule) for p in plans]
        return plans

    def _host_holds(self, rank, item):
        topology, survey = self._peers
        part = self._item_rank.get(self._key_of(item.storage_index))
        return part in survey.holds.get(topology.host_of[rank], ())

    def _fetch_parts_read(self, plan, schedule):
        """Collective, before a load of a safe step whose parts other hosts
        hold: each host gets the parts its ranks read that it lacks (what
        this rank's plan reads itself, and the shared regions it owns), then
        this rank reopens the step over them."""
        topology, survey = self._peers
        shared = _shared.all_regions(schedule) if schedule is not None else set()
        owned = _shared.owned_regions(schedule, topology.rank) if schedule is not None else set()
        needed = set()
        for item in plan.items:
            if item.type == _planner.LoadItemType.BYTE_IO:
                continue  # _byte_items_from_peers
            region = _shared.region_of(item)
            if region not in shared or region in owned:
                needed.add(self._item_rank.get(self._key_of(item.storage_index)))
        needed.discard(None)
        fetched = _peer_restore.fetch_parts(topology, survey, needed)
        if fetched:
            host = topology.host_of[topology.rank]
            if topology.leader(host) == topology.rank:
                warnings.warn(f"sluice.torch.StorageReader: {self.name}@{survey.step}: this host's tier 0 "
                              f"lacked the part(s) of rank(s) {fetched} that its ranks read; fetched from "
                              f"peer hosts and verified", stacklevel=3)
            self._elsewhere = {r: m for r, m in self._elsewhere.items() if r not in fetched}
            with _state_dict.in_python_terms():
                self._reader = self._pipeline.open(self.name, survey.step, manifests_elsewhere=self._elsewhere)

    def _stored_nbytes(self, item):
        entry = self._items.get(self._key_of(item.storage_index)) if self._items else None
        if entry is None:
            return None
        count = 1
        for n in item.lengths:
            count *= int(n)
        return count * self._dtype_of(entry).itemsize

    @staticmethod
    def _dtype_of(entry):
        return _state_dict._DTYPES[json.loads(entry[0])["dtype"]]

    def _key_of(self, index):
        """Where the item at `index` is stored: the metadata says (a save
        without collectives keeps each rank's copy under its rank); else the
        key follows from the index."""
        stored = getattr(self._metadata, "storage_data", None) if self._metadata is not None else None
        if isinstance(stored, dict) and index in stored:
            return stored[index]
        return storage_key(index)

    def read_data(self, plan, planner):
        self._open()
        schedule = plan.storage_data if _shared.usable(plan.storage_data) else None
        byte_items = {}
        if self._peers is not None:
            byte_items = self._byte_items_from_peers(plan)
            self._fetch_parts_read(plan, schedule)
        reader = self._reader
        shared = _shared.all_regions(schedule) if schedule is not None else set()
        from_peers = {}  # region -> this rank's items that the exchange fills
        tensors = []
        for item in plan.items:
            key = self._key_of(item.storage_index)
            if key not in self._items:
                raise ValueError(f"sluice: {self.name}@{self.step} has no item '{key}' "
                                 f"for {item.storage_index.fqn}")
            if item.type == _planner.LoadItemType.BYTE_IO:
                data = byte_items[key] if key in byte_items else reader.read_bytes(key)
                planner.load_bytes(item, io.BytesIO(data))
            elif _shared.region_of(item) in shared:
                from_peers.setdefault(_shared.region_of(item), []).append(item)
            else:
                tensors.append((key, item))
        self._read_tensors(tensors, planner)
        if schedule is not None:
            self._exchange(schedule, from_peers, planner)
        future = torch.futures.Future()
        future.set_result(None)
        return future

    def _read_tensors(self, tensors, planner):
        """Reads the tensor items this rank reads itself. Whole items that
        land straight in their destination are streamed together
        (read_all_into: each data object read once, with many reads in
        flight) where they are most of what their writer rank stored; the
        rest are byte-range reads of the regions they want."""
        whole, ranged = {}, []
        for key, item in tensors:
            target = planner.resolve_tensor(item)
            if key not in whole and self._lands_whole(key, item, target):
                whole[key] = (item, target)
            else:
                ranged.append((key, item, target))
        by_rank = {}
        for key in whole:
            by_rank.setdefault(self._item_rank[key], []).append(key)
        for rank, keys in by_rank.items():
            wanted = sum(self._items[k][1] for k in keys)
            if wanted * 4 < self._rank_bytes[rank] * 3:
                ranged.extend((k, *whole.pop(k)) for k in keys)  # a small part: read just it
                continue
            self._reader.read_all_into({k: (whole[k][1].data_ptr(), self._items[k][1], False) for k in keys},
                                       rank)
            self.bytes_requested += sum(self._items[k][1] for k in keys)
        for key, item, target in ranged:
            self._read_tensor_region(key, item.storage_offsets, item.lengths, target)
        for key, (item, target) in whole.items():
            planner.commit_tensor(item, target)
        for key, item, target in ranged:
            planner.commit_tensor(item, target)

    def _lands_whole(self, key, item, target):
        metadata, size = self._items[key]
        meta = json.loads(metadata)
        return (size > 0 and all(int(o) == 0 for o in item.storage_offsets)
                and [int(n) for n in item.lengths] == [int(d) for d in meta["shape"]]
                and target.device.type == "cpu" and target.dtype == _state_dict._DTYPES[meta["dtype"]]
                and target.is_contiguous() and not target.is_conj() and not target.is_neg()
                and target.numel() * target.element_size() == size)

    def _exchange(self, schedule, from_peers, planner):
        """This rank's part of a shared-reads schedule (_dcp_shared_reads)."""
        def read_region(region, buffer):
            key = self._key_of(region[0])
            lengths = list(region[2])
            typed = buffer.view(self._dtype_of(self._items[key])).view(lengths)
            self._read_tensor_region(key, region[1], region[2], typed)

        def deliver(region, buffer):
            items = from_peers.get(region)
            if not items:
                return
            key = self._key_of(region[0])
            typed = buffer.view(self._dtype_of(self._items[key])).view(list(region[2]))
            for item in items:
                target = planner.resolve_tensor(item)
                with torch.no_grad():
                    target.copy_(typed)
                planner.commit_tensor(item, target)

        _shared.exchange(schedule, torch.distributed.get_rank(), read_region, deliver)

    def _read_tensor_region(self, key, storage_offsets, storage_lengths, target):
        """Reads the region (storage_offsets, lengths) of the stored chunk
        `key` into `target`, reading only the bytes that span it."""
        metadata, _ = self._items[key]
        meta = json.loads(metadata)
        dtype = _state_dict._DTYPES[meta["dtype"]]
        shape = [int(d) for d in meta["shape"]]
        offsets = [int(o) for o in storage_offsets]
        lengths = [int(n) for n in storage_lengths]
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
