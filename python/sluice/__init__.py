"""sluice: stall-free, checksummed, tiered checkpoints for PyTorch.

    import sluice
    handle = sluice.save("/data/ckpt", "run1", step, {"model": model.state_dict(),
                                                      "optim": optimizer.state_dict()})
    ...                      # training goes on while the checkpoint is written
    handle.wait()            # durable and committed (raises if the save failed)
    state = sluice.load("/data/ckpt", "run1")                     # latest step
    sluice.load("/data/ckpt", "run1", into={"model": model.state_dict()})  # in place

A store is a URI ("file:///path", a plain path, "rados://pool/prefix",
"s3://bucket/prefix?endpoint=...") or a list of them, fastest first: saves land on the first and drain to the others
in the background; loads read the fastest tier holding a committed copy and
fall back chunk by chunk. sluice.torch holds the Distributed Checkpoint
(torch.distributed.checkpoint) StorageWriter and StorageReader.

One pipeline (with its staging arena, allocated once) is kept per process and
per list of tiers, so every save after the first copies into warm memory.
configure() sets the options of pipelines opened after it.
"""

import atexit
import os
import threading

from . import _backlog, _lazy, _peer, _sluice
from ._sluice import (AlreadyExistsError, CorruptionError, Error, InvalidArgumentError,
                      NoSpaceError, NotFoundError, NotSupportedError, StoreIOError, UnavailableError)
from ._backlog import BacklogWarning
from ._state_dict import SaveHandle, load_with, save_with

__all__ = [
    "save", "load", "list_checkpoints", "remove", "configure", "pipeline", "close", "staging", "SaveHandle",
    "BacklogWarning",
    "metrics", "metrics_text",
    "Error", "AlreadyExistsError", "CorruptionError", "InvalidArgumentError", "StoreIOError",
    "NoSpaceError", "NotFoundError", "NotSupportedError", "UnavailableError",
]


def _env_int(name, default):
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"sluice: ${name} must be an integer number of bytes, not {text!r}")


# Pipeline options (see include/sluice/pipeline.h). Staging should hold one
# whole checkpoint: a larger checkpoint streams through it, and the stall
# then grows toward the time the write takes.
_options = {
    "staging_bytes": _env_int("SLUICE_STAGING_BYTES", 1 << 30),
    "copy_threads": _env_int("SLUICE_COPY_THREADS", 2),
    "max_in_flight": 2,
    "chunk_bytes": 4 << 20,
    "io_bytes": 4 << 20,
    "object_bytes": 1 << 30,
    "rank_timeout_ms": 600_000,
    "scrub_rate_bytes_per_sec": 0,
    "rebuild_rate_bytes_per_sec": 0,
    "rebuild_keep_last": 1,
    "create_if_missing": True,
    "huge_pages": True,
    "rate_bytes_per_sec": [],
    "keep_last": [],
    "backlog_policy": "coalesce",
    "max_backlog_steps": 0,
    "max_backlog_bytes": 0,
    "when_backlogged": "wait",
    "tier0_per_host": False,
    # The process's staging pool gives its memory back after this long
    # without a save (0: never); the next save faults it in again.
    "staging_idle_release_seconds": float(os.environ.get("SLUICE_STAGING_IDLE_RELEASE_SECONDS", 1800)),
}
# Python-side options (not the pipeline's): when a save warns that a tier
# falls behind (see _backlog.py).
_warn_options = {"backlog_warn_steps": 2, "backlog_warn_bytes": 0}
# Peer replicas (_peer.py, doc/peer.md): Python-side too, read by sluice.torch.
_peer_options = {"peer_replicas": 0, "peer_domains": None, "peer_rate_limit": 0,
                 "peer_timeout_seconds": 120}
# (tiers, options) -> pipeline. A read opens one that creates nothing
# (_read_pipelines) unless a save already opened the store; the first save
# opens one that may create its tiers, which reads then use too.
_pipelines = {}
_read_pipelines = {}
# (tiers, name) -> handles of this process's saves not yet seen committed on
# the fastest tier, oldest first: a load of the name waits for them.
_own_saves = {}
_lock = threading.Lock()
# (options it was made with, pool): the staging memory every pipeline of
# this process shares. Options that change it make a new one; the old one
# goes with the last pipeline using it.
_pool = [None, None]
_POOL_OPTIONS = ("staging_bytes", "huge_pages", "staging_idle_release_seconds", "io_bytes")


def configure(**options):
    """Sets options for pipelines opened from now on: staging_bytes (the
    size of the process's one staging pool, which every store's pipeline
    shares), staging_idle_release_seconds (the pool's memory goes back to
    the system after this long without a save; 0: never; default 1800),
    copy_threads, max_in_flight, chunk_bytes, io_bytes, object_bytes,
    rank_timeout_ms, create_if_missing, huge_pages, and per tier
    rate_bytes_per_sec and keep_last (lists, one figure per tier).
    scrub_rate_bytes_per_sec > 0 scrubs every tier in the background at that
    cap (waiting while saves and drains run), repairing bad copies from good
    ones; rebuild_rate_bytes_per_sec > 0 makes a pipeline that opens onto an
    empty tier 0, while a later tier holds checkpoints, copy the newest
    rebuild_keep_last steps of each name back at that cap. Pipelines already
    open keep theirs; close() them to reopen with the new options.

    A later tier slower than the checkpoint rate falls behind. backlog_policy
    ("coalesce", the default, or "drain-every"; one string, or a list with one
    per tier) says what then drains: coalesce drains only the newest step
    waiting for the tier, and older waiting ones are superseded there (they
    stay on faster tiers only while those tiers' keep_last keeps them);
    drain-every copies every step, oldest first. max_backlog_steps and
    max_backlog_bytes (0: no limit) make a save wait (when_backlogged="wait")
    or raise UnavailableError ("fail") while some later tier has that many
    steps or bytes due. A save warns once per tier (BacklogWarning) when the
    tier has backlog_warn_steps steps (default 2) or backlog_warn_bytes bytes
    (0: not checked) due, or has superseded a step.

    tier0_per_host=True is for jobs whose ranks run on several hosts, each
    with its own tier 0 (local NVMe) and all sharing tier 1 (e.g. Ceph): a
    multi-rank save writes each rank's items to its host's tier 0, copies
    them to tier 1, where rank 0 commits, and each tier 0 then holds its
    ranks' part, which loads of those ranks read first. Tier 1 then drains
    every step (a backlog_policy list must say "drain-every" for it), and
    such saves are written in full. With a one-tier store (no shared tier)
    it needs peer_replicas: the peer commit is then the only commit.

    peer_replicas=N (with tier0_per_host) copies each host's part of every
    DCP save to N hosts in other failure domains over a gloo group of
    sluice's own, and makes the step safe (a peer commit) before the durable
    tier has it: peer_domains (None: each host its own; a dict host ->
    domain; a callable rank -> domain; or NVRx's jump J), peer_rate_limit
    (bytes/s a host sends, 0: no cap), peer_timeout_seconds (a peer silent
    this long fails the replica; default 120). See doc/peer.md.

    Each option is checked here, with those set before, and a bad one raises
    what the next save would (ValueError, TypeError, InvalidArgumentError),
    changing nothing. Per-tier lists of different lengths are refused here;
    their length is checked against the store's tiers at the save."""
    known = set(_options) | set(_warn_options) | set(_peer_options)
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"sluice.configure: unknown option(s) {sorted(unknown)}; "
                        f"known: {sorted(known)}")
    with _lock:
        warn = {**_warn_options, **{k: v for k, v in options.items() if k in _warn_options}}
        peer = {**_peer_options, **{k: v for k, v in options.items() if k in _peer_options}}
        pipeline_options = {**_options, **{k: v for k, v in options.items() if k in _options}}
        _check_options(pipeline_options)
        _peer.check_settings({**peer, "tier0_per_host": pipeline_options["tier0_per_host"]})
        _backlog.set_thresholds(warn["backlog_warn_steps"], warn["backlog_warn_bytes"])  # checks them first
        _warn_options.update(warn)
        _options.update(pipeline_options)
        _peer_options.update(peer)


def _check_options(opts):
    """Raises what the next save would raise for pipeline options `opts`
    (the same error, from the same checks: the binding's and the pipeline's
    own), without opening or creating any store. The options are checked
    for as many tiers as their per-tier lists name (a list's length must
    match the store's tier count, which is known only at the save)."""
    opts = dict(opts)
    pool = _sluice.StagingPool(opts["staging_bytes"], huge_pages=opts["huge_pages"],
                               idle_release_seconds=opts.pop("staging_idle_release_seconds"))
    lists = [v for v in (opts["rate_bytes_per_sec"], opts["keep_last"], opts["backlog_policy"])
             if isinstance(v, (list, tuple))]
    count = max([len(v) for v in lists] + [2 if opts["tier0_per_host"] is True else 1])
    # Under /dev/null no store can be: opening the first tier fails, after
    # every option is checked and before anything is made.
    probe = os.path.join(os.devnull, "sluice-configure-check")
    try:
        _sluice.Pipeline([f"{probe}/{k}" for k in range(count)], staging_at_open=False,
                         staging_pool=pool, **opts)
    except _sluice.StoreIOError as e:
        if probe not in str(e):
            raise


def _tiers(store):
    if isinstance(store, (str, os.PathLike)):
        return (os.fspath(store),)
    if isinstance(store, (list, tuple)) and store and all(
            isinstance(s, (str, os.PathLike)) for s in store):
        return tuple(os.fspath(s) for s in store)
    raise TypeError(f"sluice: store must be a URI or a non-empty list of tier URIs (fastest "
                    f"first), not {store!r}")


def pipeline(store, _reading=False):
    """This process's pipeline for `store` (opened on first use, then kept).

    Opening it allocates and faults in the staging arena, so that even the
    first save's stall is a memory copy: call it before training starts. A
    pipeline first opened by a load (a job resuming) makes its arena at the
    first save instead, so a load neither waits for nor holds it, and it
    creates nothing: a store that does not exist raises NotFoundError."""
    tiers = _tiers(store)
    replaced = None
    with _lock:
        opts = dict(_options)
        key = (tiers, repr(sorted(opts.items())))
        p = _pipelines.get(key)
        if p is None or p.closed:
            if _reading:
                p = _read_pipelines.get(key)
                if p is None or p.closed:
                    p = _read_pipelines[key] = _open_pipeline(tiers, opts, reading=True)
                return p
            p = _pipelines[key] = _open_pipeline(tiers, opts, reading=False)
            replaced = _read_pipelines.pop(key, None)
    if replaced is not None:
        replaced.close()  # its readers keep it open while they read
    return p


def _open_pipeline(tiers, opts, reading):
    """A new pipeline over `tiers` (under _lock). A reading one makes no
    staging arena and creates no tier."""
    pool = _staging_pool(opts)
    opts = dict(opts)
    del opts["staging_idle_release_seconds"]
    if reading:
        opts["create_if_missing"] = False
    return _sluice.Pipeline(list(tiers), staging_at_open=not reading, staging_pool=pool, **opts)


def _staging_pool(opts):
    """The process's staging pool for `opts` (under _lock): one arena,
    staging_bytes large, that every store's pipeline stages into, made at
    the first save and kept while saves use it."""
    wanted = tuple(opts[k] for k in _POOL_OPTIONS)
    if _pool[1] is None or _pool[0] != wanted:
        _pool[:] = [wanted, _sluice.StagingPool(opts["staging_bytes"], huge_pages=opts["huge_pages"],
                                                idle_release_seconds=opts["staging_idle_release_seconds"])]
    return _pool[1]


def staging():
    """The process's staging pool: {"bytes": its size, "resident_bytes":
    what of it is backed by memory now (0 before the first save and after
    an idle release)}, or None before any pipeline opened."""
    with _lock:
        pool = _pool[1]
    return None if pool is None else {"bytes": pool.bytes, "resident_bytes": pool.resident_bytes}


def close():
    """Closes every pipeline this process opened, after their snapshotted
    saves are committed on the fastest tier (drains not finished are left for
    the next pipeline or `sluice drain`). Runs at exit too."""
    with _lock:
        pipelines = list(_pipelines.values()) + list(_read_pipelines.values())
        _pipelines.clear()
        _read_pipelines.clear()
        _pool[:] = [None, None]  # its memory goes with the last pipeline
        _own_saves.clear()  # committed on the fastest tier once their pipelines close
    _lazy.finish_all()  # lazy copies end and are finished before their pipelines close
    _peer.wait_all()  # peer replications end before the pipelines their handles belong to
    for p in pipelines:
        p.close()


atexit.register(close)


def save(store, name, step, state_dict, async_=True, incremental=True, snapshot="eager",
         optimizers=None):
    """Saves `state_dict` (nested dicts/lists/tuples of tensors and plain
    values) as checkpoint name@step.

    Returns a SaveHandle once the tensors are copied into staging: they may
    change from then on. With async_=False it returns only once every tier
    committed. Raises before anything is written on an unsupported value, a
    tensor that is not in host memory, or two keys mapping to one item.

    Incremental (the default): chunks unchanged since the newest committed
    step of `name` (frozen weights, a LoRA base, embedding rows that did not
    move) are referenced there instead of written again; handle.stats()
    says how many bytes. incremental=False writes every chunk.

    When a later tier falls behind the save rate, the save warns once
    (BacklogWarning; see configure() for the policy and limits), and
    handle.backlog() reports each tier's backlog.

    snapshot="lazy": returns before the large tensors are copied; they are
    copied in the background while training goes on, and each optimizer's
    step first waits for the tensors it owns (a pre-hook). Change any other
    saved tensor in place only after handle.wait_staged(); one changed
    before its copy fails the save at commit instead of mixing states.
    `optimizers` (default: those that have stepped since the first lazy save) are
    copied first, in step order. See doc/python.md#lazy-snapshots."""
    handle = save_with(pipeline(store), name, step, state_dict, async_=async_, incremental=incremental,
                       snapshot=snapshot, optimizers=optimizers)
    _remember_save(_tiers(store), name, handle)
    return handle


def _on_tier0(handle):
    """True once the save committed on the fastest tier, or ended there."""
    return handle.progress()[0]["state"] not in ("pending", "writing")


def _remember_save(tiers, name, handle):
    with _lock:
        handles = [h for h in _own_saves.get((tiers, name), ()) if not _on_tier0(h)]
        _own_saves[(tiers, name)] = handles + [handle]


def _wait_for_own_saves(tiers, name):
    """Waits until every save of `name` into `tiers` that this process made
    is committed on the fastest tier or failed. A failure is not raised
    here: it is the save's, which its handle's wait() raises; the load then
    finds what did commit."""
    with _lock:
        handles = list(_own_saves.get((tiers, name), ()))
    for h in handles:
        try:
            h.wait(tier=0)
        except Exception:  # noqa: BLE001 - reported by the save's own handle
            pass
    with _lock:
        left = [h for h in _own_saves.pop((tiers, name), ()) if h not in handles]
        if left:
            _own_saves[(tiers, name)] = left


def load(store, name, step="latest", into=None, weights_only=False, strict=True):
    """Loads checkpoint name@step (step 'latest': the newest committed one)
    and returns its state dict. If the newest committed step is damaged on
    every tier (a commit record or manifest that does not verify, a missing
    data object), 'latest' raises CorruptionError naming it; 'latest-good'
    loads the newest intact step instead, with a warning.

    A load sees this process's own saves: it first waits until every save
    of `name` into this store that this process made through sluice.save()
    is committed on the fastest tier (or failed: its handle raises why), so
    a load right after save() returns that step without handle.wait().
    A store that does not exist raises NotFoundError, and nothing is created.

    With `into` (a state dict of existing tensors, e.g. model.state_dict()),
    tensors found under the same keys are filled in place and returned as
    they are; the others are allocated. A tensor of `into` under a key the
    checkpoint lacks raises ValueError naming the keys before anything is
    read, unless strict=False (then it is left as it is). A destination of
    another shape or dtype raises ValueError naming the key before anything
    is read. A chunk failing its checksum on every tier raises
    CorruptionError naming the item and chunk. With weights_only=True, the
    state dict's structure may hold only tensors, containers and plain
    values (torch dtypes, devices and sizes too), as
    torch.load(weights_only=True) allows: anything else raises
    pickle.UnpicklingError naming it instead of running code a checkpoint
    from an untrusted store might carry."""
    _wait_for_own_saves(_tiers(store), name)
    return load_with(pipeline(store, _reading=True), name, step, into=into,
                     weights_only=weights_only, strict=strict)


def list_checkpoints(store, name=""):
    """Every checkpoint of `name` (all names if empty) on any tier, with its
    state on each tier."""
    return pipeline(store, _reading=True).list(name)


def remove(store, name, step=None):
    """Removes checkpoint name@step (every step of `name` if step is None)
    from every tier, the slowest first; returns the steps removed. Each goes
    at once (its commit record first), then its objects. NotFoundError if no
    tier holds any."""
    return pipeline(store, _reading=True).remove(name, step)


def metrics():
    """The process's metrics: what every pipeline (every store saved to or
    loaded from), scrub and rebuild in it has counted. A list of families,
    each {"name", "help", "type" ("counter", "gauge" or "histogram"),
    "samples": [(sample_name, {label: value}, value), ...]}, with the same
    names and labels that `--metrics-listen` serves (doc/metrics.md)."""
    return _sluice.metrics()


def metrics_text():
    """metrics() in the Prometheus text exposition format."""
    return _sluice.metrics_text()


class _PrometheusCollector:
    """Hands metrics() to prometheus_client on each scrape of its registry."""

    def collect(self):
        from prometheus_client.metrics_core import Metric
        for family in _sluice.metrics():
            m = Metric(family["name"], family["help"], family["type"])
            for sample_name, labels, value in family["samples"]:
                m.add_sample(sample_name, labels, value)
            yield m


def _register_with_prometheus_client():
    try:
        import prometheus_client
    except ImportError:
        return None
    collector = _PrometheusCollector()
    try:
        prometheus_client.REGISTRY.register(collector)
    except ValueError:  # registered already (a reload)
        return None
    return collector


# With prometheus_client installed, sluice's series appear wherever the
# process already serves its default registry (start_http_server, ...).
_prometheus_collector = _register_with_prometheus_client()
