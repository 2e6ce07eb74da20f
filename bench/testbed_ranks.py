"""One gloo job's ranks for the peer benchmarks: rank r as a process of this
machine (a fake host) or on test bed compute host c<r+1> (scripts/testbed,
gloo over its eth0), and the test bed's links capped for a run."""

import json
import os
import subprocess
import sys


def nvme(testbed, rank):
    """Compute host c<rank+1>'s local-NVMe stand-in directory."""
    return subprocess.run([testbed, "nvme", f"c{rank + 1}"], capture_output=True, text=True,
                          check=True).stdout.strip()


def run_ranks(script, hosts, command_of, testbed=None, what="a rank"):
    """Runs `sys.executable script *command_of(r)` for every rank at once
    (on the test bed when `testbed` is given) and returns the JSON that
    rank 0 printed last. SystemExit with a rank's stderr if one fails."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = []
    for r in range(hosts):
        cmd = [sys.executable, script] + command_of(r)
        if testbed:
            cmd = [testbed, "exec", f"c{r + 1}", "env", "GLOO_SOCKET_IFNAME=eth0",
                   f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}"] + cmd
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = [p.communicate(timeout=1800) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit(f"{os.path.basename(script)}: {what} failed:\n{err[-3000:]}")
    return json.loads(outs[0][0].strip().splitlines()[-1])


class CappedLinks:
    """`with CappedLinks(testbed, hosts, mbit):` caps compute hosts c1.. at
    `mbit` both ways for the block (nothing without a test bed)."""

    def __init__(self, testbed, hosts, mbit):
        self.testbed, self.hosts, self.mbit = testbed, hosts, mbit

    def __enter__(self):
        for r in range(self.hosts if self.testbed else 0):
            subprocess.run([self.testbed, "cap", f"c{r + 1}", f"{int(self.mbit)}mbit"], check=True)
        return self

    def __exit__(self, *exc):
        for r in range(self.hosts if self.testbed else 0):
            subprocess.run([self.testbed, "uncap", f"c{r + 1}"], check=False)
        return False
