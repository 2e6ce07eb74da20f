"""A durable tier slower than the checkpoint rate: sluice.save reports the
backlog per tier, warns once, coalesces to the newest step by default, and
holds back or refuses saves past a configured limit."""

import time
import warnings

import pytest
import torch

import sluice


def state(step, mib=2):
    return {"w": torch.full((mib << 18,), float(step)), "step": step}


@pytest.fixture
def slow_tiers(tmp_path):
    """Two file tiers; the second drains at 2 MiB/s (a 2 MiB step: ~0.5 s
    after a burst of one 1 MiB I/O)."""
    saved = {k: sluice._options[k] for k in ("rate_bytes_per_sec", "backlog_policy", "max_backlog_steps",
                                             "when_backlogged", "io_bytes", "chunk_bytes")}
    sluice.configure(rate_bytes_per_sec=[0, 2 << 20], io_bytes=1 << 20, chunk_bytes=1 << 20)
    yield [str(tmp_path / "fast"), str(tmp_path / "slow")]
    sluice.close()
    sluice.configure(**saved)


def steps_on(tiers, name, tier):
    return sorted(c["step"] for c in sluice.list_checkpoints(tiers, name)
                  if c["tiers"][tier]["state"] == "committed")


def test_a_slow_tier_warns_once_and_coalesces(slow_tiers):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handles = [sluice.save(slow_tiers, "lag", s, state(s)) for s in range(1, 7)]
    behind = [w for w in caught if issubclass(w.category, sluice.BacklogWarning)]
    assert len(behind) == 1, [str(w.message) for w in caught]
    assert "tier 1" in str(behind[0].message) and slow_tiers[1] in str(behind[0].message)
    assert behind[0].filename == __file__  # it points at the caller's save
    backlog = handles[-1].backlog()
    assert [b["uri"] for b in backlog] == slow_tiers
    assert 1 <= backlog[1]["steps"] <= 2  # one draining, the newest waiting
    handles[-1].wait()
    states = [h.progress()[1]["state"] for h in handles]
    assert states[0] == "committed" and states[-1] == "committed"
    assert "superseded" in states
    superseded = [h for h in handles if h.progress()[1]["state"] == "superseded"]
    with pytest.raises(sluice.UnavailableError, match="superseded"):
        superseded[0].wait()
    superseded[0].wait(tier=0)  # it is committed on tier 0 all the same
    assert handles[-1].backlog()[1] == {"uri": slow_tiers[1], "steps": 0, "bytes": 0,
                                        "superseded": len(superseded)}
    assert steps_on(slow_tiers, "lag", 1) == [s for s, st in zip(range(1, 7), states) if st == "committed"]
    # Every step is still on tier 0 (its keep_last keeps all) and loads.
    for s in range(1, 7):
        assert torch.equal(sluice.load(slow_tiers, "lag", s)["w"], state(s)["w"])


def test_drain_every_step_and_a_limit_that_fails_the_save(slow_tiers):
    sluice.configure(backlog_policy="drain-every", max_backlog_steps=2, when_backlogged="fail")
    h1 = sluice.save(slow_tiers, "lim", 1, state(1))
    h1.wait(tier=0)
    h2 = sluice.save(slow_tiers, "lim", 2, state(2))
    h2.wait(tier=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sluice.BacklogWarning)
        with pytest.raises(sluice.UnavailableError, match="backlog of 2 step"):
            sluice.save(slow_tiers, "lim", 3, state(3))
    h2.wait()
    assert h1.progress()[1]["state"] == "committed"  # drain-every: both reach tier 1
    assert steps_on(slow_tiers, "lim", 1) == [1, 2]
    sluice.save(slow_tiers, "lim", 3, state(3)).wait()


def test_a_limit_that_waits_holds_the_save_back(slow_tiers):
    sluice.configure(max_backlog_steps=1, when_backlogged="wait")
    h1 = sluice.save(slow_tiers, "hold", 1, state(1))
    h1.wait(tier=0)
    start = time.monotonic()
    sluice.save(slow_tiers, "hold", 2, state(2)).wait()
    # Step 2 began only after step 1 drained (~0.5 s).
    assert h1.progress()[1]["state"] == "committed"
    assert time.monotonic() - start > 0.2


def test_bad_backlog_options_are_refused(slow_tiers):
    with pytest.raises(ValueError, match="backlog_policy"):
        sluice.configure(backlog_policy="sometimes")
    with pytest.raises(ValueError, match="when_backlogged"):
        sluice.configure(backlog_policy="coalesce", when_backlogged="later")
    with pytest.raises(ValueError, match="backlog_policy needs one policy per tier"):
        sluice.configure(backlog_policy=["coalesce"])  # rate_bytes_per_sec names two tiers
