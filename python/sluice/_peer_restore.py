"""Collective loads from peer replicas (doc/peer.md, "Restore after a host
loss"): which step the job reads, and how each host gets, from the hosts
that hold them, the parts of it that its own ranks read and its tier 0
lacks.

A load (sluice.torch.StorageReader) runs these on every rank, in this
order, on the job's peer group (_peer.Topology):
- agree_on_step(): the newest step some rank sees durable or whose peer
  commit some host holds, told apart from an old tier 0's records by the
  save attempt ids.
- survey(): every host says which ranks of the step its tier 0 holds. A
  host whose copy is another save's removes it first.
- manifests_elsewhere(): each host learns the manifests of the ranks it
  lacks (small: chunk lists), so its reader lists every item of the step
  before any part moves.
- share_items(): small items every rank reads (DCP's metadata) go from one
  holder to every rank, not as whole parts.
- fetch_parts(): once each rank knows what its load plan reads, each host
  gets the whole parts of those ranks it lacks, each from a holder (the
  least loaded), verified chunk by chunk as any replica is
  (checkpoint/replicas.h). A part no host needs is not moved.
"""

import dataclasses
import warnings

import torch

from . import _peer, _sluice


@dataclasses.dataclass
class Survey:
    """What the hosts hold of one step: its peer commit record and, per
    host, the ranks its tier 0 holds (every rank has the same)."""
    name: str
    step: int
    record: dict
    holds: dict  # host -> set of ranks

    def lacks(self, host):
        return [r for r in range(self.record["world"]) if r not in self.holds.get(host, ())]

    def holders(self, part):
        return [h for h, ranks in self.holds.items() if part in ranks]

    def manifest(self, part):
        return self.record["ranks"][part]["manifest"]


def all_ranks(topology, flag):
    """True on every rank when `flag` is true on every rank."""
    said = [None] * topology.world
    torch.distributed.all_gather_object(said, bool(flag), group=topology.group)
    return all(said)


def holds_other_save(topology, name, step, attempt):
    """Whether this host's tier 0 holds a peer commit of name@step by
    another save attempt than `attempt` (None: any counts)."""
    if attempt is None:
        return False
    try:
        record = _sluice.PeerStore(topology.tier0).read_peer_commit(name, step)
    except _sluice.NotFoundError:
        return False
    return record["attempt"] != attempt


def survey(topology, name, step, attempt=None):
    """The Survey of name@step, or None when no host holds its peer
    commit. A host whose record of the step names another save attempt
    than `attempt` removes its copy first (the job's save of the step is
    then fetched in its place)."""
    store = _sluice.PeerStore(topology.tier0)
    host = topology.host_of[topology.rank]
    leader = topology.leader(host) == topology.rank
    try:
        held, record = store.ranks_held(name, step), store.read_peer_commit(name, step)
    except _sluice.NotFoundError:
        held, record = [], None
    if record is not None and attempt is not None and record["attempt"] != attempt:
        if leader:
            warnings.warn(f"sluice: {name}@{step}: this host's tier 0 held another save of the step "
                          f"(attempt {record['attempt']}, not the job's {attempt}); removed")
            store.remove_step(name, step)
        held, record = [], None
    said = [None] * topology.world
    torch.distributed.all_gather_object(said, (held if leader else None, record), group=topology.group)
    record = next((s[1] for s in said if s[1] is not None), None)
    if record is None:
        return None
    holds = {topology.host_of[r]: set(s[0]) for r, s in enumerate(said) if s[0] is not None}
    if leader and not holds.get(host):
        # A host that holds nothing of the step (it replaced a lost one)
        # keeps the job's record of it too, so that it reads the step as
        # committed once it holds the parts its ranks read.
        store.publish_peer_commit(record)
    torch.distributed.barrier(group=topology.group)
    return Survey(name, step, record, holds)


def _source(survey, part, load):
    """The host that sends `part`: of its holders, the one given the least
    so far (`load`: host -> parts assigned), first in host order on ties."""
    holders = survey.holders(part)
    if not holders:
        return None
    best = min(holders, key=lambda h: (load.get(h, 0), sorted(survey.holds).index(h)))
    load[best] = load.get(best, 0) + 1
    return best


def manifests_elsewhere(topology, survey):
    """The manifests (rank -> bytes) of the ranks this host lacks, sent by
    a host that holds each. Ranks no surviving host holds are missing from
    the result (their bytes must come from a durable tier)."""
    store = _sluice.PeerStore(topology.tier0)
    wanted = set()
    for host in topology.hosts:
        wanted.update(survey.lacks(host))
    load, mine = {}, {}
    for part in sorted(wanted):
        source = _source(survey, part, load)
        if source is not None and topology.leader(source) == topology.rank:
            mine[part] = store.read_part(survey.manifest(part))["manifest_data"]
    said = [None] * topology.world
    torch.distributed.all_gather_object(said, mine, group=topology.group)
    lacking = set(survey.lacks(topology.host_of[topology.rank]))
    out = {}
    for sent in said:
        out.update({part: bytes(data) for part, data in sent.items() if part in lacking})
    return out


def share_items(topology, survey, wanted, read_bytes):
    """The bytes of small items (DCP's metadata, its byte items) this rank
    reads whole (`wanted`: key -> the rank whose part holds it), each read
    by one rank whose host holds that part (`read_bytes(key)`) and given to
    the ranks that want it, instead of moving the whole part."""
    said = [None] * topology.world
    torch.distributed.all_gather_object(said, dict(wanted), group=topology.group)
    everyone = {}
    for w in said:
        everyone.update(w)
    load, mine = {}, {}
    for key, part in sorted(everyone.items()):
        source = _source(survey, part, load)
        if source is None:
            raise _sluice.NotFoundError(f"sluice: {survey.name}@{survey.step}: no surviving host holds "
                                        f"rank {part}'s part, which holds '{key}'")
        if topology.leader(source) == topology.rank:
            mine[key] = read_bytes(key)
    torch.distributed.all_gather_object(said, mine, group=topology.group)
    out = {}
    for sent in said:
        out.update({k: v for k, v in sent.items() if k in wanted})
    return out


def fetch_parts(topology, survey, needed):
    """Each host gets the parts its ranks read (`needed`: this rank's set)
    that its tier 0 lacks, each from the least loaded holder, unpaced (the
    job waits for its restore; it does not train meanwhile). Returns the
    ranks this host fetched (the same list on each of its ranks); a part no
    surviving host holds is left for the durable tier."""
    said = [None] * topology.world
    torch.distributed.all_gather_object(said, sorted(needed), group=topology.group)
    plan, load = [], {}  # (source host, destination host, part)
    for host in topology.hosts:
        wants = set()
        for r in topology.ranks[host]:
            wants.update(said[r])
        for part in sorted(wants - survey.holds.get(host, set())):
            source = _source(survey, part, load)
            if source is not None:
                plan.append((source, host, part))
    store = _sluice.PeerStore(topology.tier0)
    rank, host = topology.rank, topology.host_of[topology.rank]
    works, fetched = [], []
    for source, dst, part in plan:
        if topology.leader(source) == rank:
            _, w = _peer._send_part(topology, store, survey.manifest(part), topology.leader(dst), rate=0)
            works += w
    taken = []
    try:
        for source, dst, part in plan:
            if topology.leader(dst) == rank:
                digest, manifest_object = _peer._recv_part(topology, store, topology.leader(source))
                if digest["rank"] != part or manifest_object != survey.manifest(part):
                    raise _sluice.CorruptionError(f"sluice: host {host} asked for rank {part}'s part of "
                                                  f"{survey.name}@{survey.step} and got {manifest_object}")
                taken.append(manifest_object)
        for w in works:
            w.wait()
        if taken:
            store.publish_peer_commit(survey.record)  # the parts it now holds are read as committed
    finally:
        for m in taken:
            store.release_replica(m)
    torch.distributed.barrier(group=topology.group)
    for source, dst, part in plan:
        survey.holds.setdefault(dst, set()).add(part)
        if dst == host:
            fetched.append(part)
    return fetched


def agree_on_step(topology, name, durable_step):
    """The step a collective load of `name`'s latest reads, and the save
    attempt whose copy of it counts (None: read it as committed, from a
    durable tier): the newest step that some rank sees durable
    (`durable_step`) or whose peer commit some host holds. A host back with
    an old tier 0 (the job rolled back and saved those steps again) is told
    apart by the attempt ids: where its record of a step names another
    attempt than the one more domains hold, it is stale from that step on,
    and none of its newer records count. Every rank gets the same answer."""
    store = _sluice.PeerStore(topology.tier0, create=True)
    host = topology.host_of[topology.rank]
    recent = store.recent_peer_commits(name) if topology.leader(host) == topology.rank else None
    said = [None] * topology.world
    torch.distributed.all_gather_object(said, (durable_step, recent), group=topology.group)
    durable = max((d for d, _ in said if d is not None), default=None)
    records = {}  # host -> {step: attempt}
    for rank, (_, held) in enumerate(said):
        if held is not None:
            records[topology.host_of[rank]] = dict(held)
    domains = {}  # (step, attempt) -> domains holding it
    for h, held in records.items():
        for step, attempt in held.items():
            domains.setdefault((step, attempt), set()).add(topology.domain[h])
    valid = {}  # (step, attempt) -> domains, from hosts not stale at that step
    for h, held in records.items():
        stale_from = min((step for step, attempt in held.items()
                          if any(len(d) > len(domains[(step, attempt)])
                                 for (s2, a2), d in domains.items() if s2 == step and a2 != attempt)),
                         default=None)
        for step, attempt in held.items():
            if stale_from is None or step < stale_from:
                valid.setdefault((step, attempt), set()).add(topology.domain[h])
    best = max(valid, key=lambda k: (k[0], len(valid[k])), default=None)
    if best is None or (durable is not None and durable >= best[0]):
        return durable, None
    return best
