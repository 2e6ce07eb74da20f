"""Moving checkpoints between DCP's own format (a directory written by
torch.distributed.checkpoint's FileSystemWriter) and a sluice store, both
ways: the migration path onto sluice and back off it.

    python -m sluice.dcp_convert import DCP_DIR --store STORE --name NAME --step STEP
    python -m sluice.dcp_convert export --store STORE --name NAME [--step STEP] DCP_DIR

    sluice.dcp_convert.import_dcp("/old/ckpt/step_1000", "/data/ckpt", "run1", 1000)
    sluice.dcp_convert.export_dcp("/data/ckpt", "run1", 1000, "/tmp/as_dcp")

Either way the checkpoint is read whole into this process's memory (every
tensor at its full, unsharded size, as the metadata describes it) and
written as one rank: it needs memory for the whole checkpoint. What a
checkpoint holds is kept: every tensor (shards of several ranks joined into
one), every non-tensor value, the same fully qualified names, so a later
dcp.load with any world size reads it as it read the original. A sluice
import commits atomically (the step is complete or absent); an export
writes a new DCP directory, which must not exist yet.
"""

import argparse
import os
import sys

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import metadata as _metadata

from . import close
from .torch import StorageReader, StorageWriter

__all__ = ["import_dcp", "export_dcp", "main"]


def _empty_state(metadata):
    """A flat state dict with an empty full-size tensor (or a placeholder
    for a non-tensor value) per item of `metadata`."""
    state = {}
    for fqn, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, _metadata.TensorStorageMetadata):
            state[fqn] = torch.empty(entry.size, dtype=entry.properties.dtype)
        else:
            state[fqn] = None  # a non-tensor value: the load puts it here
    return state


def _copy(reader, writer):
    metadata = reader.read_metadata()
    state = _empty_state(metadata)
    dcp.load(state, storage_reader=reader, no_dist=True)
    dcp.save(state, storage_writer=writer, no_dist=True)
    return len(state)


def import_dcp(dcp_dir, store, name, step):
    """Copies the DCP checkpoint in `dcp_dir` into sluice `store` as
    name@step. Returns the number of items copied."""
    if not os.path.isfile(os.path.join(dcp_dir, ".metadata")):
        raise FileNotFoundError(f"sluice: {dcp_dir} is not a DCP checkpoint (no .metadata)")
    return _copy(dcp.FileSystemReader(dcp_dir), StorageWriter(store, name, step))


def export_dcp(store, name, step, dcp_dir):
    """Writes sluice checkpoint name@step of `store` (step "latest": the
    newest) as a DCP checkpoint in the new directory `dcp_dir`. Returns the
    number of items copied."""
    if os.path.exists(dcp_dir) and os.listdir(dcp_dir):
        raise FileExistsError(f"sluice: {dcp_dir} exists and is not empty")
    return _copy(StorageReader(store, name, step), dcp.FileSystemWriter(dcp_dir))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m sluice.dcp_convert", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="a DCP directory into a sluice store")
    imp.add_argument("dcp_dir")
    exp = sub.add_parser("export", help="a sluice checkpoint as a new DCP directory")
    exp.add_argument("dcp_dir")
    for p in (imp, exp):
        p.add_argument("--store", required=True, help="sluice store URI (a path, file://, rados://)")
        p.add_argument("--name", required=True, help="sluice checkpoint name")
    imp.add_argument("--step", type=int, required=True, help="the step to commit it as")
    exp.add_argument("--step", default="latest", help="the step to export (default: the newest)")
    args = parser.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    try:
        if args.command == "import":
            n = import_dcp(args.dcp_dir, args.store, args.name, args.step)
            print(f"imported {n} items from {args.dcp_dir} as {args.name}@{args.step} of {args.store}")
        else:
            if args.step not in ("latest", "latest-good") and not args.step.isdigit():
                raise ValueError(f"--step {args.step!r} is not a step: give a number (e.g. --step 1000), "
                                 "latest or latest-good")
            step = args.step if args.step in ("latest", "latest-good") else int(args.step)
            n = export_dcp(args.store, args.name, step, args.dcp_dir)
            print(f"exported {n} items of {args.name}@{args.step} of {args.store} to {args.dcp_dir}")
    except (OSError, ValueError, RuntimeError) as e:
        # The one error form of the CLI (doc/cli.md): one line, "sluice: ...".
        message = " ".join(str(e).split())
        if message.startswith("sluice: "):
            message = message[len("sluice: "):]
        print(f"sluice: {message}", file=sys.stderr)
        return 1
    finally:
        close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
