"""Usage arithmetic, API parsing and the API reference's billing rules.

The rules: docs/reference/kimi-chat-completions-reference.md, ``ChatUsage``.
"""

from __future__ import annotations

import math

import pytest

from kimi_extract.kimi import MODELS
from kimi_extract.records import Pricing, Usage

SEED_USAGE = {
    "prompt_tokens": 1000,
    "completion_tokens": 300,
    "total_tokens": 1300,
    "prompt_tokens_details": {"cached_tokens": 600, "cache_write_tokens": 300},
    "completion_tokens_details": {"reasoning_tokens": 120},
}


def test_from_api_reads_seed_shape():
    usage = Usage.from_api(SEED_USAGE)
    assert usage == Usage(1000, 600, 300, 300, 120, requests=1)


def test_from_api_top_level_cached_tokens_and_missing_fields():
    usage = Usage.from_api({"prompt_tokens": 50, "completion_tokens": 5, "cached_tokens": 20})
    assert usage.cached_tokens == 20 and usage.cache_write_tokens == 0


@pytest.mark.parametrize(
    "usage",
    [
        None,
        {},
        [],
        "12",
        {"prompt_tokens": 10},
        {"completion_tokens": 10},
        {"prompt_tokens": -5, "completion_tokens": 1},
        {"prompt_tokens": 5, "completion_tokens": -1},
        {"prompt_tokens": 1e300, "completion_tokens": 1},
        {"prompt_tokens": float("nan"), "completion_tokens": 1},
        {"prompt_tokens": 10**12, "completion_tokens": 1},
        {"prompt_tokens": "10", "completion_tokens": 1},
        {"prompt_tokens": [10], "completion_tokens": 1},
        {"prompt_tokens": 1.5, "completion_tokens": 1},
        {"prompt_tokens": True, "completion_tokens": 1},
        {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": []},
        {
            "prompt_tokens": 10,
            "completion_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": "x"},
        },
        {"prompt_tokens": 10, "completion_tokens": 1, "cached_tokens": 11},
        {
            "prompt_tokens": 10,
            "completion_tokens": 1,
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    ],
)
def test_missing_negative_or_absurd_usage_is_malformed(usage):
    """Never 0 tokens / $0 / a negative cost: the transport treats it as a malformed response."""
    with pytest.raises(ValueError):
        Usage.from_api(usage)


def test_whole_float_counts_are_accepted():
    assert Usage.from_api({"prompt_tokens": 10.0, "completion_tokens": 2}).prompt_tokens == 10


def test_add_and_shares():
    total = Usage.from_api(SEED_USAGE) + Usage.from_api(SEED_USAGE)
    assert total.prompt_tokens == 2000 and total.requests == 2
    assert total.cache_hit_share == 0.6
    assert Usage().cache_hit_share == 0.0


def test_k31_billing_separates_writes():
    price = Pricing(input=2.0, cached_input=0.2, cache_write=3.0, output=10.0)
    usage = Usage.from_api(SEED_USAGE)
    # regular = 1000 - 600 - 300 = 100
    expected = (100 * 2.0 + 600 * 0.2 + 300 * 3.0 + 300 * 10.0) / 1e6
    assert math.isclose(price.cost(usage), expected)


def test_k3_billing_counts_writes_as_input():
    price = Pricing(input=2.0, cached_input=0.2, cache_write=3.0, output=10.0)
    usage = Usage.from_api(SEED_USAGE)
    expected = ((1000 - 600) * 2.0 + 600 * 0.2 + 300 * 10.0) / 1e6
    assert math.isclose(price.cost(usage, separate_cache_writes=False), expected)


def test_1h_write_rate():
    price = Pricing(input=2.0, cached_input=0.2, cache_write=2.0, output=10.0, cache_write_1h=4.0)
    usage = Usage(prompt_tokens=1000, cache_write_tokens=1000, requests=1)
    assert math.isclose(price.cost(usage, ttl="1h"), 1000 * 4.0 / 1e6)
    assert math.isclose(price.cost(usage), 1000 * 2.0 / 1e6)


def test_priced_without_pricing_is_nan():
    assert math.isnan(Usage.from_api(SEED_USAGE).priced(None).cost)
    assert "cost unknown" in Usage().priced(None).summary()


def test_model_table_prices_are_all_present_for_known_models():
    for info in MODELS.values():
        assert info.pricing is not None


def test_is_missing_is_the_one_missing_cell_test():
    import numpy as np
    import pandas as pd

    from kimi_extract.records import is_missing

    for missing in (None, float("nan"), np.float64("nan"), pd.NA, pd.NaT):
        assert is_missing(missing), missing
    for present in ("", " ", 0, 0.0, False, [], "nan", pd.Timestamp(0)):
        assert not is_missing(present), present
