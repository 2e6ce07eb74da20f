"""Lazy snapshots: a save that returns before its tensors are copied.

sluice.save(..., snapshot="lazy") and DCP's async_save through sluice's
stager with async_staging=True return once the save is planned and its small
tensors are copied. The large ones are copied into staging in the
background while training goes on, and the trainer is blocked only when it
is about to change one that is not copied yet:

- Every torch.optim.Optimizer step runs a pre-hook (one, process-wide,
  installed when this module loads) that waits until every tensor of a
  pending lazy save that this optimizer owns (its parameters and their
  state) is copied. Those are copied first, in the order the step walks
  them, for the optimizers sluice has seen step (or was given).
- Anything else that changes a saved tensor in place must call
  handle.wait_staged() first.
- Tensors the optimizer does not own and that are small (under
  EAGER_BYTES: buffers such as batch-norm statistics, step counters, RNG
  state) are copied before the save returns, since forward changes some.

A tensor changed in place before its copy, with neither a wait nor the
pre-hook (a stray in-place op), is detected by its version counter, and
the save then fails at commit: nothing is committed, handle.wait() raises
naming the tensor. A change through `.data` or raw memory bypasses the
counter and is not detected. The check runs when the tensor's copy is known
done (in the pre-hook, or once the whole copy is), so a stray change made
after its copy is reported too.
"""

import queue
import threading
import time
import warnings
import weakref

import torch

from . import _sluice

# Tensors the optimizer does not own and smaller than this are copied before
# the save returns.
EAGER_BYTES = 1 << 20

_lock = threading.Lock()
_pending = []                     # LazySave objects not yet sealed
_optimizers = weakref.WeakSet()   # every optimizer seen stepping
_sealer = [None]                  # the thread that seals copies nobody waits for
_sealer_queue = queue.Queue()


def _span(tensor):
    """(storage address, first byte, end byte) of a tensor's memory (a
    DTensor's: its local shard's)."""
    tensor = getattr(tensor, "_local_tensor", tensor)
    storage = tensor.untyped_storage()
    start = tensor.storage_offset() * tensor.element_size()
    return storage.data_ptr(), start, start + tensor.numel() * tensor.element_size()


def optimizer_tensors(optimizer):
    """The tensors `optimizer`'s step changes, in the order it walks them:
    each parameter, then its state. Tensors without memory of their own
    (meta, fake) are left out."""
    out = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            for t in [p] + list(optimizer.state.get(p, {}).values()):
                if isinstance(t, torch.Tensor) and getattr(t, "_local_tensor", t).device.type != "meta":
                    out.append(t)
    return out


def _step_order(optimizers):
    """{(storage address, first byte): rank} over the optimizers' tensors."""
    order = {}
    for optimizer in optimizers:
        for t in optimizer_tensors(optimizer):
            try:
                address, start, _ = _span(t)
            except RuntimeError:  # no storage of its own: nothing of it is saved
                continue
            order.setdefault((address, start), len(order))
    return order


class Entry:
    """A lazily copied tensor: its item index, key, and version at the save."""

    __slots__ = ("item", "key", "tensor", "version", "span")

    def __init__(self, item, key, tensor):
        self.item, self.key, self.tensor = item, key, tensor
        self.version = tensor._version
        self.span = _span(tensor)


def order_items(tensors, optimizers=None):
    """Splits (key, metadata, tensor) triples into (eager, lazy) lists, the
    lazy ones in the order they should be copied: the tensors of
    `optimizers` (None: those seen stepping) in step order, then the rest in
    state-dict order."""
    order = _step_order(list(_optimizers) if optimizers is None else optimizers)
    eager, owned, rest = [], [], []
    for entry in tensors:
        tensor = entry[2]
        address, start, _ = _span(tensor)
        rank = order.get((address, start))
        if rank is not None:
            owned.append((rank, entry))
        elif tensor.numel() * tensor.element_size() < EAGER_BYTES:
            eager.append(entry)
        else:
            rest.append(entry)
    owned.sort(key=lambda pair: pair[0])
    return eager, [entry for _, entry in owned] + rest


class LazySave:
    """One lazy save's copy: which items hold which tensors, what was
    checked, and the seal."""

    def __init__(self, lazy, label, entries):
        self.lazy = lazy
        self.label = label
        self._entries = entries                 # an Entry per lazily copied tensor
        self._by_storage = {}
        for index, e in enumerate(entries):
            self._by_storage.setdefault(e.span[0], []).append(index)
        self._checked = set()                   # entry indexes checked and released
        self._per_optimizer = weakref.WeakKeyDictionary()
        self._errors = []
        self._lock = threading.Lock()
        self._sealed = threading.Event()
        self._on_staged = []                    # callables run once sealed
        self.wait_seconds = 0.0                 # the trainer blocked in hooks and wait_staged
        self.copy_seconds = 0.0                 # set once sealed
        self.staged_at = None                   # time.perf_counter() when the copy was seen done

    @property
    def sealed(self):
        return self._sealed.is_set()

    def _entries_of(self, optimizer):
        found = self._per_optimizer.get(optimizer)
        if found is None:
            entries, by_storage = self._entries, self._by_storage
            found = set()
            for t in optimizer_tensors(optimizer):
                address, start, end = _span(t)
                for index in by_storage.get(address, ()):
                    _, s, e = entries[index].span
                    if s < end and start < e:
                        found.add(index)
            found = sorted(found)
            self._per_optimizer[optimizer] = found
        return found

    def _check(self, indexes):
        """Under _lock: records each entry changed since the save."""
        for index in indexes:
            if index in self._checked:
                continue
            self._checked.add(index)
            e = self._entries[index]
            if e.tensor._version != e.version:
                self._errors.append(f"'{e.key}' (version {e.version} at the save, {e.tensor._version} "
                                    f"when its copy was done)")

    def before_step(self, optimizer):
        entries, lazy = self._entries, self.lazy  # finish() drops them once sealed
        if self.sealed or lazy is None:
            return
        try:
            owned = self._entries_of(optimizer)
        except RuntimeError:
            # A tensor whose memory cannot be told (no storage of its own):
            # wait for the whole copy rather than guess.
            self.wait_staged()
            return
        indexes = [i for i in owned if i not in self._checked]
        if not indexes:
            return
        start = time.perf_counter()
        try:
            lazy.wait_items([entries[i].item for i in indexes])
        except _sluice.Error:
            return  # the copy failed: the save fails with it, the step may go on
        finally:
            self.wait_seconds += time.perf_counter() - start
        with self._lock:
            if not self.sealed:
                self._check(indexes)

    def finish(self):
        """Waits for the whole copy, checks what no hook checked, and seals:
        the save commits, or fails naming each tensor changed too early."""
        lazy = self.lazy
        if self.sealed or lazy is None:
            return
        copy_error = None
        try:
            lazy.wait_all()
        except _sluice.Error as e:
            copy_error = e
        if self.staged_at is None:
            self.staged_at = time.perf_counter()
        with self._lock:
            if self.sealed:
                return
            self._check(range(len(self._entries)))
            if self._errors and copy_error is None:
                error = (f"{self.label}: not committed: tensors changed in place before the lazy "
                         f"snapshot copied them: {', '.join(self._errors[:5])}"
                         f"{' and more' if len(self._errors) > 5 else ''}. Call handle.wait_staged() "
                         f"before changing saved tensors outside optimizer.step(), or save with "
                         f"snapshot='eager'")
                lazy.seal(error)
                warnings.warn(f"sluice: {error}", RuntimeWarning, stacklevel=2)
            else:
                lazy.seal(None)
            # The tensors may go, and the snapshot with its hold on the
            # pipeline (sluice.close() then waits for the commit).
            self.copy_seconds = lazy.copy_seconds
            self.lazy = None
            self._entries = []
            self._by_storage = {}
            self._sealed.set()
            callbacks, self._on_staged = self._on_staged, []
        with _lock:
            if self in _pending:
                _pending.remove(self)
        for callback in callbacks:
            callback()

    def wait_staged(self):
        start = time.perf_counter()
        self.finish()
        self.wait_seconds += time.perf_counter() - start

    def when_staged(self, callback):
        """Runs callback() once sealed (at once if it is)."""
        with self._lock:
            if not self.sealed:
                self._on_staged.append(callback)
                return
        callback()


def _before_step(optimizer, args, kwargs):
    _optimizers.add(optimizer)
    if not _pending:
        return None
    with _lock:
        saves = list(_pending)
    for save in saves:
        save.before_step(optimizer)
    return None


def _seal_in_background():
    while True:
        save = _sealer_queue.get()
        try:
            save.finish()
        except Exception as e:  # never lose the thread: the next save needs it
            warnings.warn(f"sluice: sealing {save.label} failed: {e}", RuntimeWarning)
        del save  # not kept while waiting for the next one


def start(lazy, label, entries):
    """Registers the lazy snapshot `lazy` (a _sluice.LazySnapshot) of
    `entries` for the pre-hook and the background sealer."""
    save = LazySave(lazy, label, entries)
    with _lock:
        _pending.append(save)
        if _sealer[0] is None:
            _sealer[0] = threading.Thread(target=_seal_in_background, name="sluice-lazy-sealer",
                                          daemon=True)
            _sealer[0].start()
    _sealer_queue.put(save)
    return save


def finish_all():
    """Seals every pending lazy save (waiting for its copy): before the
    pipelines close."""
    with _lock:
        saves = list(_pending)
    for save in saves:
        save.finish()


from torch.optim.optimizer import register_optimizer_step_pre_hook  # noqa: E402

register_optimizer_step_pre_hook(_before_step)
