"""Incremental saves through sluice.save and the DCP writer: frozen tensors
are referenced in the base step, not written again, and every step loads
exactly what was saved, also after its base is removed."""

import os

import torch
import torch.distributed.checkpoint as dcp

import sluice
import sluice.torch
from conftest import data_objects


def written_bytes(store, name, step):
    return sum(os.path.getsize(p) for p in data_objects(store, name, step))


def lora_state(step, base_mib=8, adapter_kib=256):
    g = torch.Generator().manual_seed(1)
    base = torch.randn(base_mib << 18, generator=g)  # 4-byte floats
    a = torch.full((adapter_kib << 8,), float(step))
    return {"base": {"w": base}, "lora": {"a": a}, "step": step}


def test_frozen_tensors_are_referenced_not_written(store):
    h1 = sluice.save(store, "lora", 1, lora_state(1), async_=False)
    assert h1.stats()["referenced_bytes"] == 0
    assert h1.stats()["base_step"] is None
    for step in (2, 3):
        h = sluice.save(store, "lora", step, lora_state(step), async_=False)
        s = h.stats()
        assert s["base_step"] == step - 1
        assert s["referenced_bytes"] >= 8 << 20
        # The adapter and the pickled structure; the base weights not again.
        assert written_bytes(store, "lora", step) < (1 << 20)
    for step in (1, 2, 3):
        got = sluice.load(store, "lora", step)
        want = lora_state(step)
        assert torch.equal(got["base"]["w"], want["base"]["w"])
        assert torch.equal(got["lora"]["a"], want["lora"]["a"])
        assert got["step"] == step
    # ls shows what each step shares.
    listed = {c["step"]: c for c in sluice.list_checkpoints(store, "lora")}
    assert listed[3]["referenced_bytes"] >= 8 << 20
    # Removing the base keeps what later steps share with it.
    sluice.remove(store, "lora", 1)
    sluice.remove(store, "lora", 2)
    got = sluice.load(store, "lora", 3)
    assert torch.equal(got["base"]["w"], lora_state(3)["base"]["w"])


def test_incremental_false_writes_everything(store):
    sluice.save(store, "full", 1, lora_state(1), async_=False)
    h = sluice.save(store, "full", 2, lora_state(2), async_=False, incremental=False)
    assert h.stats()["referenced_bytes"] == 0
    assert written_bytes(store, "full", 2) >= 8 << 20


def test_dcp_writer_saves_incrementally(store):
    state = lora_state(1)
    dcp.save(state, storage_writer=sluice.torch.StorageWriter(store, "dcp", 1), no_dist=True)
    w = sluice.torch.StorageWriter(store, "dcp", 2)
    state2 = lora_state(2)
    dcp.save(state2, storage_writer=w, no_dist=True)
    assert w.handle.stats()["referenced_bytes"] >= 8 << 20
    assert written_bytes(store, "dcp", 2) < (1 << 20)
    out = lora_state(0)
    dcp.load(out, storage_reader=sluice.torch.StorageReader(store, "dcp", 2), no_dist=True)
    assert torch.equal(out["base"]["w"], state2["base"]["w"])
    assert torch.equal(out["lora"]["a"], state2["lora"]["a"])
    w_full = sluice.torch.StorageWriter(store, "dcp", 3, incremental=False)
    dcp.save(lora_state(3), storage_writer=w_full, no_dist=True)
    assert w_full.handle.stats()["referenced_bytes"] == 0
