"""CUDA tensors: staged by device-to-host DMA straight into sluice's pinned
staging arena (no .cpu() tensor), loaded back into CUDA tensors. Skipped,
with the reason shown (`-rs`), where torch has no CUDA: CI has no GPU; these
run on a GPU machine (doc/python.md says how)."""

import pytest
import torch

import sluice
import sluice.torch as st
from sluice import _sluice

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="torch has no CUDA device here: the "
                                   "GPU staging path is not exercised (CPU saves are unchanged)")


def test_cpu_saves_never_pin_the_arena_nor_touch_cuda(store):
    sluice.save(store, "cpu", 1, {"w": torch.arange(10.0)}).wait()
    assert sluice.pipeline(store).staging_pin["pinned"] is False
    assert torch.equal(sluice.load(store, "cpu")["w"], torch.arange(10.0))
    if not HAS_CUDA:
        # The driver's absence is reported, not hidden.
        assert _sluice.cuda_available() != ""


def _gpu_state(seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    base = torch.randn(64, 48, device="cuda", generator=g)
    return {
        "w": torch.randn(1000, 257, device="cuda", generator=g),
        "bf16": torch.randn(3, 5, 7, device="cuda", generator=g).to(torch.bfloat16),
        "int8": torch.randint(-128, 127, (4097,), device="cuda", generator=g, dtype=torch.int8),
        "transposed": base.t(),          # non-contiguous: made contiguous on the GPU
        "scalar": torch.tensor(3.5, device="cuda"),
        "empty": torch.empty(0, 4, device="cuda"),
        "param": torch.nn.Parameter(torch.randn(8, device="cuda", generator=g)),
        "cpu_too": torch.arange(100, dtype=torch.int64),
        "step": 7,
    }


def _assert_same(got, want):
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype and got[key].shape == value.shape, key
            assert torch.equal(got[key].cpu(), value.detach().cpu()), key
        else:
            assert got[key] == value, key


@requires_cuda
def test_cuda_tensors_round_trip_without_a_cpu_copy(store, monkeypatch):
    state = _gpu_state()
    want = {k: (v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v) for k, v in state.items()}

    def no_host_copies(*args, **kwargs):
        raise AssertionError("sluice made a host copy of a CUDA tensor")
    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "cpu", no_host_copies)
        m.setattr(torch.Tensor, "to", no_host_copies)
        m.setattr(torch.Tensor, "numpy", no_host_copies)
        handle = sluice.save(store, "gpu", 1, state)
    handle.wait()
    pin = sluice.pipeline(store).staging_pin
    assert pin["pinned"], pin
    loaded = sluice.load(store, "gpu")
    _assert_same(loaded, want)
    assert loaded["w"].device.type == "cpu"  # without `into`, host tensors
    assert isinstance(loaded["param"], torch.nn.Parameter)


@requires_cuda
def test_the_snapshot_holds_the_values_when_save_returns(store):
    a = torch.randn(2048, 2048, device="cuda")
    product = a @ a  # queued: the save must wait for it, not copy stale memory
    handle = sluice.save(store, "snap", 1, {"p": product})
    want = (a.cpu().double() @ a.cpu().double())
    product.fill_(0)  # training goes on at once
    handle.wait()
    got = sluice.load(store, "snap")["p"]
    assert torch.allclose(got.double(), want, rtol=1e-3, atol=1e-2)
    assert got.abs().sum() > 0


@requires_cuda
def test_a_lazy_save_then_a_step_at_once_keeps_the_state_at_the_save(store):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(8, 1024, device="cuda")).sum().backward()
    optimizer.step()
    want = {k: v.cpu() for k, v in model.state_dict().items()}
    handle = sluice.save(store, "lazy", 1, {"model": model.state_dict()}, snapshot="lazy")
    optimizer.step()  # the pre-hook waits until the device-to-host copies landed
    handle.wait()
    got = sluice.load(store, "lazy", 1)["model"]
    assert all(torch.equal(got[k], want[k]) for k in want)
    assert handle.staged and handle.wait_seconds >= 0


@requires_cuda
def test_an_image_larger_than_the_arena_streams_through_it(store):
    before = sluice._options["staging_bytes"]
    sluice.configure(staging_bytes=16 << 20)
    try:
        big = torch.randn(48 << 20 >> 2, device="cuda")  # 48 MiB through 16 MiB of staging
        sluice.save(store, "big", 1, {"big": big, "small": torch.ones(3, device="cuda")}).wait()
        got = sluice.load(store, "big")
        assert torch.equal(got["big"], big.cpu())
    finally:
        sluice.close()
        sluice.configure(staging_bytes=before)


@requires_cuda
def test_the_arena_is_pinned_once_per_process_not_per_save(store):
    state = {"w": torch.randn(1 << 20, device="cuda")}
    assert sluice.pipeline(store).staging_pin["pinned"] is False  # not before a CUDA tensor is saved
    sluice.save(store, "once", 1, state).wait()
    first = dict(sluice.pipeline(store).staging_pin)
    for step in (2, 3, 4):
        sluice.save(store, "once", step, state).wait()
    assert sluice.pipeline(store).staging_pin == first and first["pinned"]


@requires_cuda
def test_a_save_leaves_the_current_device_and_waits_for_side_streams(store):
    before = torch.cuda.current_device()
    side = torch.cuda.Stream()
    a = torch.randn(2048, 2048, device="cuda")
    with torch.cuda.stream(side):
        product = a @ a  # written on a side stream, not the current one
    handle = sluice.save(store, "side", 1, {"p": product})
    assert torch.cuda.current_device() == before
    handle.wait()
    want = a.cpu().double() @ a.cpu().double()
    assert torch.allclose(sluice.load(store, "side")["p"].double(), want, rtol=1e-3, atol=1e-2)


@requires_cuda
def test_load_into_cuda_tensors_fills_them_in_place(store):
    state = _gpu_state(1)
    sluice.save(store, "into", 1, state).wait()
    dest = {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else v) for k, v in state.items()}
    ids = {k: id(v) for k, v in dest.items()}
    got = sluice.load(store, "into", into=dest)
    torch.cuda.synchronize()
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            assert id(got[key]) == ids[key] and got[key].device == value.device, key
    _assert_same(got, state)


@requires_cuda
@pytest.mark.parametrize("entry", ["dcp.save", "sluice.torch.async_save"])
def test_dcp_saves_and_loads_cuda_state(store, entry):
    state = {"model": {"w": torch.randn(300, 301, device="cuda"),
                       "b": torch.randn(301, device="cuda")}}
    want = {"model": {k: v.cpu().clone() for k, v in state["model"].items()}}
    writer = st.StorageWriter(store, "dcp", 1)
    if entry == "dcp.save":
        st.dcp.save(state, storage_writer=writer, no_dist=True)
    else:
        future = st.async_save(state, checkpoint_id=f"{store}/dcp@1", storage_writer=writer,
                               no_dist=True)
        state["model"]["w"].fill_(-1)  # staged already: training may go on
        future.result()
    dest = {"model": {k: torch.zeros_like(v) for k, v in state["model"].items()}}
    st.dcp.load(dest, storage_reader=st.StorageReader(store, "dcp", 1), no_dist=True)
    for k in want["model"]:
        assert dest["model"][k].device.type == "cuda"
        assert torch.equal(dest["model"][k].cpu(), want["model"][k]), k
