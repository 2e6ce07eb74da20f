"""Lazy snapshots: a save that returns before its tensors are copied.

sluice.save(..., snapshot="lazy") and DCP's async_save through sluice's
stager with async_staging=True return once the save is planned and its small
tensors are copied. The large ones are copied into staging in the
background while training goes on, and the trainer is blocked only when it
is about to change one that is not copied yet:

- Every torch.optim.Optimizer step runs a pre-hook (one, process-wide,
  installed at the first lazy save) that waits until every tensor of a
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

import logging
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
_pending = []                     # LazySave objects not yet finished
_optimizers = weakref.WeakSet()   # every optimizer seen stepping
_finisher = [None]                  # the thread that finishes copies nobody waits for
_hook = [None]                    # the optimizer step pre-hook's handle, once installed
_finisher_queue = queue.Queue()


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
    order = _step_order(seen_optimizers() if optimizers is None else optimizers)
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
    checked, and the finish."""

    def __init__(self, lazy, label, entries):
        self.lazy = lazy
        self.label = label
        by_storage = {}
        for index, e in enumerate(entries):
            by_storage.setdefault(e.span[0], []).append(index)
        # (an Entry per lazily copied tensor, their indexes by storage),
        # replaced as one by finish() once finished.
        self._index = (entries, by_storage)
        self._checked = set()                   # entry indexes checked and released
        self._per_optimizer = weakref.WeakKeyDictionary()
        self._errors = []
        self._lock = threading.Lock()
        self._finished = threading.Event()
        self._on_staged = []                    # callables run once finished
        self.wait_seconds = 0.0                 # the trainer blocked in hooks and wait_staged
        self.copy_seconds = 0.0                 # set once finished
        self.staged_at = None                   # time.perf_counter() when the copy was seen done

    @property
    def finished(self):
        return self._finished.is_set()

    def _entries_of(self, optimizer, entries, by_storage):
        found = self._per_optimizer.get(optimizer)
        if found is None:
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

    def _check(self, entries, indexes):
        """Under _lock: records each entry changed since the save."""
        for index in indexes:
            if index in self._checked:
                continue
            self._checked.add(index)
            e = entries[index]
            if e.tensor._version != e.version:
                self._errors.append(f"'{e.key}' (version {e.version} at the save, {e.tensor._version} "
                                    f"when its copy was done)")

    def before_step(self, optimizer):
        """The optimizer pre-hook's part: waits for the tensors `optimizer`
        changes. Never raises into the step: what it cannot tell, it waits
        for in full."""
        (entries, by_storage), lazy = self._index, self.lazy
        if self.finished or lazy is None:
            return
        try:
            indexes = [i for i in self._entries_of(optimizer, entries, by_storage) if i not in self._checked]
        except Exception:  # a tensor whose memory cannot be told: wait for the whole copy
            self._finish_quietly()
            return
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
            if not self.finished:
                self._check(entries, indexes)

    def finish(self):
        """Waits for the whole copy, checks what no hook checked, and finishes:
        the save commits, or fails naming each tensor changed too early."""
        lazy = self.lazy
        if self.finished or lazy is None:
            return
        copy_error = None
        try:
            lazy.wait_all()
        except _sluice.Error as e:
            copy_error = e
        if self.staged_at is None:
            self.staged_at = time.perf_counter()
        error = None
        with self._lock:
            if self.finished:
                return
            try:
                entries = self._index[0]
                self._check(entries, range(len(entries)))
                if self._errors and copy_error is None:
                    error = (f"{self.label}: not committed: tensors changed in place before the lazy "
                             f"snapshot copied them: {', '.join(self._errors[:5])}"
                             f"{' and more' if len(self._errors) > 5 else ''}. Call handle.wait_staged() "
                             f"before changing saved tensors outside optimizer.step(), or save with "
                             f"snapshot='eager'")
            finally:
                # Finished whatever happened above: the writer waits for it.
                lazy.finish(error)
                # The tensors may go, and the snapshot with its hold on the
                # pipeline (sluice.close() then waits for the commit).
                self.copy_seconds = lazy.copy_seconds
                self.lazy = None
                self._index = ([], {})
                self._finished.set()
                callbacks, self._on_staged = self._on_staged, []
        with _lock:
            if self in _pending:
                _pending.remove(self)
        if error is not None:
            _report(f"sluice: {error}")
        for callback in callbacks:
            try:
                callback()
            except Exception as e:  # one failing callback does not starve the others
                _report(f"sluice: a callback waiting for {self.label} to be staged failed: {e!r}")

    def _finish_quietly(self):
        try:
            self.wait_staged()
        except Exception as e:
            _report(f"sluice: waiting for {self.label} to be staged failed: {e!r}")

    def wait_staged(self):
        start = time.perf_counter()
        self.finish()
        self.wait_seconds += time.perf_counter() - start

    def when_staged(self, callback):
        """Runs callback() once finished (at once if it is)."""
        with self._lock:
            if not self.finished:
                self._on_staged.append(callback)
                return
        callback()


def _report(message):
    """A RuntimeWarning, or a log record where warnings are errors (this
    runs in the pre-hook and on the finishing thread: never raise there)."""
    try:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    except Exception:
        logging.getLogger("sluice").error(message)


def _before_step(optimizer, args, kwargs):
    with _lock:
        _optimizers.add(optimizer)
        saves = list(_pending)
    for save in saves:
        save.before_step(optimizer)
    return None


def _finish_in_background():
    while True:
        save = _finisher_queue.get()
        try:
            save.finish()
        except BaseException as e:  # never lose the thread: later saves need it
            logging.getLogger("sluice").error("sluice: finishing %s failed: %r", save.label, e)
        del save  # not kept while waiting for the next one
        _finisher_queue.task_done()


def install_step_hook():
    """Registers the process-wide optimizer step pre-hook, once (at the
    first lazy save: eager-only users never run it)."""
    with _lock:
        if _hook[0] is None:
            from torch.optim.optimizer import register_optimizer_step_pre_hook
            _hook[0] = register_optimizer_step_pre_hook(_before_step)


def seen_optimizers():
    with _lock:
        return list(_optimizers)


def start(lazy, label, entries):
    """Registers the lazy snapshot `lazy` (a _sluice.LazySnapshot) of
    `entries` for the pre-hook and the background finisher."""
    install_step_hook()
    save = LazySave(lazy, label, entries)
    with _lock:
        _pending.append(save)
        if _finisher[0] is None:
            _finisher[0] = threading.Thread(target=_finish_in_background, name="sluice-lazy-finisher",
                                          daemon=True)
            _finisher[0].start()
    _finisher_queue.put(save)
    return save


def finish_all():
    """Finishes every pending lazy save (waiting for its copy), and waits until
    the finishing thread let go of them all: before the pipelines close, so
    that nothing of a save holds its pipeline open past sluice.close()."""
    with _lock:
        saves = list(_pending)
        finisher = _finisher[0]
    for save in saves:
        save.finish()
    del saves
    if finisher is not None and finisher.is_alive():
        _finisher_queue.join()
