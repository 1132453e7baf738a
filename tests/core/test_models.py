"""The model table: effort normalization and unknown models."""

from __future__ import annotations

import warnings

import pytest

from kimi_extract.kimi import MODELS, model_info, normalize_effort


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        ("low", "low"),
        ("high", "high"),
        ("max", "max"),
        ("medium", "high"),
        ("xhigh", "max"),
        ("minimal", "low"),
        ("none", "low"),
        (None, None),
    ],
)
def test_k31_effort_aliases(given, sent):
    assert normalize_effort(MODELS["kimi-k3.1-pro"], given) == sent


def test_k3_takes_only_max_and_warns_once():
    info = MODELS["kimi-k3"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert normalize_effort(info, "low") == "max"
        assert normalize_effort(info, "high") == "max"
    assert len([w for w in caught if "kimi-k3" in str(w.message)]) == 1
    assert normalize_effort(info, "max") == "max"


def test_bad_effort_raises():
    with pytest.raises(ValueError, match="reasoning_effort"):
        normalize_effort(MODELS["kimi-k3.1-pro"], "turbo")


def test_unknown_model_passes_through_with_one_warning():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        info = model_info("kimi-future-9")
        model_info("kimi-future-9")
    assert info.name == "kimi-future-9"
    assert len(caught) == 1 and "kimi-future-9" in str(caught[0].message)


def test_cache_options_only_on_k31():
    assert MODELS["kimi-k3.1-pro"].cache_options and MODELS["kimi-k3.1-pro-highspeed"].cache_options
    assert not MODELS["kimi-k3"].cache_options
    assert not MODELS["kimi-k3"].separate_cache_writes
