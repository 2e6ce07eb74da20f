"""Lazy snapshots: sluice.save(snapshot="lazy") and DCP's async_staging.

Every test changes the saved tensors right after the save returns, the way
a training loop does, and checks what the checkpoint then holds: exactly
the state at the save when the change went through an optimizer step or
came after wait_staged(), and no checkpoint at all (an error at commit)
when a stray in-place op came first."""

import pytest
import torch
import torch.distributed.checkpoint as dcp

import sluice
import sluice.torch as st
from sluice import _lazy


def _model_and_optimizer(seed=0, width=1024):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.ReLU(),
                                torch.nn.Linear(4 * width, width), torch.nn.BatchNorm1d(width))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    _train_step(model, optimizer)
    return model, optimizer


def _train_step(model, optimizer, x=None):
    x = torch.randn(32, model[0].in_features) if x is None else x
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()


def _state(model, optimizer):
    return {"model": model.state_dict(), "optim": optimizer.state_dict()}


def _clone(obj):
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, dict):
        return {k: _clone(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clone(v) for v in obj]
    return obj


def _assert_same(got, want, where="state"):
    if isinstance(want, torch.Tensor):
        assert torch.equal(got, want), where
    elif isinstance(want, dict):
        assert set(got) == set(want), where
        for k in want:
            _assert_same(got[k], want[k], f"{where}/{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}/{i}")
    else:
        assert got == want, where


def test_a_step_right_after_the_save_waits_for_its_tensors_and_the_checkpoint_holds_the_save(store):
    model, optimizer = _model_and_optimizer()
    want = _clone(_state(model, optimizer))
    handle = sluice.save(store, "run", 1, _state(model, optimizer), snapshot="lazy")
    assert isinstance(handle, sluice.SaveHandle)
    optimizer.step()  # at once: the pre-hook waits for the copy of what it changes
    assert not torch.equal(model[0].weight, want["model"]["0.weight"])
    handle.wait()
    assert handle.staged and handle.staged_seconds > 0
    assert handle.stall_seconds >= 0 and handle.wait_seconds >= 0
    _assert_same(sluice.load(store, "run", 1), want)


def test_changes_after_wait_staged_are_not_in_the_checkpoint(store):
    model, optimizer = _model_and_optimizer(1)
    want = _clone(_state(model, optimizer))
    handle = sluice.save(store, "run", 2, _state(model, optimizer), snapshot="lazy")
    handle.wait_staged()
    assert handle.staged
    with torch.no_grad():
        for t in list(model.state_dict().values()) + [
                v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]:
            t.fill_(7)
    handle.wait()
    _assert_same(sluice.load(store, "run", 2), want)


def test_a_stray_in_place_change_fails_the_save_at_commit_and_commits_nothing(store):
    big = torch.randn(16 << 20)  # 64 MiB: its copy is still running when it changes
    small = torch.randn(16)
    handle = sluice.save(store, "stray", 3, {"big": big, "small": small}, snapshot="lazy")
    big.add_(1)  # no wait, no optimizer
    with pytest.warns(RuntimeWarning, match="changed in place"):
        with pytest.raises(sluice.InvalidArgumentError,
                           match=r"stray@3: not committed: tensors changed in place before the lazy "
                                 r"snapshot copied them: 't/big' \(version 0 at the save, 1"):
            handle.wait()
    assert sluice.list_checkpoints(store, "stray") == []
    # The pipeline goes on: the next save of the step commits.
    sluice.save(store, "stray", 3, {"big": big}, snapshot="lazy", async_=False)
    assert torch.equal(sluice.load(store, "stray", 3)["big"], big)


def test_small_tensors_the_optimizer_does_not_own_are_copied_before_the_save_returns(store):
    model, optimizer = _model_and_optimizer(2)
    want = _clone(_state(model, optimizer))
    handle = sluice.save(store, "bn", 4, _state(model, optimizer), snapshot="lazy")
    model(torch.randn(32, 1024))  # forward in train mode: batch-norm statistics change now
    assert not torch.equal(model[3].running_mean, want["model"]["3.running_mean"])
    handle.wait()  # no stray change: the statistics were copied before save returned
    _assert_same(sluice.load(store, "bn", 4), want)


def test_the_copy_order_puts_the_optimizers_tensors_first_in_step_order():
    model, optimizer = _model_and_optimizer(3, width=256)
    frozen = torch.randn(1 << 20)  # 4 MiB, no optimizer
    state = model.state_dict()
    tensors = [("t/frozen", b"", frozen)] + [(f"t/{k}", b"", v) for k, v in state.items()]
    tensors += [(f"t/s{i}/{k}", b"", v) for i, s in enumerate(optimizer.state.values())
                for k, v in s.items()]
    eager, lazy = _lazy.order_items(tensors, [optimizer])
    walk = [t.data_ptr() for t in _lazy.optimizer_tensors(optimizer)]
    owned = [t for _, _, t in lazy if t.data_ptr() in walk]
    assert [t.data_ptr() for t in owned] == walk  # every one, in step order, first
    assert lazy[len(owned)][0] == "t/frozen"      # then what no optimizer owns
    assert {k for k, _, _ in eager} == {"t/3.running_mean", "t/3.running_var", "t/3.num_batches_tracked"}


def test_an_optimizer_sluice_never_saw_still_waits_for_the_tensors_it_changes(store):
    model, _ = _model_and_optimizer(4)
    want = _clone(model.state_dict())
    handle = sluice.save(store, "fresh", 5, {"model": model.state_dict()}, snapshot="lazy")
    other = torch.optim.SGD(model.parameters(), lr=1.0)  # made after the save
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    other.step()
    handle.wait()
    _assert_same(sluice.load(store, "fresh", 5)["model"], want)


def test_a_synchronous_lazy_save_is_committed_when_it_returns(store):
    model, optimizer = _model_and_optimizer(5)
    handle = sluice.save(store, "sync", 6, _state(model, optimizer), snapshot="lazy", async_=False)
    assert handle.done() and handle.staged
    assert [c["complete"] for c in sluice.list_checkpoints(store, "sync")] == [True]


def test_close_seals_and_commits_a_lazy_save_in_flight(store):
    big = torch.randn(8 << 20)
    want = big.clone()
    sluice.save(store, "closing", 7, {"big": big}, snapshot="lazy")
    sluice.close()
    assert torch.equal(sluice.load(store, "closing", 7)["big"], want)


def test_bad_arguments_are_refused_before_anything_is_written(store):
    with pytest.raises(ValueError, match="snapshot must be 'eager' or 'lazy', not 'soon'"):
        sluice.save(store, "bad", 1, {"t": torch.ones(2)}, snapshot="soon")
    with pytest.raises(TypeError, match="optimizers must be torch.optim.Optimizer objects, not int"):
        sluice.save(store, "bad", 1, {"t": torch.ones(2)}, snapshot="lazy", optimizers=[3])
    assert sluice.list_checkpoints(store, "bad") == []


def test_dcp_async_staging_is_lazy_and_a_step_before_staging_completion_is_safe(store):
    model, optimizer = _model_and_optimizer(6)
    want = _clone(model.state_dict())
    writer = st.StorageWriter(store, "dcp", 8, async_staging=True)
    response = dcp.async_save({"model": model.state_dict()}, storage_writer=writer, no_dist=True)
    assert isinstance(response, dcp.state_dict_saver.AsyncSaveResponse)
    _train_step(model, optimizer)  # the pre-hook waits for the parameters' copy
    response.staging_completion.result(timeout=60)
    response.upload_completion.result(timeout=60)
    dest = {"model": {k: torch.zeros_like(v) for k, v in want.items()}}
    dcp.load(dest, storage_reader=st.StorageReader(store, "dcp", 8), no_dist=True)
    _assert_same(dest["model"], want)


def test_dcp_tutorial_loop_waiting_on_staging_completion_before_the_step(store):
    model, optimizer = _model_and_optimizer(7)
    saved = {}
    response = None
    for step in range(3):
        if response is not None:
            response.staging_completion.result()
        _train_step(model, optimizer)
        if step in (0, 2):
            if response is not None:
                response.upload_completion.result()
            saved[step] = _clone(model.state_dict())
            writer = st.StorageWriter(store, "loop", step, async_staging=True)
            response = dcp.async_save({"model": model.state_dict()}, storage_writer=writer, no_dist=True)
    response.upload_completion.result()
    for step, want in saved.items():
        dest = {"model": {k: torch.zeros_like(v) for k, v in want.items()}}
        dcp.load(dest, storage_reader=st.StorageReader(store, "loop", step), no_dist=True)
        _assert_same(dest["model"], want)
