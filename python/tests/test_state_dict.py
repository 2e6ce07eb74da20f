"""sluice.save / sluice.load against real files and real PyTorch."""

import collections
import os
import threading
import time

import pytest
import torch

import sluice
from conftest import data_objects, flip_byte

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
          torch.int64, torch.uint8, torch.bool, torch.complex64, torch.float64, torch.complex128]


def sample(dtype, shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=g, dtype=dtype)


def raw_bytes(t):
    return t.resolve_conj().contiguous().reshape(-1).view(torch.uint8)


def same(a, b):
    """Exactly equal: same types, keys, dtypes, shapes and bytes."""
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(raw_bytes(a), raw_bytes(b)))
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a.keys()) == list(b.keys()) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_dtype_round_trips_bit_exact(store, dtype):
    sd = {"t": sample(dtype, (33, 7)), "scalar": sample(dtype, ()), "empty": sample(dtype, (0, 5))}
    sluice.save(store, "dtypes", 1, sd).wait()
    assert same(sluice.load(store, "dtypes"), sd)


def test_views_and_odd_layouts_store_their_values(store):
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    sd = {
        "transposed": base.t(),
        "strided": base[::2, 1::3],
        "expanded": torch.tensor([1.0, 2.0]).expand(4, 2),
        "conj": torch.randn(5, dtype=torch.complex64).conj(),
        "neg": torch.randn(4).neg(),
    }
    expected = {k: v.resolve_conj().clone() for k, v in sd.items()}
    sluice.save(store, "views", 1, sd).wait()
    out = sluice.load(store, "views")
    assert same(out, expected)
    assert all(t.is_contiguous() for t in out.values())


def test_structure_and_plain_values_are_kept(store):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    sched.step()
    sd = {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "sched": sched.state_dict(),
        "meta": {"epoch": 3, "loss": 0.125, "tag": "run-1", "flags": [True, None, b"\x00\x01"],
                 "pair": (1, 2.5), 1: "int key", "a/b": "slash key", "": "empty key"},
        "ordered": collections.OrderedDict([("z", torch.ones(2)), ("a", torch.zeros(1))]),
    }
    sluice.save(store, "structure", 5, sd).wait()
    out = sluice.load(store, "structure", step=5)
    assert same(out, sd)
    assert isinstance(out["model"], collections.OrderedDict)


def test_shared_tensors_stay_shared(store):
    w = torch.randn(3, 3)
    sluice.save(store, "tied", 1, {"encoder": w, "decoder": w}).wait()
    out = sluice.load(store, "tied")
    assert out["encoder"] is out["decoder"]
    assert torch.equal(out["encoder"], w)


def test_save_returns_before_durable_and_snapshot_is_taken_at_save(store):
    t = torch.zeros(1 << 20)
    handle = sluice.save(store, "async", 1, {"t": t})
    t.fill_(7.0)  # after save() returned: must not reach the checkpoint
    handle.wait()
    assert handle.done()
    assert handle.stall_seconds >= 0
    assert handle.durable_seconds > 0
    assert [p["state"] for p in handle.progress()] == ["committed"]
    assert torch.count_nonzero(sluice.load(store, "async")["t"]) == 0


def test_sync_save_is_committed_on_return(store):
    handle = sluice.save(store, "sync", 2, {"t": torch.ones(3)}, async_=False)
    assert handle.done()
    assert [c["step"] for c in sluice.list_checkpoints(store, "sync")] == [2]


def test_latest_step_and_explicit_step(store):
    for step in (1, 5, 3):
        sluice.save(store, "steps", step, {"step": torch.tensor(step)}).wait()
    assert int(sluice.load(store, "steps")["step"]) == 5
    assert int(sluice.load(store, "steps", step=3)["step"]) == 3
    with pytest.raises(sluice.NotFoundError):
        sluice.load(store, "steps", step=4)


def test_errors_are_the_builtins_a_caller_catches_and_shadow_none(store):
    sluice.save(store, "builtin", 1, {"t": torch.ones(2)}).wait()
    with pytest.raises(FileNotFoundError):
        sluice.load(store, "builtin", step=2)
    with pytest.raises(FileExistsError):
        sluice.save(store, "builtin", 1, {"t": torch.zeros(2)}).wait()
    with pytest.raises(OSError):
        sluice.load(str(store) + "/no/such/store", "builtin")
    assert issubclass(sluice.NotFoundError, LookupError)
    assert issubclass(sluice.InvalidArgumentError, ValueError)
    for name in ("CorruptionError", "StoreIOError", "NoSpaceError", "UnavailableError", "NotSupportedError"):
        assert issubclass(getattr(sluice, name), OSError), name
        assert issubclass(getattr(sluice, name), sluice.Error), name
    import builtins
    assert not [n for n in sluice.__all__ if hasattr(builtins, n)]
    namespace = {}
    exec("from sluice import *", namespace)
    assert namespace.get("IOError", IOError) is IOError


def test_a_damaged_newest_step_is_never_loaded_as_latest_in_silence(store):
    for step in (1, 2):
        sluice.save(store, "dmg", step, {"step": torch.tensor(step)}).wait()
    os.unlink(data_objects(store, "dmg", 2)[0])
    with pytest.raises(sluice.CorruptionError, match="dmg@2.*damaged.*latest-good"):
        sluice.load(store, "dmg")
    with pytest.warns(UserWarning, match="dmg@1, the newest intact step"):
        state = sluice.load(store, "dmg", step="latest-good")
    assert int(state["step"]) == 1
    listed = sluice.list_checkpoints(store, "dmg")
    assert [(c["step"], c["tiers"][0]["state"]) for c in listed] == [(1, "committed"), (2, "damaged")]


def test_a_job_resuming_onto_an_empty_tier_0_rebuilds_it_in_the_background(tmp_path):
    tiers = [str(tmp_path / "nvme"), str(tmp_path / "durable")]
    for step in (1, 2, 3):
        sluice.save(tiers, "rb", step, {"w": torch.full((1 << 16,), float(step))}).wait()
    sluice.close()
    import shutil
    shutil.rmtree(tiers[0])
    os.mkdir(tiers[0])
    sluice.configure(rebuild_rate_bytes_per_sec=64 << 20, rebuild_keep_last=2)
    try:
        assert float(sluice.load(tiers, "rb")["w"][0]) == 3.0  # from tier 1 meanwhile, or tier 0
        deadline = time.time() + 20
        while time.time() < deadline:
            states = [c["tiers"][0]["state"] for c in sluice.list_checkpoints(tiers, "rb")]
            if states == ["absent", "committed", "committed"]:
                break
            time.sleep(0.1)
        assert states == ["absent", "committed", "committed"]
    finally:
        sluice.close()
        sluice.configure(rebuild_rate_bytes_per_sec=0, rebuild_keep_last=1)


def test_two_saves_of_one_step_the_second_fails_on_wait(store):
    sluice.save(store, "twice", 1, {"t": torch.ones(2)}).wait()
    with pytest.raises(sluice.AlreadyExistsError):
        sluice.save(store, "twice", 1, {"t": torch.zeros(2)}).wait()
    assert torch.equal(sluice.load(store, "twice")["t"], torch.ones(2))


def test_load_into_fills_existing_tensors_in_place(store):
    model = torch.nn.Linear(64, 32)
    sluice.save(store, "inplace", 1, {"model": model.state_dict(), "epoch": 4}).wait()
    fresh = torch.nn.Linear(64, 32)
    dest = fresh.state_dict()
    addresses = {k: v.data_ptr() for k, v in dest.items()}
    out = sluice.load(store, "inplace", into={"model": dest})
    assert out["epoch"] == 4
    for k, v in model.state_dict().items():
        assert out["model"][k] is dest[k]
        assert dest[k].data_ptr() == addresses[k]
        assert torch.equal(getattr(fresh, k), v)  # the module's own parameters changed


def test_load_into_non_contiguous_destination(store):
    src = torch.randn(4, 6)
    sluice.save(store, "nc", 1, {"t": src}).wait()
    dest = torch.zeros(6, 4).t()
    out = sluice.load(store, "nc", into={"t": dest})
    assert out["t"] is dest and torch.equal(dest, src)


@pytest.mark.parametrize("wrong", [torch.zeros(4, 5), torch.zeros(4, 6, dtype=torch.float64)],
                         ids=["shape", "dtype"])
def test_load_into_wrong_shape_or_dtype_raises_naming_key_and_touches_nothing(store, wrong):
    sluice.save(store, "mismatch", 1, {"a": torch.ones(3), "b": {"w": torch.ones(4, 6)}}).wait()
    good = torch.full((3,), 9.0)
    with pytest.raises(ValueError, match=r"b/w"):
        sluice.load(store, "mismatch", into={"a": good, "b": {"w": wrong}})
    assert torch.equal(good, torch.full((3,), 9.0))
    assert torch.count_nonzero(wrong) == 0


def unpicklable():
    return threading.Lock()


@pytest.mark.parametrize("bad, match", [
    ({"ok": torch.ones(1), "fn": lambda x: x}, r"'fn'"),
    ({"lock": {"inner": unpicklable()}}, r"'lock/inner'"),
    ({"meta": torch.empty(3, device="meta")}, r"meta device"),
    ({"sparse": torch.eye(3).to_sparse()}, r"layout"),
    ({"x": {1: torch.ones(1), "1": torch.zeros(1)}}, r"key collision"),
    ({"q": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8)}, r"quantized"),
], ids=["lambda", "lock", "meta-device", "sparse", "key-collision", "quantized"])
def test_bad_input_raises_before_anything_is_committed(store, bad, match):
    with pytest.raises((TypeError, ValueError), match=match):
        sluice.save(store, "bad", 1, bad)
    assert sluice.list_checkpoints(store, "bad") == []


def test_not_a_dict_is_refused(store):
    with pytest.raises(TypeError, match="must be a dict"):
        sluice.save(store, "bad", 1, [torch.ones(1)])


def test_corrupted_chunk_raises_naming_item_and_chunk(store, small_chunks):
    big = torch.randn(256 << 10)  # 1 MiB: 16 chunks of 64 KiB, stored first
    sluice.save(store, "corrupt", 1, {"big": big, "small": torch.ones(3)}).wait()
    [obj] = data_objects(store, "corrupt", 1)
    flip_byte(obj, 3 * small_chunks + 100)  # inside chunk 3 of t/big
    with pytest.raises(sluice.CorruptionError, match=r"item 't/big'.*chunk 3"):
        sluice.load(store, "corrupt")
    dest = torch.zeros_like(big)
    with pytest.raises(sluice.CorruptionError):
        sluice.load(store, "corrupt", into={"big": dest})
    # Whatever did land is verified checkpoint bytes, never the flipped chunk.
    chunk = small_chunks // 4
    assert torch.count_nonzero(dest[3 * chunk:4 * chunk]) == 0


def test_corrupted_fast_tier_falls_back_to_the_next(tmp_path, small_chunks):
    tiers = [str(tmp_path / "fast"), str(tmp_path / "durable")]
    big = torch.randn(256 << 10)
    sluice.save(tiers, "tiered", 1, {"big": big}).wait()  # waits for both tiers
    [obj] = data_objects(tiers[0], "tiered", 1)
    flip_byte(obj, 5 * small_chunks + 7)
    out = sluice.load(tiers, "tiered")
    assert torch.equal(out["big"], big)
    sluice.close()


def test_adam_training_resumes_bit_identically(store):
    def batch(step):
        g = torch.Generator().manual_seed(1000 + step)
        return torch.randn(16, 10, generator=g), torch.randn(16, 1, generator=g)

    def make():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.Tanh(),
                                    torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return model, opt, sched

    def train(model, opt, sched, steps):
        losses = []
        for step in steps:
            x, y = batch(step)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
        return losses

    model, opt, sched = make()
    straight = train(model, opt, sched, range(8))

    model, opt, sched = make()
    first = train(model, opt, sched, range(4))
    sluice.save(store, "resume", 4, {"model": model.state_dict(), "optim": opt.state_dict(),
                                     "sched": sched.state_dict(),
                                     "rng": torch.get_rng_state()}).wait()
    torch.manual_seed(12345)  # the resumed process starts from other state

    model, opt, sched = make()
    state = sluice.load(store, "resume")
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optim"])
    sched.load_state_dict(state["sched"])
    torch.set_rng_state(state["rng"])
    resumed = first + train(model, opt, sched, range(4, 8))
    assert resumed == straight  # float equality: bit-identical losses


def test_bad_store_argument(store):
    with pytest.raises(TypeError, match="store must be"):
        sluice.save(42, "x", 1, {})
    with pytest.raises(ValueError, match="step"):
        sluice.save(store, "x", -1, {})
    with pytest.raises(sluice.InvalidArgumentError):
        sluice.save(store, "bad/name", 1, {"t": torch.ones(1)})


class _Custom:
    def __init__(self):
        self.x = 1


def test_weights_only_load_refuses_code_and_keeps_plain_state(store):
    import collections
    import pickle
    plain = {"w": torch.ones(3), "od": collections.OrderedDict(a=1), "dtype": torch.float16,
             "dev": torch.device("cpu"), "size": torch.Size([2, 3]), "s": {1, 2}}
    sluice.save(store, "plain", 1, plain).wait()
    back = sluice.load(store, "plain", weights_only=True)
    assert torch.equal(back["w"], plain["w"]) and back["od"] == plain["od"]
    assert back["dtype"] == torch.float16 and back["size"] == torch.Size([2, 3])
    sluice.save(store, "custom", 1, {"w": torch.ones(1), "obj": _Custom()}).wait()
    with pytest.raises(pickle.UnpicklingError, match="_Custom"):
        sluice.load(store, "custom", weights_only=True)
    assert sluice.load(store, "custom")["obj"].x == 1  # a full load, for a trusted store


def test_a_load_creates_nothing_where_no_store_is(tmp_path):
    # Issue 48: a load of a store that does not exist made its directories.
    missing = str(tmp_path / "nostore" / "deeper")
    with pytest.raises(sluice.NotFoundError, match="No such file or directory"):
        sluice.load(missing, "m")
    with pytest.raises(sluice.NotFoundError):
        sluice.list_checkpoints(missing)
    with pytest.raises(sluice.NotFoundError):
        sluice.remove(missing, "m")
    with pytest.raises(sluice.NotFoundError):
        sluice.load([missing, str(tmp_path / "tier1")], "m")
    assert os.listdir(tmp_path) == []
    try:
        sluice.save(missing, "m", 1, {"t": torch.ones(2)}).wait()  # a save creates it
        assert torch.equal(sluice.load(missing, "m")["t"], torch.ones(2))
    finally:
        sluice.close()


@pytest.fixture
def slow_tier0():
    """Tier 0 written at 4 MiB/s: a 2 MiB save takes about 0.5 s to commit."""
    saved = {k: sluice._options[k] for k in ("rate_bytes_per_sec", "io_bytes", "chunk_bytes")}
    sluice.configure(rate_bytes_per_sec=[4 << 20], io_bytes=1 << 20, chunk_bytes=1 << 20)
    yield
    sluice.close()
    sluice.configure(**saved)


@pytest.mark.parametrize("snapshot", ["eager", "lazy"])
def test_a_load_right_after_a_save_sees_it_without_wait(store, slow_tier0, snapshot):
    # Issue 48, in the README's order: the first load raised NotFoundError,
    # later ones returned the step before.
    handles = []
    for step in (1, 2, 3):
        h = sluice.save(store, "own", step, {"w": torch.full((1 << 19,), float(step))},
                        incremental=False, snapshot=snapshot)
        assert h.progress()[0]["state"] != "committed"
        handles.append(h)
        wanted = "latest" if step < 3 else 3
        assert float(sluice.load(store, "own", step=wanted)["w"][0]) == float(step)
    for h in handles:
        h.wait()


def test_a_load_after_a_failed_save_finds_what_committed(store, slow_tier0):
    # Two saves of one step race: one commits, the other fails, and only its
    # handle says so; the load waits for both and reads the one committed.
    first = sluice.save(store, "race", 1, {"w": torch.full((1 << 19,), 1.0)}, incremental=False)
    second = sluice.save(store, "race", 1, {"w": torch.full((1 << 19,), 2.0)}, incremental=False)
    assert float(sluice.load(store, "race")["w"][0]) in (1.0, 2.0)
    failed = []
    for h in (first, second):
        try:
            h.wait()
        except sluice.AlreadyExistsError:
            failed.append(h)
    assert len(failed) == 1


def test_load_into_a_key_the_checkpoint_lacks_raises_naming_it_unless_not_strict(store):
    # Issue 48: into={"zz": t} with a key the checkpoint lacks was ignored.
    w = torch.ones(3)
    sluice.save(store, "keys", 1, {"a": torch.ones(3), "b": {"w": torch.ones(2)},
                                   "emb": w, "head": w}).wait()
    a, zz = torch.zeros(3), torch.zeros(3)
    with pytest.raises(ValueError, match=r"keys@1 has no tensor for 1 key\(s\) of `into`: 'zz'; "
                                         r"nothing was loaded"):
        sluice.load(store, "keys", into={"a": a, "zz": zz})
    assert torch.count_nonzero(a) == 0
    many = {f"x{i:02d}": torch.zeros(1) for i in range(12)}
    with pytest.raises(ValueError, match=r"13 key\(s\) of `into`: 'b/v', 'x00', .*'x08' and 3 more;"):
        sluice.load(store, "keys", into={"b": {"w": torch.zeros(2), "v": torch.zeros(1)}, **many})
    out = sluice.load(store, "keys", into={"a": a, "zz": zz}, strict=False)
    assert out["a"] is a and torch.equal(a, torch.ones(3)) and torch.count_nonzero(zz) == 0
    tied = torch.zeros(3)  # stored once, under "emb"; "head" is the same tensor
    out = sluice.load(store, "keys", into={"emb": tied, "head": tied})
    assert out["head"] is tied and torch.equal(tied, torch.ones(3))


def test_a_damaged_newest_step_names_the_python_argument_not_the_cli_flag(store):
    # Issue 48: errors raised from Python said "--step latest-good".
    for step in (1, 2):
        sluice.save(store, "word", step, {"step": torch.tensor(step)}).wait()
    os.unlink(data_objects(store, "word", 2)[0])
    for step in ("latest", 2):
        with pytest.raises(sluice.CorruptionError) as failed:
            sluice.load(store, "word", step=step)
        assert 'step="latest-good"' in str(failed.value) and "--step" not in str(failed.value)
    with pytest.warns(UserWarning) as warned:
        sluice.load(store, "word", step="latest-good")
    assert warned and not [w for w in warned if "--step" in str(w.message)]
