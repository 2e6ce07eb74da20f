"""PyTorch Lightning checkpoints on sluice.

    import lightning as L
    from sluice.lightning import SluiceCheckpointIO
    trainer = L.Trainer(plugins=[SluiceCheckpointIO()])          # stores next to the paths
    trainer = L.Trainer(plugins=[SluiceCheckpointIO(["/nvme/ckpt", "rados://pool/ckpt"])])

Lightning names each checkpoint by a path (ModelCheckpoint's
DIR/epoch=0-step=100.ckpt, or DIR/last.ckpt saved again and again). sluice
keeps the path's file name as the checkpoint name, in the store `store` (a
URI or a tier list, fastest first) or by default in a sluice store at DIR
itself. Each save of a name is its next step (0, 1, ...): saving a path
again replaces it atomically, as Lightning's own writer does with a rename,
and once the new step is committed the older ones of that name are removed.
Saves are asynchronous: save_checkpoint returns once the state is copied into
sluice's staging arena (training goes on while it is written); loading,
removing or tearing down waits for the saves still in flight, and a save
that failed raises there.
"""

import os
import threading

from lightning.fabric.plugins import CheckpointIO

import sluice

__all__ = ["SluiceCheckpointIO"]


class SluiceCheckpointIO(CheckpointIO):
    def __init__(self, store=None, async_save=True):
        super().__init__()
        self.store = store
        self.async_save = async_save
        self._pending = []  # [store, name, step, SaveHandle] not yet seen committed
        self._next_step = {}  # (store, name) -> the step its next save takes
        self._lock = threading.Lock()

    def _where(self, path):
        path = os.fspath(path)
        name = os.path.basename(path)
        if not name:
            raise ValueError(f"sluice: checkpoint path {path!r} names no file")
        store = self.store if self.store is not None else os.path.dirname(os.path.abspath(path))
        return store, name

    def _store_key(self, store):
        return tuple(store) if isinstance(store, (list, tuple)) else store

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        if storage_options is not None:
            raise TypeError("sluice.lightning.SluiceCheckpointIO: storage_options are not "
                            "supported; configure the store with SluiceCheckpointIO(store=...)")
        self._reap()
        store, name = self._where(path)
        key = (self._store_key(store), name)
        with self._lock:
            step = self._next_step.get(key)
        if step is None:
            # The saving pipeline: the save creates the store if need be
            # (a listing alone creates nothing, and finds no store to list).
            steps = [c["step"] for c in sluice.pipeline(store).list(name)]
            step = max(steps) + 1 if steps else 0
        handle = sluice.save(store, name, step, checkpoint, async_=self.async_save)
        with self._lock:
            self._next_step[key] = step + 1
            self._pending.append((store, name, step, handle))
        self._reap()

    def _reap(self, name=None, wait=False):
        """Settles the saves that are done (all of `name`'s, or all, waiting
        for them if `wait`): raises a failed one, and removes the steps
        a committed save replaced."""
        with self._lock:
            settle = [p for p in self._pending
                      if (wait and (name is None or p[1] == name)) or p[3].done()]
            self._pending = [p for p in self._pending if p not in settle]
        for store, saved_name, step, handle in settle:
            handle.wait()
            older = [c["step"] for c in sluice.list_checkpoints(store, saved_name) if c["step"] < step]
            for s in older:
                try:
                    sluice.remove(store, saved_name, s)
                except sluice.NotFoundError:
                    pass

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        store, name = self._where(path)
        self._reap(name, wait=True)
        try:
            return sluice.load(store, name, weights_only=bool(weights_only))
        except sluice.NotFoundError as error:
            raise FileNotFoundError(f"Checkpoint not found: {path} ({error})") from error

    def remove_checkpoint(self, path):
        store, name = self._where(path)
        self._reap(name, wait=True)
        try:
            sluice.remove(store, name)
        except sluice.NotFoundError:
            pass  # as Lightning's own: removing what is not there is no error

    def teardown(self):
        self._reap(wait=True)
