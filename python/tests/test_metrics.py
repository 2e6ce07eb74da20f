"""sluice.metrics(): the process's counters, also through prometheus_client."""

import os

import pytest
import torch

import sluice


def value(name, **labels):
    for family in sluice.metrics():
        for sample_name, sample_labels, v in family["samples"]:
            if sample_name == name and all(sample_labels.get(k) == w for k, w in labels.items()):
                return v
    return 0.0


def test_a_save_counts_staged_and_written_bytes_and_its_stall(store):
    staged, written = value("sluice_staged_bytes_total"), value("sluice_tier_written_bytes_total", tier="0")
    stalls = value("sluice_stall_seconds_count")
    sluice.save(store, "m", 1, {"w": torch.ones(1 << 20)}).wait()
    assert value("sluice_staged_bytes_total") - staged >= 4 << 20
    assert value("sluice_tier_written_bytes_total", tier="0", flow="save") - written >= 4 << 20
    assert value("sluice_stall_seconds_count") == stalls + 1
    families = {f["name"]: f for f in sluice.metrics()}
    assert families["sluice_stall_seconds"]["type"] == "histogram"
    assert families["sluice_staged_bytes_total"]["type"] == "counter"
    assert any(labels.get("uri", "").endswith("store") for _, labels, _ in families["sluice_tier_info"]["samples"])


def test_metrics_text_is_the_prometheus_exposition():
    text = sluice.metrics_text()
    assert "# TYPE sluice_staged_bytes_total counter" in text


def test_prometheus_client_sees_the_same_series(store):
    try:
        import prometheus_client
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("prometheus_client is missing (scripts/install-deps.sh installs it)")
        pytest.skip("prometheus_client is not installed")
    sluice.save(store, "m", 1, {"w": torch.ones(1000)}).wait()
    text = prometheus_client.generate_latest().decode()
    assert "sluice_staged_bytes_total " in text
    assert 'sluice_tier_written_bytes_total{flow="save",tier="0"}' in text
    assert "sluice_stall_seconds_bucket{" in text
