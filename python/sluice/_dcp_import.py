"""Imports PyTorch's Distributed Checkpoint (DCP) module under either name.

torch >= 2.0 calls it ``torch.distributed.checkpoint``; torch 1.13 (Debian 12's
python3-torch) has only ``torch.distributed._shard.checkpoint``, and on Python
3.11 that import fails with

    ValueError: mutable default <class '...TensorProperties'> for field
    tensor_properties is not allowed: use default_factory

because ``ShardedTensorMetadata`` declares ``field(default=TensorProperties())``
and Python 3.11 refuses unhashable dataclass defaults. While importing it,
``dataclasses.field`` turns exactly such a default into a ``default_factory``
that returns a copy, which is what Python 3.11 asks for (and which no longer
shares one mutable instance between all metadata objects). Every other call of
``field`` behaves as before. Once imported, the module is cached, so the
user's own imports of DCP work too.
"""

import contextlib
import copy
import dataclasses
import importlib
import sys


def _is_unhashable_dataclass_instance(value):
    return (dataclasses.is_dataclass(value) and not isinstance(value, type)
            and type(value).__hash__ is None)


@contextlib.contextmanager
def _unhashable_dataclass_defaults_as_factories():
    original_field = dataclasses.field

    def field(*args, **kwargs):
        default = kwargs.get("default", dataclasses.MISSING)
        if _is_unhashable_dataclass_instance(default):
            del kwargs["default"]
            kwargs["default_factory"] = lambda: copy.deepcopy(default)
        return original_field(*args, **kwargs)

    dataclasses.field = field
    try:
        yield
    finally:
        dataclasses.field = original_field


def import_checkpoint_module():
    """Returns the DCP module: torch.distributed.checkpoint if this torch has
    it, else torch.distributed._shard.checkpoint (importable on Python 3.11)."""
    try:
        return importlib.import_module("torch.distributed.checkpoint")
    except ModuleNotFoundError as e:
        if e.name not in ("torch.distributed.checkpoint",):
            raise
    legacy = "torch.distributed._shard.checkpoint"
    already_fine = "torch.distributed._shard.sharded_tensor.metadata" in sys.modules
    if already_fine or sys.version_info < (3, 11):
        return importlib.import_module(legacy)
    with _unhashable_dataclass_defaults_as_factories():
        return importlib.import_module(legacy)
