"""PyTorch Lightning checkpoints on sluice.

    import lightning as L
    from sluice.lightning import SluiceCheckpointIO
    trainer = L.Trainer(plugins=[SluiceCheckpointIO()])          # stores next to the paths
    trainer = L.Trainer(plugins=[SluiceCheckpointIO(["/nvme/ckpt", "rados://pool/ckpt"])])

Lightning names each checkpoint by a path (ModelCheckpoint's
DIR/epoch=0-step=100.ckpt). sluice keeps it as checkpoint name
"epoch=0-step=100.ckpt", at the step of the checkpoint's `global_step`, in the
store `store` (a URI or a tier list, fastest first), or by default in a sluice
store at DIR itself. Saves are asynchronous: save_checkpoint returns once the
state is copied into sluice's staging arena (training goes on while it is
written); removing, loading or tearing down waits for the saves still in
flight, and a save that failed raises there.
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
        self._pending = []  # (store, name, SaveHandle) not yet known committed
        self._lock = threading.Lock()

    def _where(self, path):
        path = os.fspath(path)
        name = os.path.basename(path)
        if not name:
            raise ValueError(f"sluice: checkpoint path {path!r} names no file")
        store = self.store if self.store is not None else os.path.dirname(os.path.abspath(path))
        return store, name

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        if storage_options is not None:
            raise TypeError("sluice.lightning.SluiceCheckpointIO: storage_options are not "
                            "supported; configure the store with SluiceCheckpointIO(store=...)")
        store, name = self._where(path)
        step = int(checkpoint.get("global_step", 0) or 0)
        handle = sluice.save(store, name, step, checkpoint, async_=self.async_save)
        with self._lock:
            self._pending.append((store, name, handle))

    def _wait(self, name=None):
        """Waits for the saves in flight (of `name`, or all); raises the
        first failure."""
        with self._lock:
            waiting = [p for p in self._pending if name is None or p[1] == name]
            self._pending = [p for p in self._pending if p not in waiting]
        for _, _, handle in waiting:
            handle.wait()

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        store, name = self._where(path)
        self._wait(name)
        try:
            return sluice.load(store, name)
        except sluice.NotFoundError as error:
            raise FileNotFoundError(f"Checkpoint not found: {path} ({error})") from error

    def remove_checkpoint(self, path):
        store, name = self._where(path)
        self._wait(name)
        try:
            sluice.remove(store, name)
        except sluice.NotFoundError:
            pass  # as Lightning's own: removing what is not there is no error

    def teardown(self):
        self._wait()
