"""Peer replicas (doc/peer.md): each host's part of a step copied to
`peer_replicas` hosts in other failure domains, over a gloo group of
sluice's own made from the job's torch.distributed world, and a peer commit
that makes the step safe before the durable tier has it.

Who does what:
- open_peers() runs on every rank at once (a collective, from the main
  thread, when a DCP writer or reader is set up): it makes the gloo group
  (`new_group`, with its own timeout, so sluice's traffic never shares the
  job's NCCL communicators and a dead peer fails a wait in bounded time),
  gathers each rank's host, domain and settings, refuses bad ones on every
  rank before anything is written, and picks each host's peers.
- replicate() queues one save on the process's one peer thread. That
  thread waits until tier 0 holds this rank's part, sends it to the rank
  that takes it on each peer host, takes the parts its own host receives
  (every chunk checked before anything is written: checkpoint/replicas.h),
  then every rank gathers the manifest digests and the acknowledgements,
  and each host publishes the same peer commit in its tier 0. Every rank
  runs the same saves in the same order, so their collectives pair up.
- A collective load reads a safe step through _peer_restore: each host
  gets from the others only the parts its own ranks read.

A host's identity is $SLUICE_HOST, else its hostname: tests fake several
hosts on one machine, each with its own tier 0 directory.
"""

import datetime
import json
import os
import queue
import socket
import threading
import time
import warnings

import torch

from . import _sluice

_PIECE = 4 << 20  # bytes per message: a cap paces between them


def host_identity():
    return os.environ.get("SLUICE_HOST") or socket.gethostname()


def check_settings(opts):
    """Raises ValueError/TypeError for peer options that cannot work, whatever
    the job's layout: peer_replicas without tier0_per_host, bad types."""
    replicas = opts["peer_replicas"]
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise ValueError(f"sluice: peer_replicas must be an int >= 0 (e.g. 1), not {replicas!r}")
    if replicas and opts["tier0_per_host"] is not True:
        raise ValueError("sluice: peer_replicas needs tier0_per_host=True: a replica is a copy of a "
                         "host's own tier 0 part (e.g. configure(tier0_per_host=True, peer_replicas=1))")
    domains = opts["peer_domains"]
    if not (domains is None or callable(domains) or isinstance(domains, dict) or
            (isinstance(domains, int) and not isinstance(domains, bool) and domains > 0)):
        raise TypeError(f"sluice: peer_domains must be None, a dict host -> domain, a callable rank -> "
                        f"domain, or a jump J > 0 (ranks r and r + J are in other domains), not {domains!r}")
    for key in ("peer_rate_limit", "peer_timeout_seconds"):
        value = opts[key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"sluice: {key} must be a number >= 0, not {value!r}")
    if opts["peer_timeout_seconds"] == 0:
        raise ValueError("sluice: peer_timeout_seconds must be > 0 (e.g. 120): a dead peer must "
                         "fail its replica, not hang the save")


def _domain_of(domains, rank, host):
    if domains is None:
        return host
    if isinstance(domains, dict):
        if host not in domains:
            raise ValueError(f"sluice: peer_domains names no domain for host {host!r}")
        return str(domains[host])
    if callable(domains):
        return str(domains(rank))
    return str(rank // domains)  # NVRx's jump J: ranks J apart are in other domains


class Topology:
    """Who holds what: hosts in order of their lowest rank, each with its
    ranks, domain and peers, and the rank that takes each sent part."""

    def __init__(self, group, rank, said, replicas, timeout):
        self.group, self.rank, self.replicas, self.timeout = group, rank, replicas, timeout
        self.world = len(said)
        self.hosts = []  # [(host, domain, [ranks])]
        by_host = {}
        for r, (host, domain, _, tier0) in enumerate(said):
            if host not in by_host:
                by_host[host] = (domain, [], tier0)
                self.hosts.append(host)
            if by_host[host][0] != domain:
                raise ValueError(f"sluice: ranks of host {host!r} map to two peer domains "
                                 f"({by_host[host][0]!r}, {domain!r}): a host is one domain")
            by_host[host][1].append(r)
        self.domain = {h: by_host[h][0] for h in self.hosts}
        self.ranks = {h: by_host[h][1] for h in self.hosts}
        self.host_of = {r: said[r][0] for r in range(self.world)}
        domains = sorted(set(self.domain.values()))
        if replicas >= len(domains):
            raise ValueError(f"sluice: peer_replicas={replicas} needs more than {replicas} failure "
                             f"domains; the job has {len(domains)} ({', '.join(domains)})")
        self.peers = {h: self._pick_peers(h) for h in self.hosts}
        self.broken = None  # why the group cannot be used any more (a peer timed out)

    def _pick_peers(self, host):
        i = self.hosts.index(host)
        taken, out = {self.domain[host]}, []
        for k in range(1, len(self.hosts)):
            other = self.hosts[(i + k) % len(self.hosts)]
            if self.domain[other] not in taken:
                taken.add(self.domain[other])
                out.append(other)
            if len(out) == self.replicas:
                return out
        raise ValueError(f"sluice: the peer domains leave host {host!r} no other domain for "
                         f"{self.replicas} replica(s)")

    def receiver(self, sender, peer_host):
        """The rank of `peer_host` that takes rank `sender`'s part."""
        own = self.ranks[self.host_of[sender]]
        theirs = self.ranks[peer_host]
        return theirs[own.index(sender) % len(theirs)]

    def targets(self, rank):
        return [self.receiver(rank, p) for p in self.peers[self.host_of[rank]]]

    def sources(self, rank):
        return [s for s in range(self.world) if rank in self.targets(s)]

    def leader(self, host):
        return self.ranks[host][0]


_lock = threading.Lock()
_topologies = {}  # (tier 0 uri, settings) -> Topology
_worker = None


def open_peers(tier0, opts, process_group=None):
    """The job's peer topology for tier 0 `tier0` (made once, collectively,
    by every rank of the default world); None when peer_replicas is 0 or
    the job is one process. Raises ValueError on every rank, before anything
    is written, for settings that cannot work or that ranks disagree on."""
    check_settings(opts)
    replicas = opts["peer_replicas"]
    dist = torch.distributed
    if not replicas or not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    key = (tier0, replicas, repr(opts["peer_domains"]), opts["peer_timeout_seconds"])
    with _lock:
        if key in _topologies:
            return _topologies[key]
    timeout = datetime.timedelta(seconds=float(opts["peer_timeout_seconds"]))
    group = dist.new_group(backend="gloo", timeout=timeout)
    rank = dist.get_rank()
    host = host_identity()
    try:
        domain, problem = _domain_of(opts["peer_domains"], rank, host), None
    except Exception as e:  # noqa: BLE001 - said to every rank below
        domain, problem = None, f"{type(e).__name__}: {e}"
    mine = (replicas, repr(opts["peer_domains"]) if not callable(opts["peer_domains"]) else "callable",
            opts["peer_rate_limit"], opts["peer_timeout_seconds"])
    said = [None] * dist.get_world_size()
    dist.all_gather_object(said, (host, domain, mine, tier0, problem), group=group)
    problems = [f"rank {r}: {s[4]}" for r, s in enumerate(said) if s[4]]
    if problems:
        raise ValueError("sluice: peer_domains failed on " + "; ".join(problems))
    differ = [r for r, s in enumerate(said) if s[2] != said[0][2]]
    if differ:
        raise ValueError(f"sluice: ranks disagree on the peer settings: rank 0 has {said[0][2]}, rank "
                         f"{differ[0]} has {said[differ[0]][2]} (peer_replicas, peer_domains, "
                         f"peer_rate_limit, peer_timeout_seconds must match on every rank)")
    topology = Topology(group, rank, [s[:4] for s in said], replicas, timeout)
    topology.tier0 = tier0
    topology.rate = float(opts["peer_rate_limit"])
    with _lock:
        _topologies[key] = topology
    return topology


def open_for_store(store):
    """open_peers() for `store` with the options sluice.configure() set."""
    import sluice
    opts = {**sluice._peer_options, "tier0_per_host": sluice._options["tier0_per_host"]}
    tiers = sluice._tiers(store)
    topology = open_peers(tiers[0], opts)
    dist = torch.distributed
    if (topology is None and len(tiers) == 1 and opts["tier0_per_host"] is True and dist.is_available()
            and dist.is_initialized() and dist.get_world_size() > 1):
        # Every rank has the same settings here, or open_peers refused them.
        raise ValueError("sluice: tier0_per_host=True with one tier (no tier every host shares) needs "
                         "peer_replicas >= 1: only a peer commit makes a whole step of the hosts' parts "
                         "(e.g. configure(tier0_per_host=True, peer_replicas=1)), or give a shared tier "
                         "too (store=[local, shared])")
    return topology


class PeerResult:
    """One save's replication on this rank: safe() once the peer commit is
    held in at least peer_replicas + 1 domains."""

    def __init__(self, name, step):
        self.name, self.step = name, step
        self._done = threading.Event()
        self.error = None
        self.holders = []
        self.safe_seconds = 0.0
        self._start = time.monotonic()

    def _finish(self, error=None, holders=()):
        self.error = error
        self.holders = list(holders)
        self.safe_seconds = time.monotonic() - self._start
        self._done.set()

    def done(self):
        return self._done.is_set()

    def wait(self, timeout=None):
        """Waits until the step is safe; raises UnavailableError saying why
        it is not (it may still become durable)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"sluice: {self.name}@{self.step} not safe after {timeout} s")
        if self.error is not None:
            raise _sluice.UnavailableError(f"sluice: {self.name}@{self.step} is not safe: {self.error}")
        return self


def wait_all():
    """Waits until every queued replication ended (each is bounded by the
    peer timeout): a process must not leave its peers waiting in a
    collective it never joins."""
    with _lock:
        worker = _worker
    if worker is not None and worker.is_alive():
        worker.jobs.join()


def replicate(topology, handle, name, step, attempt):
    """Queues this rank's part of name@step (`handle`: its SaveHandle) for
    peer replication; returns its PeerResult at once."""
    global _worker
    result = PeerResult(name, step)
    with _lock:
        if _worker is None or not _worker.is_alive():
            _worker = _Worker()
            _worker.start()
        _worker.jobs.put((topology, handle, name, step, attempt, result))
    return result


class _Worker(threading.Thread):
    """The process's one peer thread: saves in order, so that every rank's
    collectives on the peer group pair up."""

    def __init__(self):
        super().__init__(name="sluice-peer", daemon=True)
        self.jobs = queue.Queue()

    def run(self):
        while True:
            topology, handle, name, step, attempt, result = self.jobs.get()
            try:
                _replicate_one(topology, handle, name, step, attempt, result)
            except Exception as e:  # noqa: BLE001 - the result carries it
                if not result.done():
                    result._finish(f"{type(e).__name__}: {e}")
            finally:
                try:
                    # With tier 0 alone, the part's writer lock kept gc off
                    # it until now (SaveHandle::ReleasePart).
                    handle.release_part()
                finally:
                    self.jobs.task_done()


def _send(group, tensor, dst, rate):
    """Sends `tensor` to `dst` in pieces, no faster than `rate` bytes/s."""
    works, start, sent = [], time.monotonic(), 0
    flat = tensor.view(-1)
    for offset in range(0, max(flat.numel(), 1), _PIECE):
        piece = flat[offset:offset + _PIECE]
        if rate > 0:
            ahead = sent / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        works.append(torch.distributed.isend(piece, dst, group=group))
        sent += piece.numel()
    return works


def _recv(group, nbytes, src):
    out = torch.empty(nbytes, dtype=torch.uint8)
    for offset in range(0, max(nbytes, 1), _PIECE):
        torch.distributed.recv(out[offset:offset + _PIECE], src, group=group)
    return out


def _header_tensor(obj):
    data = torch.frombuffer(bytearray(json.dumps(obj).encode()), dtype=torch.uint8)
    return torch.tensor([data.numel()], dtype=torch.int64), data


def _send_part(topology, store, manifest, dst, rate=None):
    """Sends the part whose manifest is `manifest` (read from `store`) to
    rank `dst`: a header, the manifest, then each data object, verified as
    it is read, paced at `rate` bytes/s (None: peer_rate_limit; 0: no cap).
    Returns the isend works to wait on."""
    rate = topology.rate if rate is None else rate
    part = store.read_part(manifest)
    size, header = _header_tensor({"manifest": manifest, "sizes": part["sizes"],
                                   "manifest_len": len(part["manifest_data"])})
    works = _send(topology.group, size, dst, 0) + _send(topology.group, header, dst, 0)
    works += _send(topology.group, torch.frombuffer(bytearray(part["manifest_data"]), dtype=torch.uint8),
                   dst, 0)
    for i, n in enumerate(part["sizes"]):
        data = torch.empty(n, dtype=torch.uint8)
        store.read_object_into(manifest, i, data.numpy())
        works += _send(topology.group, data, dst, rate)
    return part["digest"], works


def _recv_part(topology, store, src):
    """Takes the part rank `src` sends and writes it into `store`; returns
    (its digest, manifest object), or raises why it was refused."""
    size = torch.empty(1, dtype=torch.int64)
    torch.distributed.recv(size, src, group=topology.group)
    header = json.loads(bytes(_recv(topology.group, int(size.item()), src).numpy()).decode())
    manifest = bytes(_recv(topology.group, header["manifest_len"], src).numpy())
    objects = [_recv(topology.group, n, src).numpy() for n in header["sizes"]]
    return store.write_replica(header["manifest"], manifest, objects), header["manifest"]


def _is_transport_failure(error):
    """A gloo wait that timed out or lost its peer: the group's pairs are in
    an unknown state, so no later collective on it can be trusted."""
    text = str(error)
    return isinstance(error, RuntimeError) and any(
        s in text for s in ("Timed out", "timed out", "Connection closed", "Connection reset", "closed by peer"))


def _replicate_one(topology, handle, name, step, attempt, result):
    if topology.broken:
        # Falls back: no more peer traffic from this process; saves go on
        # and become durable as without peers.
        result._finish(f"the peer group failed earlier ({topology.broken}); this process makes no more "
                       f"replicas until the job restarts")
        return
    try:
        _exchange(topology, handle, name, step, attempt, result)
    except Exception as e:  # noqa: BLE001
        if _is_transport_failure(e):
            topology.broken = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            warnings.warn(f"sluice: {name}@{step}: peer replication stopped: {topology.broken}")
        raise


class _Receiving(threading.Thread):
    """Takes the parts this rank's sources send, while this rank sends its
    own: a gloo send moves only as its receiver takes it, so receiving
    after sending would leave the link idle for a whole send first."""

    def __init__(self, topology, store):
        super().__init__(name="sluice-peer-recv", daemon=True)
        self.topology, self.store = topology, store
        self.received, self.taken, self.problem, self.transport_error = [], [], None, None

    def run(self):
        rank = self.topology.rank
        for src in self.topology.sources(rank):
            try:
                d, manifest_object = _recv_part(self.topology, self.store, src)
                self.received.append(d["rank"])
                self.taken.append(manifest_object)
            except Exception as e:  # noqa: BLE001 - the peer thread reports it
                if _is_transport_failure(e):
                    self.transport_error = e
                    return
                self.problem = self.problem or f"rank {rank}'s replica of rank {src}: {type(e).__name__}: {e}"


def _exchange(topology, handle, name, step, attempt, result):
    rank = topology.rank
    store = _sluice.PeerStore(topology.tier0)
    digest, works, problem = None, [], None
    incoming = _Receiving(topology, store)
    incoming.start()
    try:
        manifest = handle.wait_written()
        for dst in topology.targets(rank):
            d, w = _send_part(topology, store, manifest, dst)
            digest, works = d, works + w
        if not topology.targets(rank):
            digest = store.read_part(manifest)["digest"]
    except Exception as e:  # noqa: BLE001 - said to every rank below
        problem = f"rank {rank}: {type(e).__name__}: {e}"
    incoming.join()  # bounded: every receive has the group's timeout
    received, taken = incoming.received, incoming.taken
    problem = problem or incoming.problem
    try:
        if incoming.transport_error is not None:
            raise incoming.transport_error
        for w in works:
            w.wait()
        # The sent parts' buffers go now, not while the trainer's next save
        # stages (freeing them unmaps hundreds of MiB).
        works.clear()
    except Exception:
        for m in taken:
            store.release_replica(m)
        raise
    try:
        _commit(topology, store, name, step, attempt, digest, received, problem, result)
    finally:
        for m in taken:
            store.release_replica(m)


def _commit(topology, store, name, step, attempt, digest, received, problem, result):
    """Every rank gathers the digests and acknowledgements; if every rank's
    part is held in replicas + 1 domains, each host's first rank publishes
    the same peer commit, and the step is safe once those publishes landed
    in replicas + 1 domains."""
    group, rank = topology.group, topology.rank
    said = [None] * topology.world
    torch.distributed.all_gather_object(said, (digest, received, problem), group=group)
    problems = [s[2] for s in said if s[2]]
    if problems:
        result._finish("; ".join(problems[:3]))
        return
    holders = []
    for host in sorted(topology.hosts):
        ranks = set()
        for r in topology.ranks[host]:
            ranks.add(r)
            ranks.update(said[r][1])
        holders.append({"host": host, "domain": topology.domain[host], "ranks": sorted(ranks)})
    record = {"name": name, "step": step, "world": topology.world, "attempt": attempt,
              "replicas": topology.replicas, "ranks": [s[0] for s in said], "holders": holders}
    published = None
    host = topology.host_of[rank]
    if topology.leader(host) == rank:
        try:
            store.publish_peer_commit(record)
            published = topology.domain[host]
        except Exception as e:  # noqa: BLE001 - counted below
            warnings.warn(f"sluice: {name}@{step}: the peer commit on host {host} failed: {e}")
    landed = [None] * topology.world
    torch.distributed.all_gather_object(landed, published, group=group)
    domains = {d for d in landed if d is not None}
    if len(domains) < topology.replicas + 1:
        result._finish(f"the peer commit landed in {len(domains)} domain(s), fewer than "
                       f"{topology.replicas + 1}")
        return
    result._finish(None, [h["host"] for h in holders])
