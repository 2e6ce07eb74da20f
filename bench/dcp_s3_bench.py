#!/usr/bin/env python3
"""torch.distributed.checkpoint (DCP) to an S3 object store: sluice's
StorageWriter/Reader on s3:// against DCP's FsspecWriter/Reader over s3fs,
and against s3torchconnector's S3StorageWriter/Reader where it works, on the
same server, same state, same run, rounds alternating.

    eval "$(scripts/ceph-dev-cluster env)"
    PYTHONPATH=build/python .venv/bin/python bench/dcp_s3_bench.py [--gib 2] [--runs 3]

The state is a model + torch.optim.Adam state dict (bench/torch_bench.py's).
Per round and writer, dcp.async_save(state, storage_writer=W):
  - "resume": the time async_save blocked (training may go on);
  - "durable": the time until its future is done (every object stored and,
    for sluice, the checkpoint committed);
then dcp.load into preallocated tensors, after the page cache is dropped
(needs root; the figures are marked warm otherwise). sluice's staging arena
is opened once, before the rounds, as a training job opens it.

Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, else SLUICE_S3_ACCESS_KEY
/ SLUICE_S3_SECRET_KEY (scripts/ceph-dev-cluster env). A peer that fails
against the server is reported with its error, and left out of the ratios.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
import warnings

# Debian 12's radosgw refuses the newer flexible-checksum headers of boto3/s3fs.
os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

import sluice  # noqa: E402
import sluice.torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
SLUICE_BIN = os.environ.get("SLUICE_BIN", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "sluice"))
from torch_bench import drop_caches, make_state, nbytes  # noqa: E402
from dcp_bench import zeros_like_state  # noqa: E402


def fmt(xs):
    return f"{statistics.median(xs):7.3f} s ({min(xs):.3f}-{max(xs):.3f})"


class Peer:
    """One way of writing and reading a DCP checkpoint at a location."""

    def __init__(self, name, writer, reader, cleanup):
        self.name, self.writer, self.reader, self.cleanup = name, writer, reader, cleanup
        self.times = {"resume": [], "durable": [], "load": []}
        self.error = None


def fsspec_peer(bucket, prefix, endpoint):
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
    import s3fs
    fs = s3fs.S3FileSystem(endpoint_url=endpoint)
    root = f"s3://{bucket}/{prefix}/fsspec"
    return Peer("DCP FsspecWriter (s3fs)", lambda run: FsspecWriter(f"{root}/{run}"),
                lambda run: FsspecReader(f"{root}/{run}"),
                lambda run: fs.rm(f"{root}/{run}", recursive=True))


def s3torch_peer(bucket, prefix, endpoint):
    from s3torchconnector import S3ClientConfig
    from s3torchconnector._s3client import S3Client
    from s3torchconnector.dcp import S3StorageReader, S3StorageWriter
    from s3torchconnector.dcp.s3_file_system import S3FileSystem
    cfg = S3ClientConfig(force_path_style=True)
    root = f"s3://{bucket}/{prefix}/s3torch"

    def at_endpoint(io):
        # Its own constructors take no endpoint: point their file system at the server.
        io.fs = S3FileSystem("us-east-1", s3_client=S3Client("us-east-1", endpoint=endpoint, s3client_config=cfg))
        io.path = io.fs.init_path(f"{root}/{io.run}")
        return io

    def writer(run):
        w = S3StorageWriter("us-east-1", f"{root}/{run}", s3client_config=cfg)
        w.run = run
        return at_endpoint(w)

    def reader(run):
        r = S3StorageReader("us-east-1", f"{root}/{run}", s3client_config=cfg)
        r.run = run
        return at_endpoint(r)
    return Peer("s3torchconnector S3StorageWriter", writer, reader,
                lambda run: remove_prefix(bucket, f"{prefix}/s3torch/{run}/", endpoint))


def sluice_rm(store, run):
    subprocess.run([SLUICE_BIN, "rm", "--store", store, "--name", "bench", "--step", str(run)],
                   capture_output=True, check=True)


def remove_prefix(bucket, prefix, endpoint):
    """Every object and open multipart upload under `prefix`: the bench
    leaves nothing on the server, whatever a peer left."""
    import boto3
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
    for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=bucket, Key=u["Key"], UploadId=u["UploadId"])


def sluice_peer(bucket, prefix, endpoint):
    store = f"s3://{bucket}/{prefix}/sluice?endpoint={endpoint}&addressing=path"
    # incremental=False: every round writes every byte, as the peers do (the
    # state does not change between rounds, so an incremental save would
    # write nothing after the first).
    return Peer("sluice StorageWriter (s3://)",
                lambda run: sluice.torch.StorageWriter(store, "bench", run, incremental=False),
                lambda run: sluice.torch.StorageReader(store, "bench", run),
                lambda run: sluice_rm(store, run))


def one_round(peer, state, dest, run, cold):
    t0 = time.perf_counter()
    future = dcp.async_save(state, storage_writer=peer.writer(run), no_dist=True)
    resume = time.perf_counter() - t0
    future.result()
    durable = time.perf_counter() - t0
    cold &= drop_caches()
    t0 = time.perf_counter()
    dcp.load(dest, storage_reader=peer.reader(run), no_dist=True)
    load = time.perf_counter() - t0
    for k, v in (("resume", resume), ("durable", durable), ("load", load)):
        peer.times[k].append(v)
    return cold


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=float, default=2.0, help="state size in GiB")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--endpoint", default=os.environ.get("SLUICE_S3_ENDPOINT", "http://127.0.0.1:7480"))
    p.add_argument("--bucket", default=os.environ.get("SLUICE_S3_BUCKET", "sluice-test"))
    args = p.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", os.environ.get("SLUICE_S3_ACCESS_KEY", ""))
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", os.environ.get("SLUICE_S3_SECRET_KEY", ""))
    os.environ.setdefault("AWS_ENDPOINT_URL", args.endpoint)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)

    state = make_state(int(args.gib * (1 << 30)))
    size = nbytes(state)
    dest = zeros_like_state(state)
    prefix = f"dcp-s3-bench-{uuid.uuid4().hex[:8]}"
    sluice.configure(staging_bytes=((size >> 21) + 16) << 21)
    peers = []
    for make in (sluice_peer, fsspec_peer, s3torch_peer):
        try:
            peers.append(make(args.bucket, prefix, args.endpoint))
        except Exception as e:  # a peer not installed
            print(f"# {make.__name__}: not available: {type(e).__name__}: {e}")
    sluice.pipeline(peers[0].writer(0).store)  # the arena, once, before training
    cold = True
    for run in range(1, args.runs + 1):
        for peer in peers:
            if peer.error:
                continue
            try:
                cold = one_round(peer, state, dest, run, cold)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # DCP's CheckpointException is a BaseException
                lines = [ln for ln in str(e).splitlines() if ln.strip()]
                peer.error = f"{type(e).__name__}: {(lines[-1] if lines else '')[:300]}"
                print(f"# {peer.name} failed in round {run}: {peer.error}", flush=True)
                continue
            print(f"round {run} {peer.name}: " + ", ".join(f"{k} {v[-1]:.3f}" for k, v in peer.times.items()),
                  flush=True)
            # Removed at once: a small test cluster holds few such states.
            peer.cleanup(run)

    print(f"\nstate {size / (1 << 30):.2f} GiB, {args.runs} rounds, torch {torch.__version__}, {args.endpoint}, "
          f"loads {'cold' if cold else 'WARM (no root to drop the page cache)'}")
    for peer in peers:
        if peer.times["resume"]:
            print(f"  {peer.name:34s} resume {fmt(peer.times['resume'])}  durable {fmt(peer.times['durable'])}"
                  f"  load {fmt(peer.times['load'])}")
        if peer.error:
            print(f"  {peer.name:34s} FAILED: {peer.error}")
    ours = peers[0]
    for peer in peers[1:]:
        if not peer.times["resume"] or not ours.times["resume"]:
            continue
        m = {k: statistics.median(v) for k, v in peer.times.items()}
        s = {k: statistics.median(v) for k, v in ours.times.items()}
        print(f"sluice vs {peer.name} (medians): resume {s['resume'] / m['resume']:.3f}x, "
              f"durable {s['durable'] / m['durable']:.3f}x, load {m['load'] / s['load']:.2f}x faster")
    sluice.close()
    remove_prefix(args.bucket, prefix + "/", args.endpoint)


if __name__ == "__main__":
    main()
