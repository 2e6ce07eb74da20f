"""sluice.configure() checks each option when it is called, with the error
the next save would raise, and changes nothing then."""

import pytest
import torch

import sluice


@pytest.fixture
def options_kept():
    """The options before the test, put back after it."""
    before = dict(sluice._options)
    yield before
    sluice.close()
    sluice._options.clear()
    sluice._options.update(before)


@pytest.mark.parametrize("option, error", [
    ({"backlog_policy": "coalese"}, ValueError),
    ({"backlog_policy": ["coalesce", "often"]}, ValueError),
    ({"when_backlogged": "later"}, ValueError),
    ({"copy_threads": 0}, sluice.InvalidArgumentError),
    ({"io_bytes": 3}, sluice.InvalidArgumentError),
    ({"object_bytes": 1}, sluice.InvalidArgumentError),
    ({"staging_idle_release_seconds": -1}, sluice.InvalidArgumentError),
    ({"keep_last": [1, 2], "rate_bytes_per_sec": [0]}, ValueError),
    ({"copy_threads": "two"}, TypeError),
], ids=["policy-typo", "policy-in-list", "when", "threads", "io-size", "object-size", "idle",
        "list-lengths", "type"])
def test_a_bad_option_is_refused_by_configure_as_the_save_would_refuse_it(options_kept, tmp_path, option, error):
    # Issue 48: configure(backlog_policy="coalese") returned None and the
    # ValueError came at the next save.
    with pytest.raises(error) as at_configure:
        sluice.configure(**option)
    assert sluice._options == options_kept
    tiers = [str(tmp_path / "t0"), str(tmp_path / "t1")]
    sluice._options.update(option)  # what configure used to accept
    with pytest.raises(error) as at_save:
        sluice.save(tiers, "x", 1, {"t": torch.ones(1)})
    assert str(at_configure.value).splitlines()[0] == str(at_save.value).splitlines()[0]
    sluice._options.update(options_kept)
    sluice.save(tiers, "x", 1, {"t": torch.ones(1)}).wait()  # the options in force still work


def test_good_options_are_kept_and_used(options_kept, tmp_path):
    sluice.configure(backlog_policy=["coalesce", "drain-every"], keep_last=[0, 0], tier0_per_host=False)
    assert sluice._options["backlog_policy"] == ["coalesce", "drain-every"]
    sluice.save([str(tmp_path / "t0"), str(tmp_path / "t1")], "ok", 1, {"t": torch.ones(1)}).wait()
