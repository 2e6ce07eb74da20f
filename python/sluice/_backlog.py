"""Telling the trainer that a tier falls behind: a warning, once per
pipeline and tier, when a save finds a later tier with a backlog (steps
committed on a faster tier and due there) at a threshold, or finds that the
tier superseded a step (backlog policy "coalesce")."""

import threading
import warnings


class BacklogWarning(UserWarning):
    """A later tier (e.g. Ceph) receives checkpoints more slowly than they are
    taken: steps reach it late, or (backlog policy "coalesce") not at all."""


_lock = threading.Lock()
_thresholds = {"steps": 2, "bytes": 0}
_warned = set()  # (id of the pipeline, tier)


def set_thresholds(steps, bytes_):
    if not isinstance(steps, int) or steps < 0 or not isinstance(bytes_, int) or bytes_ < 0:
        raise ValueError("sluice: backlog_warn_steps and backlog_warn_bytes must be non-negative ints")
    with _lock:
        _thresholds["steps"] = steps
        _thresholds["bytes"] = bytes_


def _human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.2f} {unit}"
    return f"{n} B"


def warn_if_behind(pipeline, backlog, stacklevel=3):
    """Warns (once per pipeline and tier) about the first later tier in
    `backlog` (a SaveHandle's backlog()) that is at a threshold."""
    with _lock:
        steps_at, bytes_at = _thresholds["steps"], _thresholds["bytes"]
        for tier, b in enumerate(backlog):
            if tier == 0 or (id(pipeline), tier) in _warned:
                continue
            behind = ((steps_at and b["steps"] >= steps_at) or (bytes_at and b["bytes"] >= bytes_at)
                      or b["superseded"] > 0)
            if not behind:
                continue
            _warned.add((id(pipeline), tier))
            superseded = (f"; {b['superseded']} older step(s) were superseded there and will not reach it"
                          if b["superseded"] else "")
            warnings.warn(
                f"sluice: tier {tier} ({b['uri']}) falls behind the checkpoint rate: {b['steps']} step(s), "
                f"{_human(b['bytes'])}, are committed on a faster tier and not yet drained there{superseded}. "
                f"Raise its rate limit, save less often, or set max_backlog_steps to hold saves back "
                f"(this warning is given once per tier)",
                BacklogWarning, stacklevel=stacklevel)
            return
