"""sluice export / sluice import against the safetensors package from PyPI."""

import json
import os
import struct
import subprocess

import pytest
import torch

safetensors_torch = pytest.importorskip("safetensors.torch")
import sluice  # noqa: E402

SLUICE = os.environ.get("SLUICE_BIN", "sluice")


def cli(*args, ok=True):
    p = subprocess.run([SLUICE, *args], capture_output=True, text=True, timeout=120)
    if ok:
        assert p.returncode == 0, p.stderr
    return p


def state():
    g = torch.Generator().manual_seed(5)
    model = {f"layers.{i}.weight": torch.randn(64, 32, generator=g) for i in range(6)}
    model["embed"] = torch.randn(100, 16, generator=g).bfloat16()
    model["mask"] = torch.rand(10, generator=g) > 0.5
    model["step"] = torch.tensor(12, dtype=torch.int64)
    optim = {"state": {0: {"exp_avg": torch.randn(64, 32, generator=g)}}, "param_groups": [{"lr": 0.1}]}
    return {"model": model, "optim": optim}


def test_export_of_the_model_alone_loads_with_safetensors(store, tmp_path):
    sd = state()
    sluice.save(store, "run", 3, sd).wait()
    out = tmp_path / "hf"
    # Small shards, so the index has several files to name.
    p = cli("export", "--store", store, "--name", "run", "--format", "safetensors", "--to", str(out),
            "--select", "model", "--strip-prefix", "model.", "--max-shard-size", "20KiB", "--json")
    report = json.loads(p.stdout)
    assert report["tensors"] == 9 and report["shards"] > 1
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) == report["shards"]
    loaded = {}
    for f in files:
        loaded.update(safetensors_torch.load_file(str(out / f)))
    assert set(loaded) == set(sd["model"])  # the optimizer left out
    for k, v in sd["model"].items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k], v), k
    assert not [n for n in os.listdir(out) if n.startswith(".")]  # no temporaries left


def test_import_of_sharded_files_loads_as_a_flat_state_dict(store, tmp_path):
    src = tmp_path / "hf"
    src.mkdir()
    g = torch.Generator().manual_seed(9)
    first = {"a.weight": torch.randn(8, 4, generator=g), "a/odd%name": torch.arange(5)}
    second = {"b.weight": torch.randn(3, generator=g).half(), "b.flag": torch.tensor([True, False])}
    safetensors_torch.save_file(first, str(src / "model-00001-of-00002.safetensors"))
    safetensors_torch.save_file(second, str(src / "model-00002-of-00002.safetensors"))
    weight_map = {k: "model-00001-of-00002.safetensors" for k in first}
    weight_map.update({k: "model-00002-of-00002.safetensors" for k in second})
    (src / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    cli("import", "--store", store, "--name", "hf", "--step", "1", "--from", str(src))
    loaded = sluice.load(store, "hf")
    assert set(loaded) == set(first) | set(second)
    for k, v in {**first, **second}.items():
        assert loaded[k].dtype == v.dtype and torch.equal(loaded[k], v), k
    assert cli("verify", "--store", store, "--name", "hf").returncode == 0
    # And back out: byte-identical tensors again.
    cli("export", "--store", store, "--name", "hf", "--format", "safetensors", "--to", str(tmp_path / "again"))
    again = safetensors_torch.load_file(str(tmp_path / "again" / "model-00001-of-00001.safetensors"))
    assert all(torch.equal(again[k], v) for k, v in {**first, **second}.items())


def write_raw(path, header, data):
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


@pytest.mark.parametrize("damage", ["truncated", "overlapping", "bad-json", "short-header"])
def test_import_refuses_damaged_files_by_name_and_writes_nothing(store, tmp_path, damage):
    f = tmp_path / "bad.safetensors"
    a = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    if damage == "truncated":
        write_raw(f, {"a": a}, bytes(4))
    elif damage == "overlapping":
        write_raw(f, {"a": a, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8))
    elif damage == "bad-json":
        f.write_bytes(struct.pack("<Q", 5) + b'{"a":' + bytes(8))
    else:
        f.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")
    p = cli("import", "--store", store, "--name", "bad", "--step", "1", "--from", str(f), ok=False)
    assert p.returncode == 1, p.stderr
    assert str(f) in p.stderr and p.stderr.startswith("sluice: "), p.stderr
    try:
        assert sluice.list_checkpoints(store, "bad") == []
    except sluice.NotFoundError:
        pass  # not even the store was made (a listing makes none)


def test_export_refuses_what_safetensors_cannot_hold(store, tmp_path):
    sluice.save(store, "c", 1, {"z": torch.zeros(2, dtype=torch.complex128)}).wait()
    p = cli("export", "--store", store, "--name", "c", "--format", "safetensors", "--to", str(tmp_path / "o"),
            ok=False)
    assert p.returncode == 1 and "'z'" in p.stderr and "complex128" in p.stderr, p.stderr
    p = cli("export", "--store", store, "--name", "c", "--format", "gguf", "--to", str(tmp_path / "o"), ok=False)
    assert p.returncode == 2, p.stderr


def test_export_force_over_an_earlier_export_leaves_only_the_new_one(store, tmp_path):
    sluice.save(store, "f", 1, {"a": torch.ones(4), "b": torch.ones(4)}).wait()
    sluice.save(store, "f", 2, {"a": torch.zeros(4)}).wait()
    out = tmp_path / "hf"
    cli("export", "--store", store, "--name", "f", "--step", "1", "--format", "safetensors", "--to", str(out),
        "--max-shard-size", "16")
    assert len(list(out.glob("model-*.safetensors"))) == 2
    assert cli("export", "--store", store, "--name", "f", "--format", "safetensors", "--to", str(out),
               ok=False).returncode == 1  # not empty, no --force
    cli("export", "--store", store, "--name", "f", "--format", "safetensors", "--to", str(out), "--force")
    assert sorted(p.name for p in out.iterdir()) == ["model-00001-of-00001.safetensors",
                                                     "model.safetensors.index.json"]
    assert torch.equal(safetensors_torch.load_file(str(out / "model-00001-of-00001.safetensors"))["a"],
                       torch.zeros(4))
