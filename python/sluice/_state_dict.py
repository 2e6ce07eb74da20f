"""sluice.save / sluice.load: PyTorch state dicts as sluice checkpoints.

Layout of one checkpoint (one rank):
  t/<path>      one item per tensor, keyed by its path in the state dict
                ("model/layers.0.weight", "optim/state/3/exp_avg"); the bytes
                are the tensor's memory, copied by the engine straight from
                its data pointer into staging. Metadata: JSON with dtype and
                shape.
  o/<n>         a tensor reachable only through some other object (not a
                dict, list or tuple), in the order the pickler met it.
  structure     the state dict's skeleton, pickled, with every tensor
                replaced by a reference to its item: keys, ints, floats,
                strings, optimizer param_groups, scheduler state, exactly as
                they were. Tensor bytes are never pickled.

Everything that can be wrong with the input (an unsupported object, a tensor
on a device sluice cannot read, two keys naming the same item) raises before
the save begins, so nothing is written or committed then.
"""

import contextlib
import io
import json
import time
import warnings
import pickle
import re

import torch

from . import _backlog, _lazy, _sluice
from ._handles import LazySaveHandle, SaveHandle

STRUCTURE_KEY = "structure"
FORMAT_NAME = "sluice.torch.state_dict"
FORMAT_VERSION = 1

# Every dtype with a fixed element size whose bytes are plain memory.
_DTYPES = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
_DTYPE_NAMES = {v: k for k, v in _DTYPES.items()}

# Leaves that pickle to what they are; anything else is test-pickled on its
# own first, so a failure names its path.
_PLAIN_LEAVES = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _escape_component(component):
    """A state-dict key as one '/'-free, non-empty item-key component; distinct
    strings stay distinct."""
    text = component.replace("%", "%25").replace("/", "%2F")
    if text in ("", ".", ".."):
        text = {"": "%", ".": "%2E", "..": "%2E%2E"}[text]
    return text


def _path_key(path):
    """The item key of the tensor at `path` (never empty: the root is a dict)."""
    return "t/" + "/".join(_escape_component(str(p)) for p in path)


def _describe(path):
    return "/".join(str(p) for p in path) if path else "<root>"


def tensor_metadata(tensor):
    """The item metadata of a tensor: what load needs to rebuild it."""
    meta = {"dtype": _DTYPE_NAMES[tensor.dtype], "shape": list(tensor.shape)}
    if isinstance(tensor, torch.nn.Parameter):
        meta["parameter"] = True
        meta["requires_grad"] = bool(tensor.requires_grad)
    return json.dumps(meta, separators=(",", ":")).encode()


def check_tensor(tensor, where):
    """Raises unless sluice can copy `tensor`'s bytes: from host memory, or
    from a CUDA device by DMA."""
    if tensor.device.type == "meta":
        raise TypeError(f"sluice: tensor {where} is on the meta device: it has no data to save")
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError(f"sluice: tensor {where} is on device '{tensor.device}'; sluice reads "
                         "host memory and CUDA devices only: move it with .cpu()")
    if tensor.layout != torch.strided:
        raise TypeError(f"sluice: tensor {where} has layout {tensor.layout}; only dense (strided) "
                        "tensors are supported (convert sparse ones with .to_dense())")
    if tensor.is_quantized:
        raise TypeError(f"sluice: tensor {where} is quantized; quantized tensors are not supported")
    if tensor.dtype not in _DTYPE_NAMES:
        raise TypeError(f"sluice: tensor {where} has unsupported dtype {tensor.dtype}")


def host_bytes_of(tensor):
    """A tensor whose memory holds `tensor`'s values in row-major order: the
    tensor itself when it already does, else one contiguous copy."""
    plain = tensor.detach()
    if plain.is_conj():
        plain = plain.resolve_conj()
    if plain.is_neg():
        plain = plain.resolve_neg()
    return plain.contiguous()


class Staging:
    """One save's items on their way into a pending checkpoint (of
    `pipeline`). A CPU tensor is memcpy'd into staging at the snapshot; a
    CUDA tensor's bytes are copied device-to-host straight into its staging
    slot by DMA, on sluice's own stream, every copy in flight at once (no
    .cpu() tensor is made). The first CUDA tensor a process saves pins the
    pipeline's arena for DMA (once). snapshot() first waits for every kernel
    queued on the tensors' devices (any stream: a side stream may still be
    writing them).

    lazy=True: the items are added at snapshot(), buffers and small tensors
    first, then the tensors of `optimizers` in step order (_lazy), and
    snapshot() returns a LazySaveHandle once the small ones are copied."""

    def __init__(self, pipeline, pending, lazy=False, optimizers=None, label=""):
        self.pipeline = pipeline
        self.pending = pending
        self._devices = set()
        self._lazy = lazy
        self._optimizers = optimizers
        self._label = label
        self._buffers = []   # lazy: (key, metadata, buffer)
        self._tensors = []   # lazy: (key, metadata, tensor)

    def add_tensor(self, key, metadata, tensor):
        """Adds `tensor` (row-major memory: host_bytes_of) as item `key`;
        returns its size in bytes."""
        size = tensor.numel() * tensor.element_size()
        if self._lazy:
            self._tensors.append((key, metadata, tensor))
        else:
            self._add(key, metadata, tensor, size)
        return size

    def _add(self, key, metadata, tensor, size):
        if tensor.device.type == "cuda":
            device = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
            if device not in self._devices:
                self._devices.add(device)
                self.pipeline.pin_for_cuda(device)
            self.pending.add_cuda(key, metadata, tensor.data_ptr(), size, device, tensor)
        else:
            self.pending.add_address(key, metadata, tensor.data_ptr(), size, tensor)

    def add_buffer(self, key, metadata, buffer):
        if self._lazy:
            self._buffers.append((key, metadata, buffer))
        else:
            self.pending.add_buffer(key, metadata, buffer)

    def snapshot(self):
        if not self._lazy:
            for device in sorted(self._devices):
                torch.cuda.synchronize(device)
            return SaveHandle(self.pending.snapshot())
        eager, lazy = _lazy.order_items(self._tensors, self._optimizers)
        for key, metadata, buffer in self._buffers:
            self.pending.add_buffer(key, metadata, buffer)
        for key, metadata, tensor in eager + lazy:
            self._add(key, metadata, tensor, tensor.numel() * tensor.element_size())
        first_lazy = len(self._buffers) + len(eager)
        entries = [_lazy.Entry(first_lazy + i, key, tensor) for i, (key, _, tensor) in enumerate(lazy)]
        self._buffers, self._tensors = [], []
        start = time.perf_counter()
        for device in sorted(self._devices):
            torch.cuda.synchronize(device)
        _lazy.install_step_hook()
        snapshot = self.pending.snapshot_lazily()
        handle = snapshot.handle
        # Registered before anything else runs: a step on another thread
        # from now on waits for what it changes.
        save = _lazy.start(snapshot, self._label, entries)
        snapshot.wait_items(list(range(first_lazy)))
        return LazySaveHandle(save, handle, time.perf_counter() - start)

    def abandon(self):
        self.pending.abandon()


class _Plan:
    """The items of one save, worked out (and checked) before it begins."""

    def __init__(self):
        self.tensors = []          # (key, tensor with row-major memory, metadata)
        self.key_of_tensor = {}    # id(tensor) -> item key
        self.owner_of_key = {}     # item key -> state-dict path that claimed it
        self.keep_alive = []       # the original tensors, so their ids stay unique
        self.structure = b""

    def add_tensor(self, tensor, key, where):
        if id(tensor) in self.key_of_tensor:
            return self.key_of_tensor[id(tensor)]  # shared (tied) tensor: stored once
        check_tensor(tensor, where)
        if key in self.owner_of_key:
            raise ValueError(f"sluice: key collision: {where} and {self.owner_of_key[key]} both "
                             f"map to item '{key}' (keys that print the same, e.g. 1 and '1')")
        self.owner_of_key[key] = where
        self.key_of_tensor[id(tensor)] = key
        self.keep_alive.append(tensor)
        self.tensors.append((key, host_bytes_of(tensor), tensor_metadata(tensor)))
        return key


class _SkeletonPickler(pickle.Pickler):
    """Pickles the state dict with every tensor replaced by its item key."""

    def __init__(self, file, plan):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.plan = plan

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor):
            key = self.plan.key_of_tensor.get(id(obj))
            if key is None:  # reached through an object that is not a container
                key = self.plan.add_tensor(obj, f"o/{len(self.plan.tensors)}",
                                           "inside a non-container object")
            return ("tensor", key)
        return None


def _walk(obj, path, plan, seen):
    if isinstance(obj, torch.Tensor):
        plan.add_tensor(obj, _path_key(path), f"'{_describe(path)}'")
        return
    if isinstance(obj, (dict, list, tuple)):
        if id(obj) in seen:
            return  # the pickler keeps shared containers shared
        seen.add(id(obj))
        if isinstance(obj, dict):
            for k, v in obj.items():
                if not isinstance(k, (str, int, float, bool)) and k is not None:
                    raise TypeError(f"sluice: unsupported key {k!r} (type {type(k).__name__}) in "
                                    f"'{_describe(path)}': keys must be str, int, float or bool")
                _walk(v, path + (k,), plan, seen)
        else:
            for i, v in enumerate(obj):
                _walk(v, path + (i,), plan, seen)
        return
    if isinstance(obj, _PLAIN_LEAVES):
        return
    try:
        _SkeletonPickler(io.BytesIO(), plan).dump(obj)
    except Exception as e:  # pickle raises many kinds; all mean the same here
        raise TypeError(f"sluice: cannot store '{_describe(path)}' of type "
                        f"{type(obj).__module__}.{type(obj).__qualname__}: {e}") from e


def plan_state_dict(state_dict):
    """Checks `state_dict` and lays out its items; raises on bad input."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"sluice.save: state_dict must be a dict, not {type(state_dict).__name__}")
    plan = _Plan()
    _walk(state_dict, (), plan, set())
    out = io.BytesIO()
    try:
        _SkeletonPickler(out, plan).dump(state_dict)
    except Exception as e:
        raise TypeError(f"sluice.save: cannot store the state dict's structure: {e}") from e
    plan.structure = out.getvalue()
    return plan


def save_with(pipeline, name, step, state_dict, async_=True, incremental=True, snapshot="eager",
              optimizers=None):
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError(f"sluice.save: step must be a non-negative int, not {step!r}")
    if snapshot not in ("eager", "lazy"):
        raise ValueError(f"sluice.save: snapshot must be 'eager' or 'lazy', not {snapshot!r}")
    if optimizers is not None:
        optimizers = list(optimizers)
        for o in optimizers:
            if not isinstance(o, torch.optim.Optimizer):
                raise TypeError(f"sluice.save: optimizers must be torch.optim.Optimizer objects, not "
                                f"{type(o).__name__}")
    plan = plan_state_dict(state_dict)
    staging = Staging(pipeline, pipeline.begin(name, step, incremental=bool(incremental)),
                      lazy=snapshot == "lazy", optimizers=optimizers, label=f"{name}@{step}")
    for key, tensor, meta in plan.tensors:
        staging.add_tensor(key, meta, tensor)
    structure_meta = json.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION}).encode()
    staging.add_buffer(STRUCTURE_KEY, structure_meta, plan.structure)
    handle = staging.snapshot()
    _backlog.warn_if_behind(pipeline, handle.backlog(), stacklevel=4)  # at the caller of sluice.save
    if not async_:
        handle.wait()
    return handle


def _parse_tensor_metadata(key, metadata):
    try:
        meta = json.loads(metadata)
        dtype = _DTYPES[meta["dtype"]]
        shape = tuple(int(d) for d in meta["shape"])
    except (ValueError, KeyError, TypeError) as e:
        raise _sluice.CorruptionError(f"item '{key}': unreadable tensor metadata {metadata!r}") from e
    return meta, dtype, shape


def _nbytes(dtype, shape):
    n = torch.tensor([], dtype=dtype).element_size()
    for d in shape:
        n *= d
    return n


def _tensors_by_key(into):
    """The tensors of `into` under the item keys a save of `into` would use."""
    found = {}

    def visit(obj, path, seen):
        if isinstance(obj, torch.Tensor):
            found.setdefault(_path_key(path), (obj, _describe(path)))
        elif isinstance(obj, (dict, list, tuple)) and id(obj) not in seen:
            seen.add(id(obj))
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            for k, v in items:
                visit(v, path + (k,), seen)

    visit(into, (), set())
    return found


# What a weights_only load may rebuild besides tensors, dicts, lists, tuples
# and plain values: as torch.load(weights_only=True) allows, no code.
_SAFE_GLOBALS = {("collections", "OrderedDict"), ("builtins", "set"), ("builtins", "frozenset"),
                 ("builtins", "complex"), ("builtins", "slice"), ("builtins", "range"),
                 ("builtins", "bytearray"), ("torch", "device"), ("torch", "Size")}
_SAFE_GLOBALS |= {("torch", str(d).split(".")[1]) for d in _DTYPES.values()}


class _SkeletonUnpickler(pickle.Unpickler):
    def __init__(self, file, tensors, weights_only=False):
        super().__init__(file)
        self.tensors = tensors
        self.weights_only = weights_only

    def find_class(self, module, name):
        if self.weights_only and (module, name) not in _SAFE_GLOBALS:
            raise pickle.UnpicklingError(
                f"sluice.load(weights_only=True): the checkpoint holds a {module}.{name}, which "
                f"only a full load (weights_only=False, for checkpoints you trust) rebuilds")
        return super().find_class(module, name)

    def persistent_load(self, pid):
        kind, key = pid
        if kind != "tensor" or key not in self.tensors:
            raise _sluice.CorruptionError(f"structure refers to a missing item {pid!r}")
        return self.tensors[key]


@contextlib.contextmanager
def in_python_terms():
    """Re-raises a sluice.Error from the block, class and traceback kept,
    with the CLI flag its message may name (the engine's messages serve the
    CLI too) replaced by the Python argument that does the same."""
    try:
        yield
    except _sluice.Error as e:
        if e.args and isinstance(e.args[0], str):
            e.args = (e.args[0].replace("--step latest-good", 'step="latest-good"'),) + e.args[1:]
        raise


_MAX_NAMED = 10  # keys an error names before it counts the rest


def _refuse_unmatched(existing, items, label):
    """ValueError naming the tensors of `into` (`existing`) that no item of
    `label` fills; one held under a filled key too (tied) is filled there."""
    filled = {id(t) for key, (t, _) in existing.items() if key in items}
    unmatched = [f"'{w}'" for key, (t, w) in existing.items() if key not in items and id(t) not in filled]
    if unmatched:
        more = f" and {len(unmatched) - _MAX_NAMED} more" if len(unmatched) > _MAX_NAMED else ""
        raise ValueError(f"sluice.load: {label} has no tensor for {len(unmatched)} key(s) of `into`: "
                         f"{', '.join(unmatched[:_MAX_NAMED])}{more}; nothing was loaded (strict=False "
                         "loads the rest and leaves these)")


def load_with(pipeline, name, step="latest", into=None, weights_only=False, strict=True):
    latest_good = step == "latest-good"
    if step in ("latest", "latest-good"):
        step = None
    elif not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ValueError("sluice.load: step must be 'latest', 'latest-good' or a non-negative int, "
                         f"not {step!r}")
    try:
        with in_python_terms():
            reader = pipeline.open(name, step)
    except _sluice.CorruptionError as e:
        # A damaged newest step is never skipped unless asked for, and then
        # said so.
        if not latest_good:
            raise
        with in_python_terms():
            good = pipeline.latest_good_step(name)
            reader = pipeline.open(name, good)
        warnings.warn(f"sluice.load: {e}; loading {name}@{good}, the newest intact step", stacklevel=3)
    label = f"{reader.info['name']}@{reader.info['step']}"
    items = {key: (metadata, size) for key, metadata, size, _ in reader.items()}
    if STRUCTURE_KEY not in items:
        # No skeleton (`sluice import` of safetensors files): nested dicts
        # that follow the tensor items' paths, if every item is one.
        if not items or not all(key.startswith("t/") for key in items):
            raise _sluice.InvalidArgumentError(f"{label} was not written by sluice.save "
                                               "(no 'structure' item)")
    else:
        format_meta = json.loads(items[STRUCTURE_KEY][0] or b"{}")
        if format_meta.get("format") != FORMAT_NAME or format_meta.get("version") != FORMAT_VERSION:
            raise _sluice.InvalidArgumentError(f"{label}: unknown state-dict format {format_meta!r}")

    existing = _tensors_by_key(into) if into is not None else {}
    if strict:
        _refuse_unmatched(existing, items, label)
    # Check every destination before reading a byte, so a mismatch leaves
    # all of them untouched.
    plans = []  # (key, meta, tensor to hand out, tensor the bytes land in)
    for key, (metadata, size) in items.items():
        if key == STRUCTURE_KEY:
            continue
        meta, dtype, shape = _parse_tensor_metadata(key, metadata)
        if _nbytes(dtype, shape) != size:
            raise _sluice.CorruptionError(f"{label}: item '{key}' holds {size} bytes, its metadata "
                                          f"says {dtype} {list(shape)}")
        if key in existing:
            dest, where = existing[key]
            if dest.dtype != dtype or tuple(dest.shape) != shape:
                raise ValueError(f"sluice.load: '{where}' (item '{key}') is {dest.dtype} "
                                 f"{list(dest.shape)} in `into`, the checkpoint has {dtype} "
                                 f"{list(shape)}; nothing was loaded")
            check_tensor(dest, f"'{where}' in `into`")
            # A CUDA or non-contiguous destination: read into host memory,
            # then one copy (host-to-device, done when load returns).
            landing = dest if dest.device.type == "cpu" and dest.is_contiguous() else torch.empty(shape, dtype=dtype)
            plans.append((key, meta, dest, landing))
        else:
            fresh = torch.empty(shape, dtype=dtype)
            plans.append((key, meta, fresh, fresh))

    # Order matters: the binding faults fresh memory in ahead of the reads
    # in this order, which is the checkpoint's item order.
    destinations = {key: (landing.data_ptr(), landing.numel() * landing.element_size(),
                          into is None or key not in existing or landing is not out)
                    for key, _, out, landing in plans}
    structure = reader.read_bytes(STRUCTURE_KEY) if STRUCTURE_KEY in items else None
    with torch.no_grad():
        reader.read_all_into(destinations)
        tensors = {}
        for key, meta, out, landing in plans:
            if landing is not out:
                out.copy_(landing)
            elif into is None or key not in existing:
                if meta.get("parameter"):
                    out = torch.nn.Parameter(out, requires_grad=meta.get("requires_grad", True))
            tensors[key] = out
    if structure is None:
        return _nest(tensors)
    return _SkeletonUnpickler(io.BytesIO(structure), tensors, weights_only).load()


def _unescape_component(text):
    """The inverse of _escape_component."""
    special = {"%": "", "%2E": ".", "%2E%2E": ".."}
    if text in special:
        return special[text]
    return re.sub(r"%2F|%25", lambda m: "/" if m.group() == "%2F" else "%", text)


def _nest(tensors):
    """{"t/a/b": x} -> {"a": {"b": x}}."""
    out = {}
    for key, tensor in tensors.items():
        parts = [_unescape_component(p) for p in key[2:].split("/")]
        node = out
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = tensor
    return out
