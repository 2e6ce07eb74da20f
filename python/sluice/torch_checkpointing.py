"""sluice as the storage of torch-checkpointing (PyPI torch-checkpointing,
Meta's `torch_checkpointing`).

    import sluice.torch_checkpointing as stc
    manager = stc.SluiceCheckpointManager(stc.manager_config("/data/ckpt"))  # or tiers, below
    manager.save("/data/ckpt/step_1000", {"model": model.state_dict(), "step": 1000}).result()
    manager.load("/data/ckpt/step_1000", into={"model": model.state_dict()})

Checkpoint directories are sluice checkpoints, not directories: the
directory names under `root` map to name@step of the sluice store (by
default a store at `root` itself; or `store=` any URI or tier list)
exactly as sluice.torch's directory ids do: "step_1000" is step_@1000, a
name without a trailing number is that name at step 0. The files
torch-checkpointing writes into a checkpoint ("model_0.pt", "rank_0/x.pt")
are that rank's items, keyed by their path in the checkpoint.

The commit: torch-checkpointing writes every rank's files into
"<root>/tmp_<name>", has every rank pass a barrier, then rank 0 renames
tmp_<name> to <name>; a loader takes a checkpoint whose directory exists
as complete. Here the files go to each rank's part of one pending sluice
save, and the pre-finalize hook that manager_config() installs (it runs on
every rank before that barrier) snapshots the rank's part and waits until
the checkpoint is committed on the fastest tier: rank 0 publishes sluice's
commit record once every rank's manifest is there. The rename then only
checks that the commit happened (OSError naming why not). A checkpoint's
directory "exists" exactly when its commit record does, so a save killed
at any moment leaves nothing either library loads as complete, and two
saves of one directory cannot both commit (the second's rename raises
FileExistsError, as the library's own local storage does).
SluiceCheckpointManager, the library's CheckpointManager with this
storage, refuses a committed directory in save() itself, before anything
is staged or written, and finishes a save in flight at exit.

Ranks: the default process group's rank and size where it is initialized
(torch-checkpointing's async saves write from a spawned process, where it
is not), else $RANK and $WORLD_SIZE (torchrun sets them), else rank 0 of 1;
or SluiceStorageConfig(rank=, world=).
"""

import concurrent.futures
import dataclasses
import functools
import io
import os
import threading
import warnings
from pathlib import Path

from torch_checkpointing import CheckpointManager
from torch_checkpointing.storage.base_storage import ReadArgs, Storage, StorageConfig

from . import _sluice, _state_dict, pipeline
from ._dcp_common import _attempt_from_environment, directory_id

__all__ = ["SluiceStorageConfig", "SluiceStorage", "SluiceCheckpointManager", "manager_config",
           "finish_part"]

_TMP_PREFIX = "tmp_"  # torch-checkpointing's CheckpointWriterConfig.temp_dir_prefix default


@dataclasses.dataclass
class SluiceStorageConfig(StorageConfig):
    """Where checkpoints go: `root` is the directory the checkpoint ids
    (paths) name directories of; `store` the sluice store (a URI or a tier
    list, fastest first; None: a directory store at `root`). Picklable:
    torch-checkpointing builds the storage in its checkpoint process."""
    root: str = ""
    store: object = None
    rank: int | None = None
    world: int | None = None

    def create_storage(self):
        return SluiceStorage(self)


def _rank_and_world(config):
    if config.rank is not None and config.world is not None:
        return config.rank, config.world
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))


def manager_config(root, store=None, *, pre_finalize_callback=None, **kwargs):
    """CheckpointManager.Config with sluice's storage under `root` and the
    pre-finalize hook that commits each save (a pre_finalize_callback of
    yours runs first). Other keyword arguments go to the Config."""
    rank, world = _rank_and_world(SluiceStorageConfig())
    config = SluiceStorageConfig(root=os.fspath(root), store=store, rank=rank, world=world)
    hook = finish_part if pre_finalize_callback is None else functools.partial(
        _then_finish, pre_finalize_callback)
    return CheckpointManager.Config(storage_config=config, pre_finalize_callback=hook, **kwargs)


def finish_part(args):
    """torch-checkpointing's pre-finalize hook: commits this rank's part of
    the save at args.path (see the module's doc)."""
    if isinstance(args.storage, SluiceStorage):
        args.storage.finish(Path(args.path))


def _then_finish(callback, args):
    callback(args)
    finish_part(args)


class SluiceCheckpointManager(CheckpointManager):
    """torch-checkpointing's CheckpointManager over sluice's storage (its
    config made by manager_config()). Beyond the library's manager:

    - save() of a checkpoint directory that is already committed raises
      FileExistsError at once, before anything is staged or written (the
      library's manager finds out only in its checkpoint process, and an
      async save's future raises it);
    - load() of a directory waits for this manager's save of it still in
      flight (then raises FileNotFoundError if that save failed);
    - one not closed is closed as the interpreter exits, finishing its save
      in flight, before the interpreter joins the thread that started the
      library's checkpoint process (the process dies with that thread, and
      the save with it). It is kept until then."""

    def __init__(self, config):
        if not isinstance(getattr(config, "storage_config", None), SluiceStorageConfig):
            raise TypeError("sluice.torch_checkpointing.SluiceCheckpointManager: its config has no "
                            "SluiceStorageConfig; make it with sluice.torch_checkpointing.manager_config()")
        super().__init__(config)
        self._sluice_storage = config.storage_config.create_storage()
        self._in_flight = None  # ((name, step), Future) of the newest async save
        _close_at_exit(self)

    def save(self, checkpoint_id, checkpoint):
        checkpoint_of = self._sluice_storage.refuse_committed(checkpoint_id)
        future = super().save(checkpoint_id, checkpoint)
        if future is not None:
            self._in_flight = (checkpoint_of, future)
        return future

    def load(self, checkpoint_id, into=None, **kwargs):
        in_flight = self._in_flight
        if in_flight is not None and in_flight[0] == self._sluice_storage.checkpoint_of(checkpoint_id):
            concurrent.futures.wait([in_flight[1]])  # its error is the save's future's
        return super().load(checkpoint_id, into, **kwargs)

    def close(self):
        try:
            super().close()
        finally:
            with _open_lock:
                _open_managers.discard(self)


_open_lock = threading.Lock()
_open_managers = set()  # SluiceCheckpointManagers not closed yet
_exit_hook = []         # [True] once _close_open_managers is registered


def _close_at_exit(manager):
    """Keeps `manager` until it is closed, or until the interpreter exits,
    which then closes it ahead of concurrent.futures' join of executor
    threads (registered after the library's executors, it runs first)."""
    with _open_lock:
        _open_managers.add(manager)
        if _exit_hook:
            return
        _exit_hook.append(True)
    register = getattr(threading, "_register_atexit", None)  # what concurrent.futures uses
    if register is not None:
        register(_close_open_managers)


def _close_open_managers():
    with _open_lock:
        managers = list(_open_managers)
    for m in managers:
        try:
            m.close()
        except Exception as e:  # noqa: BLE001 - exiting: say it in one line
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            warnings.warn(f"sluice.torch_checkpointing: the save in flight at exit failed: {first}",
                          RuntimeWarning)


class _Pending:
    """One rank's part of one save: its items until finish() snapshots it."""

    def __init__(self, staging):
        self.staging = staging
        self.keys = {}  # key -> size
        self.keep = []  # buffers the snapshot reads
        self.handle = None
        self.error = None


class SluiceStorage(Storage):
    """torch-checkpointing's Storage over a sluice store (see the module's
    doc). Thread-safe: the library writes several files at once."""

    def __init__(self, config):
        if not config.root:
            raise ValueError("sluice.torch_checkpointing: SluiceStorageConfig needs root, the "
                             "directory the checkpoint paths are in")
        import sluice
        if sluice._peer_options["peer_replicas"]:
            # Refused rather than ignored: a job that asked for peers must
            # not believe its saves have them.
            raise ValueError("sluice.torch_checkpointing: peer_replicas is set, and this storage does "
                             "not replicate to peers yet (doc/peer.md): its saves would be neither safe "
                             "nor replicated. Save with sluice.torch's StorageWriter, or configure "
                             "peer_replicas=0 for this storage")
        self.config = config
        self.root = Path(os.path.abspath(config.root))
        self.store = config.store if config.store is not None else str(self.root)
        self._lock = threading.Lock()
        self._pending = {}  # (name, step) -> _Pending
        self._readers = {}  # (name, step) -> (sluice Reader, {key: size})

    # Paths -------------------------------------------------------------
    def _split(self, path):
        """(directory name, key) of `path`: key "" for the directory itself,
        directory "" for the root."""
        path = Path(os.path.abspath(os.fspath(path)))
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            raise OSError(f"sluice.torch_checkpointing: {path} is not under the storage's root "
                          f"{self.root}") from None
        parts = rel.parts
        return (parts[0] if parts else ""), "/".join(parts[1:])

    @staticmethod
    def _id(directory):
        """(name, step, is_tmp) of a checkpoint directory name."""
        tmp = directory.startswith(_TMP_PREFIX)
        _, name, step = directory_id(directory[len(_TMP_PREFIX):] if tmp else directory)
        return name, step, tmp

    def _committed(self, name, step):
        """(reader, {key: size}) of the committed checkpoint name@step, or
        (None, {}) when there is none."""
        with self._lock:
            found = self._readers.get((name, step))
        if found is None:
            try:
                with _state_dict.in_python_terms():
                    reader = pipeline(self.store, _reading=True).open(name, step)
            except _sluice.NotFoundError:
                return None, {}  # no such checkpoint, or no store yet
            found = (reader, {k: size for k, _, size, _ in reader.items()})
            with self._lock:
                self._readers[(name, step)] = found
        return found

    def checkpoint_of(self, path):
        """(name, step) of the checkpoint directory `path`; OSError if it is
        not one."""
        directory, key = self._split(path)
        if not directory or key or self._id(directory)[2]:
            raise OSError(f"sluice.torch_checkpointing: {path} is not a checkpoint directory")
        return self._id(directory)[:2]

    def refuse_committed(self, path):
        """FileExistsError if the checkpoint directory `path` is committed
        (intact or not); else its (name, step). Creates nothing."""
        name, step = self.checkpoint_of(path)
        try:
            with _state_dict.in_python_terms():
                pipeline(self.store, _reading=True).open(name, step)
        except _sluice.NotFoundError:
            return name, step
        except _sluice.CorruptionError as e:
            raise FileExistsError(f"sluice.torch_checkpointing: refusing to save {path}: it is already "
                                  f"committed (as {name}@{step}, damaged); nothing was written") from e
        raise FileExistsError(f"sluice.torch_checkpointing: refusing to save {path}: it is already "
                              f"committed (as {name}@{step}); nothing was written")

    def _item(self, path):
        """(reader, key, size) of a committed checkpoint's file; OSError if absent."""
        directory, key = self._split(path)
        name, step, tmp = self._id(directory) if directory else (None, None, False)
        reader, sizes = self._committed(name, step) if directory and not tmp else (None, {})
        if key in sizes:
            return reader, key, sizes[key]
        raise FileNotFoundError(f"sluice.torch_checkpointing: no file {path}")

    # Writes --------------------------------------------------------------
    def _add(self, path, data):
        directory, key = self._split(path)
        if not directory or not key:
            raise OSError(f"sluice.torch_checkpointing: {path} is not a file in a checkpoint")
        name, step, tmp = self._id(directory)
        if not tmp:
            raise OSError(f"sluice.torch_checkpointing: {path}: files are written to the checkpoint's "
                          f"'{_TMP_PREFIX}' directory and committed by its rename "
                          f"(CheckpointWriterConfig.write_to_temp_dir must stay on)")
        view = memoryview(data).cast("B")
        with self._lock:
            part = self._pending.get((name, step))
            if part is None:
                part = self._begin(name, step)
                self._pending[(name, step)] = part
            if part.handle is not None:
                raise OSError(f"sluice.torch_checkpointing: {name}@{step} was finished; {key} came late")
            if key in part.keys:
                raise OSError(f"sluice.torch_checkpointing: {path} was written twice")
            part.keys[key] = view.nbytes
            part.keep.append(view)
            part.staging.add_buffer(key, b'{"format":"torch_checkpointing.file"}', view)

    def _begin(self, name, step):
        rank, world = _rank_and_world(self.config)
        p = pipeline(self.store)
        try:
            pending = p.begin(name, step, rank, world, _attempt_from_environment(),
                              attempt_is_unique=False, incremental=False)
        except _sluice.AlreadyExistsError as e:
            raise FileExistsError(f"sluice.torch_checkpointing: {self.root}/{name}{step} is "
                                  f"already committed ({e})") from e
        return _Pending(_state_dict.Staging(p, pending))

    def stream_write(self, path):
        return _FileWriter(self, path)

    def get_write_stream(self, path, data):
        return _FileWriter(self, path)

    def write(self, path, data):
        self._add(path, bytes(data))  # the caller may reuse its buffer once this returns

    def finish(self, tmp_dir):
        """Snapshots this rank's part of the save in `tmp_dir` and waits
        until the checkpoint is committed on the fastest tier (raises why
        not). A rank that wrote no file still contributes an empty part."""
        directory, key = self._split(tmp_dir)
        name, step, tmp = self._id(directory) if directory and not key else (None, None, False)
        if not tmp:
            raise OSError(f"sluice.torch_checkpointing: {tmp_dir} is not a checkpoint's "
                          f"'{_TMP_PREFIX}' directory")
        with self._lock:
            part = self._pending.get((name, step))
            if part is None:
                part = self._pending[(name, step)] = self._begin(name, step)
            if part.handle is None:
                part.handle = part.staging.snapshot()
        try:
            part.handle.wait(tier=0)
        except _sluice.Error as e:
            part.error = e
            raise

    def rename(self, src_path, dst_path, is_directory=False, background_cleanup=False):
        src_dir, src_key = self._split(src_path)
        dst_dir, dst_key = self._split(dst_path)
        if src_key or dst_key or not src_dir or not dst_dir:
            raise OSError(f"sluice.torch_checkpointing: only a checkpoint's commit (renaming its "
                          f"'{_TMP_PREFIX}' directory) is supported, not {src_path} -> {dst_path}")
        name, step, tmp = self._id(src_dir)
        if not tmp or self._id(dst_dir) != (name, step, False):
            raise OSError(f"sluice.torch_checkpointing: {src_path} does not commit as {dst_path}")
        with self._lock:
            part = self._pending.get((name, step))
        if part is None:
            raise FileNotFoundError(f"sluice.torch_checkpointing: nothing was written to {src_path}")
        if part.handle is None:
            rank, world = _rank_and_world(self.config)
            if world > 1:
                raise OSError("sluice.torch_checkpointing: a multi-rank save commits in the "
                              "pre-finalize hook on every rank: build the CheckpointManager with "
                              "sluice.torch_checkpointing.manager_config()")
            self.finish(src_path)
        try:
            part.handle.wait(tier=0)
        except _sluice.AlreadyExistsError as e:
            raise FileExistsError(f"sluice.torch_checkpointing: refusing to commit {dst_path}: the "
                                  f"destination is occupied ({e})") from e
        except _sluice.Error as e:
            raise OSError(f"sluice.torch_checkpointing: {dst_path} was not committed: {e}") from e
        finally:
            with self._lock:
                self._pending.pop((name, step), None)

    def mkdir(self, path, recursive=True):
        self._split(path)  # checkpoints are sluice names: nothing to make

    def delete(self, path):
        raise OSError(f"sluice.torch_checkpointing: a committed checkpoint's files are not "
                      f"deleted one by one ({path}); remove the checkpoint (rmdir)")

    def rmdir(self, path):
        directory, key = self._split(path)
        if not directory or key:
            raise OSError(f"sluice.torch_checkpointing: {path} is not a checkpoint directory")
        name, step, tmp = self._id(directory)
        if tmp:
            with self._lock:
                part = self._pending.pop((name, step), None)
            if part is not None and part.handle is None:
                part.staging.abandon()
            return
        with self._lock:
            self._readers.pop((name, step), None)
        pipeline(self.store).remove(name, step)

    # Reads ---------------------------------------------------------------
    def stream_read(self, path, read_args=None):
        reader, key, size = self._item(path)
        read_args = read_args or ReadArgs()
        if read_args.known_size_bytes is not None and read_args.known_size_bytes != size:
            raise OSError(f"sluice.torch_checkpointing: {path} holds {size} bytes, not "
                          f"{read_args.known_size_bytes}")
        if read_args.pre_read_full_file:
            return io.BytesIO(reader.read_bytes(key))
        return _FileReader(reader, key, size)

    def read(self, path, read_args=None):
        reader, key, _ = self._item(path)
        return reader.read_bytes(key)

    def exists(self, path):
        directory, key = self._split(path)
        if not directory:
            return True
        name, step, tmp = self._id(directory)
        if tmp:
            with self._lock:
                part = self._pending.get((name, step))
            return part is not None and (not key or key in part.keys or
                                         any(k.startswith(key + "/") for k in part.keys))
        reader, sizes = self._committed(name, step)
        if reader is None:
            return False
        return not key or key in sizes or any(k.startswith(key + "/") for k in sizes)

    def isdir(self, path):
        directory, key = self._split(path)
        if not self.exists(path):
            return False
        if not directory or not key:
            return True
        return not any(k == key for k in self._keys(directory))

    def getsize(self, path):
        return self._item(path)[2]

    def _keys(self, directory):
        name, step, tmp = self._id(directory)
        if tmp:
            with self._lock:
                part = self._pending.get((name, step))
            return list(part.keys) if part is not None else []
        return list(self._committed(name, step)[1])

    def ls(self, path):
        directory, key = self._split(path)
        if not directory:
            # A best guess at the names: leading zeros of a step are not kept.
            return sorted({f"{c['name']}{c['step']}" for c in
                           pipeline(self.store, _reading=True).list("") if c.get("complete")})
        if not self.exists(path):
            raise FileNotFoundError(f"sluice.torch_checkpointing: no directory {path}")
        prefix = key + "/" if key else ""
        return sorted({k[len(prefix):].split("/")[0] for k in self._keys(directory) if k.startswith(prefix)})

    def remap_path(self, path):
        directory, key = self._split(path)
        if not directory:
            return str(self.store)
        name, step, _ = self._id(directory)
        return f"{self.store}/{name}@{step}" + (f"#{key}" if key else "")


class _FileWriter(io.RawIOBase):
    """One file of a save: bytes gathered as written, added at close."""

    def __init__(self, storage, path):
        super().__init__()
        self._storage, self._path = storage, path
        storage._split(path)  # a bad path fails here, before the writes
        self._buffer = io.BytesIO()

    def writable(self):
        return True

    def write(self, data):
        return self._buffer.write(data)

    def close(self):
        if not self.closed:
            try:
                self._storage._add(self._path, self._buffer.getbuffer())
            finally:
                super().close()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            super().close()  # a failed write adds nothing
            return False
        self.close()
        return False


class _FileReader(io.RawIOBase):
    """A committed file, read by byte ranges (every chunk verified)."""

    def __init__(self, reader, key, size):
        super().__init__()
        self._reader, self._key, self._size, self._pos = reader, key, size, 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self._pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer):
        import torch
        view = memoryview(buffer).cast("B")
        n = max(0, min(view.nbytes, self._size - self._pos))
        if n:
            target = torch.frombuffer(view, dtype=torch.uint8, count=n)
            self._reader.read_range(self._key, self._pos, target.data_ptr(), n)
            self._pos += n
        return n
