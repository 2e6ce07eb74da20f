#!/usr/bin/env python3
"""sluice save / restore of one file to s3:// against boto3's transfer
manager (upload_file / download_file) on the same S3 server, alternating,
medians. Each tool's own figure: sluice's --json seconds, boto3's time
around its call in this process.

boto3 is first swept over part sizes and concurrencies (one upload and one
download each) and then run at its best for each; sluice runs at its
defaults unless --sluice-options adds URI options. Which tool goes first
alternates between rounds, and each timed run waits for a quiet machine, so
that the server's work after a run (flushes, garbage collection of what it
replaced) lands on neither tool. The file comes from the page cache for both (it is read
once before the runs); restores and downloads write into a scratch
directory on the same filesystem.

    eval "$(scripts/ceph-dev-cluster env)"
    .venv/bin/python bench/s3_bench.py --size 1GiB --rounds 5

Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, else
SLUICE_S3_ACCESS_KEY / SLUICE_S3_SECRET_KEY (scripts/ceph-dev-cluster env).
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# Debian 12's radosgw refuses boto3's newer flexible-checksum headers.
os.environ.setdefault("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required")
os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required")

import boto3  # noqa: E402
from boto3.s3.transfer import TransferConfig  # noqa: E402
from botocore.config import Config  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def size_bytes(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if text.endswith(u):
            return int(float(text[:-len(u)]) * m)
    return int(text)


def client(endpoint, connections):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                        config=Config(max_pool_connections=connections, s3={"addressing_style": "path"}))


CPU = {}  # tool -> CPU seconds of each run


MACHINE = {}  # tool -> (the machine's busy CPU seconds, every process; wall seconds) of each run


def machine_busy():
    """Busy CPU seconds of the whole machine so far (/proc/stat: user, nice,
    system, irq, softirq): the client's and the server's together, and the
    server's background work (RGW's and the OSDs' flushes) in that window."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def quiesce(most_busy=0.15, window=0.5, give_up_s=30):
    """Waits until the machine is quiet (under `most_busy` of its CPUs busy
    over `window` seconds), at most give_up_s."""
    deadline = time.monotonic() + give_up_s
    while time.monotonic() < deadline:
        before = machine_busy()
        time.sleep(window)
        if (machine_busy() - before) / (window * os.cpu_count()) < most_busy:
            return


def cpu_now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def boto3_put(s3, bucket, key, path, part, threads):
    cfg = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=threads,
                         use_threads=True)
    c, m, t = cpu_now(), machine_busy(), time.perf_counter()
    s3.upload_file(path, bucket, key, Config=cfg)
    s = time.perf_counter() - t
    CPU.setdefault("boto3 upload", []).append(cpu_now() - c)
    MACHINE.setdefault("boto3 upload", []).append((machine_busy() - m, s))
    return s


def boto3_get(s3, bucket, key, path, part, threads):
    cfg = TransferConfig(multipart_threshold=part, multipart_chunksize=part, max_concurrency=threads,
                         use_threads=True)
    c, m, t = cpu_now(), machine_busy(), time.perf_counter()
    s3.download_file(bucket, key, path, Config=cfg)
    s = time.perf_counter() - t
    CPU.setdefault("boto3 download", []).append(cpu_now() - c)
    MACHINE.setdefault("boto3 download", []).append((machine_busy() - m, s))
    return s


def sluice(args, *cmd, json_out=True, label=None):
    m, t = machine_busy(), time.perf_counter()
    out = subprocess.run([args.sluice, *cmd] + (["--json"] if json_out else []), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"sluice {' '.join(cmd)}: {out.stderr.strip()}")
    if label:
        # The machine's CPU over the whole process's wall time: one window.
        MACHINE.setdefault(label, []).append((machine_busy() - m, time.perf_counter() - t))
    return json.loads(out.stdout) if json_out else None


def sweep_boto3(args, key, blob, out, size):
    """boto3's best (part size, threads) for uploads and for downloads: one
    run of each configuration."""
    configs = [(int(p) * MIB, int(t)) for p in args.parts.split(",") for t in args.threads.split(",")]
    print("# boto3 sweep (one run each): upload, download")
    up_best = down_best = None
    for part, threads in configs:
        c = client(args.endpoint, threads)
        quiesce()
        su = boto3_put(c, args.bucket, key, blob, part, threads)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        quiesce()
        sd = boto3_get(c, args.bucket, key, os.path.join(out, "blob.bin"), part, threads)
        print(f"#   part {part // MIB:3d} MiB, {threads:2d} threads: {size / su / MIB:7.1f}, {size / sd / MIB:7.1f} MiB/s")
        up_best = min(up_best or (su, part, threads), (su, part, threads))
        down_best = min(down_best or (sd, part, threads), (sd, part, threads))
    CPU.clear()
    MACHINE.clear()
    print(f"# boto3 at its best: upload {up_best[1] // MIB} MiB x {up_best[2]} threads, "
          f"download {down_best[1] // MIB} MiB x {down_best[2]} threads")
    return up_best[1:], down_best[1:]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="1GiB")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--endpoint", default=os.environ.get("SLUICE_S3_ENDPOINT", "http://127.0.0.1:7480"))
    p.add_argument("--bucket", default=os.environ.get("SLUICE_S3_BUCKET", "sluice-test"))
    p.add_argument("--sluice", default=os.path.join(HERE, "..", "build", "sluice"))
    p.add_argument("--sluice-options", default="", help="URI options added to sluice's store, e.g. part_mib=32&qd=16")
    p.add_argument("--parts", default="8,16,32,64", help="boto3 part sizes to sweep, MiB")
    p.add_argument("--threads", default="4,8,16,32", help="boto3 concurrencies to sweep")
    p.add_argument("--dir", default=None, help="scratch directory (default: a new one under /tmp)")
    args = p.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", os.environ.get("SLUICE_S3_ACCESS_KEY", ""))
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", os.environ.get("SLUICE_S3_SECRET_KEY", ""))
    size = size_bytes(args.size)
    work = args.dir or tempfile.mkdtemp(prefix="sluice-s3-bench-")
    src = os.path.join(work, "src")
    os.makedirs(src, exist_ok=True)
    blob = os.path.join(src, "blob.bin")
    if not os.path.exists(blob) or os.path.getsize(blob) != size:
        with open(blob, "wb") as f:
            for _ in range(0, size, 64 * MIB):
                f.write(os.urandom(min(64 * MIB, size - f.tell())))
    with open(blob, "rb") as f:  # into the page cache
        while f.read(64 * MIB):
            pass
    prefix = f"s3-bench-{os.getpid()}"
    opts = "&" + args.sluice_options if args.sluice_options else ""
    store = f"s3://{args.bucket}/{prefix}/sluice?endpoint={args.endpoint}&addressing=path{opts}"
    key = f"{prefix}/boto3/blob.bin"
    out = os.path.join(work, "out")

    print(f"# {size / MIB:.0f} MiB from the page cache, {args.endpoint}, bucket {args.bucket}")
    (up_part, up_threads), (down_part, down_threads) = sweep_boto3(args, key, blob, out, size)
    up_client, down_client = client(args.endpoint, up_threads), client(args.endpoint, down_threads)

    def sluice_save(step):
        d = sluice(args, "save", "--store", store, "--name", "blob", "--step", str(step), "--from", src, "--full",
                   label="sluice save")
        CPU.setdefault("sluice save", []).append(d["cpu_seconds"])
        return d["seconds"]

    def sluice_restore(step):
        shutil.rmtree(out, ignore_errors=True)
        d = sluice(args, "restore", "--store", store, "--name", "blob", "--step", str(step), "--to", out,
                   label="sluice restore")
        CPU.setdefault("sluice restore", []).append(d["cpu_seconds"])
        shutil.rmtree(out, ignore_errors=True)
        return d["seconds"]

    def boto3_download(_step):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        s = boto3_get(down_client, args.bucket, key, os.path.join(out, "blob.bin"), down_part, down_threads)
        shutil.rmtree(out, ignore_errors=True)
        return s

    writes = [("sluice save", sluice_save),
              ("boto3 upload", lambda _step: boto3_put(up_client, args.bucket, key, blob, up_part, up_threads))]
    reads = [("sluice restore", sluice_restore), ("boto3 download", boto3_download)]
    rows = {name: [] for name, _ in writes + reads}
    for r in range(args.rounds):
        step = r + 1
        # Which tool goes first alternates, and each timed run starts on a
        # quiet machine: the gateway's and OSDs' work after a run (flushes,
        # garbage collection of what the last run replaced) lands on
        # neither tool.
        order = (lambda pair: pair) if r % 2 == 0 else (lambda pair: pair[::-1])
        for name, run in order(writes) + order(reads):
            quiesce()
            rows[name].append(run(step))
        if step > 1:
            sluice(args, "rm", "--store", store, "--name", "blob", "--step", str(step - 1), json_out=False)
        print(f"# round {step}: " + ", ".join(f"{k} {size / v[-1] / MIB:.1f} MiB/s" for k, v in rows.items()))

    med = {k: statistics.median(v) for k, v in rows.items()}
    gib = size / (1 << 30)
    ncpu = os.cpu_count()
    print(f"{'':16s} {'median s':>9s} {'MiB/s':>8s} (min..max MiB/s)  CPU s/GiB (medians): client, machine"
          f" (busy of {ncpu} CPUs)")
    client_cpu, machine_cpu = {}, {}
    for k, v in rows.items():
        client_cpu[k] = statistics.median(CPU[k][-len(v):]) / gib
        machine_cpu[k] = statistics.median(m for m, _ in MACHINE[k]) / gib
        busy = statistics.median(m / (ncpu * wall) for m, wall in MACHINE[k])
        print(f"{k:16s} {med[k]:9.3f} {size / med[k] / MIB:8.1f} ({size / max(v) / MIB:.1f}..{size / min(v) / MIB:.1f})"
              f"  {client_cpu[k]:.2f}, {machine_cpu[k]:.2f} ({busy:.0%})")
    # When the client shares the machine with the server and the machine is
    # saturated, a client that used no CPU at all would free only its own
    # share: the upload's ceiling against boto3 on this machine.
    server = machine_cpu["boto3 upload"] - client_cpu["boto3 upload"]
    if server > 0:
        print(f"save ceiling on this machine: a client using no CPU would reach at most "
              f"{machine_cpu['boto3 upload'] / server:.2f}x boto3 (the server's CPU is "
              f"{server:.2f} s/GiB of boto3's {machine_cpu['boto3 upload']:.2f})")
    print(f"save:    sluice / boto3 = {med['boto3 upload'] / med['sluice save']:.2f}x")
    print(f"restore: sluice / boto3 = {med['boto3 download'] / med['sluice restore']:.2f}x")
    # Leave nothing behind.
    sluice(args, "rm", "--store", store, "--name", "blob", "--step", str(args.rounds), json_out=False)
    up_client.delete_object(Bucket=args.bucket, Key=key)
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
