"""The planner's predictions for the test bed's peer-replica runs
(bench/peer_bench.py, bench/peer_restore_bench.py), to set beside what they
measured (doc/planning.md, "Peer layouts on the test bed").

    build/sluice plan calibrate --tier /tmp/nvme --bytes 1GiB --nic 125000000 --out vm.profile.json
    python3 bench/peer_plan_check.py --profile vm.profile.json --link-mbit 1000 --cap-mbit 500 --mib 1024

From the calibrated profile of one test bed host it writes the profile and
job of the run: `--hosts` hosts of one rank with `--mib` MiB each, links
of `--link-mbit`, the peer cap `--cap-mbit` and the drain's share the rest
of the link (as the benches set them), the test bed's RADOS pool
(`--osds` OSDs at `--osd-write-mib` MiB/s each, 3 copies), no restart
time. The hosts share one machine, so its memory and disk rates are
divided among them (as bench/planner_validation.py does). Prints
`sluice plan --json`'s time until safe, durable and recovery for
nvme+peer+ceph, and recovery for nvme+peer (the restore bench has no
shared tier).
"""

import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", required=True, help="a profile `sluice plan calibrate` wrote on one host")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--mib", type=int, default=1024, help="MiB per host")
    ap.add_argument("--link-mbit", type=float, default=1000)
    ap.add_argument("--cap-mbit", type=float, default=500, help="peer_rate_limit, in Mbit/s")
    ap.add_argument("--osds", type=int, default=6)
    ap.add_argument("--osd-write-mib", type=float, default=152, help="per OSD, as calibrated on the test bed")
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"))
    args = ap.parse_args()
    with open(args.profile) as f:
        profile = json.load(f)
    host = profile["host"]
    for rate in ("memcpy_bytes_per_s", "nvme_write_bytes_per_s", "nvme_read_bytes_per_s"):
        host[rate] /= args.hosts  # one machine's memory and disk, shared by every host
    host["nic_bytes_per_s"] = args.link_mbit * 1e6 / 8
    host["peer_bytes_per_s"] = args.cap_mbit * 1e6 / 8
    host["storage_link_share"] = max(args.link_mbit - args.cap_mbit, args.link_mbit / 10) / args.link_mbit
    host["staging_bytes"] = max(host["staging_bytes"], 2 * (args.mib << 20))
    profile["tiers"] = {"ceph": {"osds": args.osds, "osd_write_bytes_per_s": args.osd_write_mib * (1 << 20),
                                 "osd_read_bytes_per_s": 2 * args.osd_write_mib * (1 << 20),
                                 "write_amplification": 3, "network_bytes_per_s": 1e12}}
    profile["failures"] = {"host_mtbf_hours": 1000, "restart_s": 0, "drive_bytes": 1e12,
                           "rebuild_cap_bytes_per_s": 1e9}
    profile.pop("measured", None)
    job = {"format": "sluice.plan.job", "version": 1, "state_bytes_per_rank": args.mib << 20,
           "ranks_per_host": 1, "hosts": args.hosts, "interval_s": 600, "step_s": 1, "gpu": False}
    out = {}
    with tempfile.TemporaryDirectory() as d:
        paths = {"profile": os.path.join(d, "p.json"), "job": os.path.join(d, "j.json")}
        for key, obj in (("profile", profile), ("job", job)):
            with open(paths[key], "w") as f:
                json.dump(obj, f)
        for layout in ("nvme+peer+ceph", "nvme+peer"):
            plan = json.loads(subprocess.run(
                [args.sluice, "plan", "--profile", paths["profile"], "--job", paths["job"], "--layout", layout,
                 "--json"], check=True, capture_output=True, text=True).stdout)
            for figure in ("safe", "durable", "recovery"):
                if figure in plan and plan[figure]["seconds"] > 0:
                    out[f"{layout} {figure}"] = {"seconds": round(plan[figure]["seconds"], 2),
                                                 "bound": plan[figure]["bound"]}
    print(json.dumps({"hosts": args.hosts, "mib_per_host": args.mib, "link_mbit": args.link_mbit,
                      "cap_mbit": args.cap_mbit, "predicted": out}, indent=1))


if __name__ == "__main__":
    main()
