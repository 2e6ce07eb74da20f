#!/usr/bin/env python3
"""`sluice plan`'s predictions against measured runs on scripts/testbed.

    sudo .venv/bin/python bench/planner_validation.py [--out DIR] [--mib 256] [--rounds 2]

Brings the test bed up (4 compute hosts, 3 storage hosts with 2 OSDs each)
unless one is up, and takes it down again if it started it. Then:

1. Calibrates a profile on compute host c1 (`sluice plan calibrate`, its NVMe
   stand-in and the test bed's RADOS pool), in runs of its own.
2. For each configuration, predicts first (`sluice plan --json`, layout
   nvme+ceph, from that profile with the configuration's link cap, drain cap
   or slow OSD), then measures it with plain `sluice` commands on the hosts:
   - saves of --mib MiB on N hosts at once to [the host's NVMe, RADOS]: the
     stall (the slowest host's), the time until tier 0 holds it, and until
     RADOS does (each host's `sluice save --json`);
   - a lost host: c2 lost and replaced, then its state read back from RADOS
     (`sluice verify`) while the survivors read theirs from their NVMe;
   - a capped rebuild: c1's NVMe emptied, `sluice rebuild --rate-limit`.
3. Writes DIR/validation.md: predicted, measured (median of --rounds), and
   the error, for every row; DIR/*.json: every prediction and run.

Every host of the test bed shares this machine's cores and disk: the model's
hosts do not. Rows where that decides the figure say so.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TB = os.path.join(HERE, "scripts", "testbed")
SLUICE = os.path.join(HERE, "build", "sluice")
PYTHON = os.path.join(HERE, ".venv", "bin", "python")
MiB = 1 << 20


def run(args, check=True, capture=True):
    r = subprocess.run(args, capture_output=capture, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr[-600:]}")
    return r


def tb(*args, check=True):
    return run([TB, *args], check=check)


def on(host, *args):
    """A command on a test bed host, started (a Popen)."""
    return subprocess.Popen([TB, "exec", host, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc):
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(proc.args)}: exit {proc.returncode}: {err[-600:]}")
    return out


def nvme(host):
    return tb("nvme", host).stdout.strip()


class Bed:
    def __init__(self):
        self.started = False

    def up(self):
        if tb("status", check=False).returncode != 0:
            tb("up", "--compute", "4", "--storage", "3", "--osds-per-host", "2")
            self.started = True
        env = tb("env").stdout
        for line in env.splitlines():
            if line.startswith("export "):
                k, v = line[len("export "):].split("=", 1)
                os.environ[k] = v.strip("'\"")
        self.uri = os.environ["SLUICE_TESTBED_RADOS_URI"]

    def down(self):
        if self.started:
            tb("down", check=False)


def rados_uri(base, prefix):
    path, _, query = base.partition("?")
    return f"{path}/{prefix}?{query}" if query else f"{path}/{prefix}"


def predict(out_dir, name, profile, hosts, mib, edits):
    """`sluice plan --json` for `hosts` hosts of one rank of `mib` MiB."""
    p = json.loads(json.dumps(profile))
    for path, value in edits.items():
        node = p
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    pf, jf = os.path.join(out_dir, f"{name}.profile.json"), os.path.join(out_dir, f"{name}.job.json")
    with open(pf, "w") as f:
        json.dump(p, f, indent=1)
    with open(jf, "w") as f:
        json.dump({"format": "sluice.plan.job", "version": 1, "state_bytes_per_rank": mib * MiB,
                   "ranks_per_host": 1, "hosts": hosts, "interval_s": 600, "step_s": 1}, f)
    r = run([SLUICE, "plan", "--profile", pf, "--job", jf, "--layout", "nvme+ceph", "--json"])
    return json.loads(r.stdout)


def saves(bed, hosts, mib, step, tag, extra=()):
    """sluice.save of `mib` MiB in memory on each host at once (the path a
    trainer runs: bench/planner_save.py); per host its JSON."""
    procs = []
    env = f"PYTHONPATH={os.path.join(HERE, 'build', 'python')}"
    at = time.time() + 6 + 3 * len(hosts)  # every host ready (torch imported, arena faulted) by then
    for h in hosts:
        procs.append(on(h, "env", env, PYTHON, os.path.join(HERE, "bench", "planner_save.py"), nvme(h),
                        rados_uri(bed.uri, f"pv-{tag}-{h}"), f"pv-{h}", str(step), str(mib), *extra,
                        "--at", str(at)))
    return [json.loads(finished(p).strip().splitlines()[-1]) for p in procs]


def measure_saves(bed, hosts, mib, step, tag, extra=()):
    runs = saves(bed, hosts, mib, step, tag, extra)
    stall = max(r["stall_seconds"] for r in runs)
    tier0 = max(r["tiers"][0]["durable_seconds"] for r in runs)
    durable = max(r["tiers"][1]["durable_seconds"] for r in runs)
    return {"stall": stall, "tier0_durable": tier0, "durable": durable}, runs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="/tmp/sluice-planner-validation")
    parser.add_argument("--mib", type=int, default=256, help="state per host (MiB)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("planner_validation.py: needs root (the test bed's network namespaces)")
    os.makedirs(args.out, exist_ok=True)
    bed = Bed()
    bed.up()
    rows = []  # (config, quantity, predicted, measured, note)
    try:
        t0 = time.time()
        cal = os.path.join(args.out, "calibrated.json")
        finished(on("c1", SLUICE, "plan", "calibrate", "--tier", os.path.join(nvme("c1"), "calibrate"),
                    "--tier", rados_uri(bed.uri, "pv-calibrate"), "--bytes", f"{args.mib}MiB",
                    "--nic", "10GiB", "--out", cal))
        print(f"calibrated in {time.time() - t0:.1f} s", flush=True)
        with open(cal) as f:
            profile = json.load(f)
        step = [int(time.time())]

        def config(name, hosts, edits, extra=(), before=None, after=None, note=""):
            pred = predict(args.out, name, profile, len(hosts), args.mib, edits)
            if len(hosts) > 1:
                # The test bed's hosts share this machine's memory and disk:
                # each gets 1/N of what one host alone was calibrated at.
                alone = pred
                pred = predict(args.out, name, profile, len(hosts), args.mib,
                               dict(edits, **shared_host_rates(profile, len(hosts))))
                note = (f"{len(hosts)} hosts on one machine: host rates / {len(hosts)} "
                        f"(independent hosts: stall {alone['stall']['seconds']:.3f} s, "
                        f"tier 0 {alone['tier0_durable']['seconds']:.3f} s, "
                        f"durable {alone['durable']['seconds']:.3f} s)")
            measured = []
            for _ in range(args.rounds):
                if before:
                    before()
                step[0] += 1
                m, runs = measure_saves(bed, hosts, args.mib, step[0], name, extra)
                measured.append(m)
                with open(os.path.join(args.out, f"{name}.{step[0]}.json"), "w") as f:
                    json.dump(runs, f)
            if after:
                after()
            for q in ("stall", "tier0_durable", "durable"):
                rows.append((name, q, pred[q]["seconds"], statistics.median(m[q] for m in measured),
                             pred[q]["bound"], note))
            print(f"{name}: done", flush=True)

        config("1-host", ["c1"], {})
        config("2-hosts", ["c1", "c2"], {})
        config("4-hosts", ["c1", "c2", "c3", "c4"], {})
        config("1-host-200mbit", ["c1"], {"host.nic_bytes_per_s": 25e6},
               before=lambda: tb("cap", "c1", "200mbit"), after=lambda: tb("uncap", "c1"))
        config("2-hosts-200mbit", ["c1", "c2"], {"host.nic_bytes_per_s": 25e6},
               before=lambda: [tb("cap", h, "200mbit") for h in ("c1", "c2")],
               after=lambda: [tb("uncap", h) for h in ("c1", "c2")])
        config("2-hosts-drain-cap-20MiB", ["c1", "c2"],
               {"host.nic_bytes_per_s": 10 * 1024 * MiB, "host.storage_link_share": 20 * MiB / (10 * 1024 * MiB)},
               extra=("--drain-cap", str(20 * MiB)))

        def slow(on_):
            p, d = ("0.5", "0.2") if on_ else ("0", "0")
            tb("exec", "s1", "ceph", "tell", "osd.0", "config", "set",
               "osd_debug_inject_dispatch_delay_probability", p)
            tb("exec", "s1", "ceph", "tell", "osd.0", "config", "set",
               "osd_debug_inject_dispatch_delay_duration", d)
        config("1-host-slow-osd", ["c1"], {"failures.slow_osd": True},
               before=lambda: slow(True), after=lambda: slow(False))
        link_share(bed, args, profile, rows, step)
        backlog(bed, args, profile, rows, step)
        recovery_and_rebuild(bed, args, profile, rows, step)
        fewer_osds(bed, args, profile, rows, step, config)
    finally:
        bed.down()
    write_table(args.out, rows)


def tx_bytes(host):
    return int(tb("exec", host, "cat", "/sys/class/net/eth0/statistics/tx_bytes").stdout)


def link_share(bed, args, profile, rows, step):
    """c1's link capped at 200 Mbit/s, drains capped at half of it: the share
    training keeps while a drain runs, from the bytes c1's link sent."""
    link, cap = 25e6, 12 * MiB
    pred = predict(args.out, "link-share", profile, 1, args.mib,
                   {"host.nic_bytes_per_s": link, "host.storage_link_share": cap / link})
    tb("cap", "c1", "200mbit")
    measured = []
    try:
        for _ in range(args.rounds):
            step[0] += 1
            before = tx_bytes("c1")
            run_ = saves(bed, ["c1"], args.mib, step[0], "share", ("--drain-cap", str(cap)))[0]
            sent = tx_bytes("c1") - before
            drain = run_["tiers"][1]["durable_seconds"] - run_["tiers"][0]["durable_seconds"]
            measured.append(1 - sent / drain / link)
    finally:
        tb("uncap", "c1")
    rows.append(("1-host-200mbit-drain-cap-12MiB", "training_link_share_during_drain",
                 pred["training_link_share_during_drain"], statistics.median(measured),
                 "drains capped at 12 MiB/s of a 24 MiB/s link",
                 "a fraction, not seconds: 1 - (bytes c1 sent / drain time) / link"))


def backlog(bed, args, profile, rows, step):
    """Saves every I seconds against a drain of ~11 s (c1's link at 200
    Mbit/s): the backlog grows below the drain time and stays bounded above."""
    tb("cap", "c1", "200mbit")
    try:
        for every in (4, 16):
            job_edits = {"host.nic_bytes_per_s": 25e6}
            pred = predict(args.out, f"backlog-{every}s", profile, 1, args.mib, job_edits)
            step[0] += 10
            env = f"PYTHONPATH={os.path.join(HERE, 'build', 'python')}"
            out = finished(on("c1", "env", env, PYTHON, os.path.join(HERE, "bench", "planner_save.py"), nvme("c1"),
                              rados_uri(bed.uri, f"pv-backlog-{every}"), "pv-backlog", str(step[0]), str(args.mib),
                              "--every", str(every), "--count", "4"))
            found = json.loads(out.strip().splitlines()[-1])["backlog"]
            grew = any(b["steps"] >= 2 or b["superseded"] > 0 for b in found)
            predicted_grows = every < pred["min_interval"]["seconds"]
            rows.append((f"backlog-every-{every}s", "backlog grows", float(predicted_grows), float(grew),
                         f"a drain takes {pred['drain']['seconds']:.1f} s",
                         "1 = grows, 0 = bounded; per save, steps due on RADOS / superseded: " +
                         ", ".join(f"{b['steps']}/{b['superseded']}" for b in found)))
    finally:
        tb("uncap", "c1")


def fewer_osds(bed, args, profile, rows, step, config):
    """The same saves on a test bed of 3 OSDs (one per storage host), from
    the profile calibrated on 6: the OSD count is the model's input."""
    tb("down")
    tb("up", "--compute", "4", "--storage", "3", "--osds-per-host", "1")
    bed.started = True
    bed.up()
    three = json.loads(json.dumps(profile))
    three["tiers"]["ceph"]["osds"] = 3
    profile.clear()
    profile.update(three)
    config("1-host-3-osds", ["c1"], {})
    config("2-hosts-3-osds", ["c1", "c2"], {})


def shared_host_rates(profile, n):
    """Profile edits for n test bed hosts sharing one machine's memory and disk."""
    h = profile["host"]
    return {f"host.{k}": h[k] / n for k in ("memcpy_bytes_per_s", "nvme_write_bytes_per_s", "nvme_read_bytes_per_s")}


def recovery_and_rebuild(bed, args, profile, rows, step):
    """A lost host (c2) reads its state back from RADOS while c1 reads its
    own from NVMe; then c1's NVMe is emptied and rebuilt under a cap."""
    pred = predict(args.out, "lost-host", profile, 2, args.mib,
                   dict({"failures.restart_s": 0}, **shared_host_rates(profile, 2)))
    measured = []
    for _ in range(args.rounds):
        step[0] += 1
        saves(bed, ["c1", "c2"], args.mib, step[0], "lost", ("--keep",))
        tb("lose", "c2")
        tb("replace", "c2")
        # Both read at once; each `sluice verify` times its own read (every
        # chunk checked), so process start-up is not counted.
        survivor = on("c1", SLUICE, "verify", "--store", nvme("c1"), "--name", "pv-c1", "--step", str(step[0]),
                      "--json")
        replaced = on("c2", SLUICE, "verify", "--store", rados_uri(bed.uri, "pv-lost-c2"), "--name", "pv-c2",
                      "--step", str(step[0]), "--json")
        seconds = [json.loads(finished(p))["seconds"] for p in (survivor, replaced)]
        measured.append(max(seconds))
    rows.append(("lost-host", "recovery", pred["recovery"]["seconds"], statistics.median(measured),
                 pred["recovery"]["bound"], "c1 reads its NVMe while the replaced c2 reads RADOS; "
                 "2 hosts on one machine: host rates / 2"))
    cap = 16 * MiB
    pred = predict(args.out, "rebuild", profile, 1, args.mib,
                   {"failures.drive_bytes": args.mib * MiB, "failures.rebuild_cap_bytes_per_s": cap})
    measured = []
    for _ in range(args.rounds):
        step[0] += 1
        saves(bed, ["c1"], args.mib, step[0], "rebuild", ("--keep",))
        run(["rm", "-rf", os.path.join(nvme("c1"), "ckpt")], check=False)
        t = time.perf_counter()
        finished(on("c1", SLUICE, "rebuild", "--tier", nvme("c1"), "--tier", rados_uri(bed.uri, "pv-rebuild-c1"),
                    "--keep-last", "1", "--rate-limit", "16MiB"))
        measured.append(time.perf_counter() - t)
    rows.append(("rebuild-16MiB", "rebuild", pred["rebuild"]["seconds"], statistics.median(measured),
                 pred["rebuild"]["bound"], ""))


def write_table(out_dir, rows):
    lines = ["| configuration | figure | predicted | measured | error | bound by | note |",
             "|---|---|---|---|---|---|---|"]
    for name, q, p, m, bound, note in rows:
        if q == "backlog grows":
            lines.append(f"| {name} | {q} | {'yes' if p else 'no'} | {'yes' if m else 'no'} | "
                         f"{'same' if p == m else 'MISS'} | {bound} | {note} |")
            continue
        unit = "" if q.startswith("training_link_share") else " s"
        err = (p - m) / m * 100 if m > 0 else float("nan")
        lines.append(f"| {name} | {q} | {p:.3f}{unit} | {m:.3f}{unit} | {err:+.0f}% | {bound} | {note} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "validation.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
