#!/usr/bin/env python3
"""docs_examples_test.py: the examples in README.md, doc/cli.md, doc/python.md
and doc/tiers.md run as written.

    tests/docs_examples_test.py SLUICE_BINARY SOURCE_DIR [PYTHON]

Every command and Python snippet of those pages that needs only local
directories runs, in the page's order, in a scratch directory of its own per
page, with the paths it names (/data/ckpt, /nvme/ckpt, ./state/, ...)
substituted by scratch paths; a failure prints the page, the line and what
it said. Not run, and counted as skipped with the reason: synopsis lines
(`[--flag]` brackets, `N|latest` choices), lines that need a store other
than a directory (rados://, s3://), a GPU or an install (pip, apt-get,
scripts/), and lines with a placeholder (`...`). A Python line that needs
RADOS is left out of its snippet, which runs otherwise. Python snippets run
with PYTHON (default: the checkout's .venv), with names the pages take as
given defined first: a small `model` and its Adam `opt`, a batch `x`,
`step` (1000), `sd` (their state) and `store`.

Prints "ok"/"not ok" lines and "N passed, M failed, K skipped".
"""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

PAGES = ["README.md", "doc/cli.md", "doc/python.md", "doc/tiers.md"]
PRELUDE = """\
import torch
import sluice
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
opt = torch.optim.Adam(model.parameters())
x = torch.randn(8, 64)
model(x).sum().backward()
opt.step()
step = 1000
sd = {"model": model.state_dict(), "optim": opt.state_dict()}
store = "/data/ckpt"
"""
# What a line needs that a directory is not, and why it is skipped. (A
# RADOS or S3 tier becomes a directory: tests/ceph_test.sh and s3_test.sh
# run those stores.)
NOT_LOCAL = [("cuda", "needs a GPU"), ("pip ", "an install (pip_install_test)"), ("apt-get", "an install"),
             ("scripts/", "the install and test commands themselves"), ("cmake ", "a build step")]


def blocks(text):
    return re.findall(r"```(\w*)\n(.*?)```", text, re.S)


def shell_lines(block):
    """Commands of a shell block, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            yield line


def why_skipped(line):
    code = re.sub(r"(rados|s3)://\.\.\.", "TIER1", line.split("  #")[0])
    for needle, why in NOT_LOCAL:
        if needle in code:
            return why
    if "..." in code:
        return "has a placeholder (...)"
    if re.search(r"\[-|\[--|\|latest| N\]|\$[A-Z]", code):
        return "a synopsis ([--flag], choices or $VARS), not a command"
    return None


def substitute(text, scratch):
    # A durable tier (RADOS, S3; "rados://..." for the one named above) as a directory.
    text = re.sub(r"'?(rados|s3)://[^\s'\"\])]*'?", os.path.join(scratch, "durable"), text)
    for path in ["/data/ckpt", "/nvme0/ckpt", "/nvme1/ckpt", "/nvme2/ckpt", "/nvme/ckpt", "/old/ckpt", "/tmp/as_dcp"]:
        text = text.replace(path, os.path.join(scratch, path.strip("/").replace("/", "_")))
    return text


class Run:
    def __init__(self, sluice, source, python):
        self.source, self.python = source, python
        self.bin = tempfile.mkdtemp(prefix="sluice-docs-bin-")
        os.symlink(sluice, os.path.join(self.bin, "sluice"))
        if python is not None:
            # `python -m sluice...` as written, with the venv's interpreter (a
            # symlink would not find the venv's pyvenv.cfg).
            wrapper = os.path.join(self.bin, "python")
            with open(wrapper, "w") as f:
                f.write(f'#!/bin/sh\nexec "{python}" "$@"\n')
            os.chmod(wrapper, 0o755)
        self.env = dict(os.environ, PATH=self.bin + os.pathsep + os.environ["PATH"],
                        PYTHONPATH=os.path.join(os.path.dirname(sluice), "python"),
                        SLUICE_STAGING_BYTES=str(64 << 20))
        self.passed = self.failed = self.skipped = 0

    def result(self, ok, what, detail=""):
        if ok:
            self.passed += 1
            print(f"ok - {what}")
        else:
            self.failed += 1
            print(f"not ok - {what}: {detail}")

    def skip(self, what, why):
        self.skipped += 1
        print(f"ok - {what} # SKIP {why}")

    def scratch_for(self, page):
        d = tempfile.mkdtemp(prefix="sluice-docs-")
        state = os.path.join(d, "state")
        os.makedirs(os.path.join(state, "layers"))
        for i in range(3):
            with open(os.path.join(state, "layers", f"w{i}.bin"), "wb") as f:
                f.write(os.urandom(300_000))
        with open(os.path.join(state, "step.txt"), "w") as f:
            f.write("1000\n")
        plan = os.path.join(self.source, "examples", "plan")
        shutil.copy(os.path.join(plan, "h100-cluster.profile.json"), os.path.join(d, "host.json"))
        # The job the plan examples take: one this host could run (`plan
        # calibrate` above measures this host, with no GPU).
        job = {"format": "sluice.plan.job", "version": 1, "state_bytes_per_rank": "1GiB", "ranks_per_host": 1,
               "hosts": 1, "interval_s": 600, "step_s": 1, "gpu": False}
        with open(os.path.join(d, "job.json"), "w") as f:
            json.dump(job, f)
        # The safetensors files the import example reads (./hf/).
        os.makedirs(os.path.join(d, "hf"))
        header = json.dumps({"model.w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
        with open(os.path.join(d, "hf", "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + struct.pack("<4f", 1, 2, 3, 4))
        return d

    def shell(self, page, line, scratch):
        what = f"{page}: {line.split('  #')[0].strip()}"
        why = why_skipped(line)
        if why:
            return self.skip(what, why)
        # A line naming the checkout's own build/ or .venv/ runs in the checkout.
        cwd = self.source if re.search(r"(^|\s|=)(build|\.venv)/", line) else scratch
        command = substitute(line, scratch)
        if self.python is not None:
            command = command.replace(".venv/bin/python", self.python)
        p = subprocess.run(["bash", "-c", command], cwd=cwd, env=self.env, capture_output=True, text=True,
                           timeout=300)
        self.result(p.returncode == 0, what, f"exit {p.returncode}: {(p.stderr or p.stdout).strip()[-600:]}")

    def python_block(self, page, block, scratch, index):
        what = f"{page}: Python snippet {index} ({block.strip().splitlines()[0][:60]})"
        if self.python is None:
            return self.skip(what, "no Python with torch")
        kept, left = [], []
        for line in block.splitlines():
            why = why_skipped(line) if not line.lstrip().startswith("#") else None
            if why and "needs" in why:
                left.append(line.strip())
                kept.append(re.match(r"\s*", line).group(0) + "pass  # (left out: " + why + ")")
            else:
                kept.append(line)
        code = "\n".join(kept)
        if "__main__" in code or "SluiceCheckpointManager" in code:
            # It spawns processes: a script runs it under the main guard, as the page says.
            code = "if __name__ == '__main__':\n" + "\n".join("    " + l for l in code.splitlines())
        # Each snippet is a script of its own, in a directory of its own (a
        # page's snippets are alternatives, not one program).
        own = os.path.join(scratch, f"snippet{index}")
        os.makedirs(own)
        script = os.path.join(own, "snippet.py")
        with open(script, "w") as f:
            f.write(substitute(PRELUDE, own) + substitute(code, own) + "\nsluice.close()\n")
        p = subprocess.run([self.python, script], cwd=own, env=self.env, capture_output=True, text=True,
                           timeout=600)
        note = f" (left out: {'; '.join(left)})" if left else ""
        self.result(p.returncode == 0, what + note, f"exit {p.returncode}: {p.stderr.strip()[-1500:]}")

    def page(self, page):
        text = open(os.path.join(self.source, page)).read()
        scratch = self.scratch_for(page)
        try:
            for i, (lang, block) in enumerate(blocks(text)):
                if lang == "python":
                    self.python_block(page, block, scratch, i)
                elif lang == "sh":
                    if "dcp_convert import" in block and self.python is not None:
                        self.make_dcp_checkpoint(scratch)
                    for line in shell_lines(block):
                        if self.python is None and re.search(r"(^|\s)(python|\.venv/bin/python) ", line):
                            self.skip(f"{page}: {line}", "no Python with torch")
                            continue
                        self.shell(page, line, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def make_dcp_checkpoint(self, scratch):
        """The DCP checkpoint the dcp_convert example imports (/old/ckpt/step_1000)."""
        target = substitute("/old/ckpt/step_1000", scratch)
        code = ("import torch, torch.distributed.checkpoint as dcp\n"
                f"dcp.save({{'w': torch.arange(1000.0)}}, checkpoint_id={target!r})\n")
        subprocess.run([self.python, "-c", code], env=self.env, check=True, capture_output=True)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.split("\n\n")[1])
    sluice, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    python = sys.argv[3] if len(sys.argv) == 4 else os.path.join(source, ".venv", "bin", "python")
    module = glob.glob(os.path.join(os.path.dirname(sluice), "python", "sluice", "_sluice*.so"))
    if not module:
        print("# the Python snippets are skipped: this build has no Python module (a sanitizer build)")
        python = None
    elif not os.path.exists(python) or subprocess.run([python, "-c", "import torch"], capture_output=True).returncode:
        print(f"# the Python snippets are skipped: {python} has no torch")
        python = None
    run = Run(sluice, source, python)
    try:
        for page in PAGES:
            run.page(page)
    finally:
        shutil.rmtree(run.bin, ignore_errors=True)
    print(f"{run.passed} passed, {run.failed} failed, {run.skipped} skipped")
    sys.exit(1 if run.failed else 0)


if __name__ == "__main__":
    main()
