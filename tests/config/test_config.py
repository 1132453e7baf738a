"""``ExtractorConfig``: one frozen settings object, validated once, derived with ``replace``."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import pickle
import traceback
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kimi_extract as kx
from kimi_extract.config import option_names

from ..conftest import Review

KEY = "sk-config-secret-0123456789"


def test_extractor_options_are_the_config_fields() -> None:
    ex = kx.Extractor(Review, concurrency=7, rpm=120, api_key=KEY)
    assert isinstance(ex.config, kx.ExtractorConfig)
    assert (ex.config.concurrency, ex.config.limits.concurrency, ex.config.rpm) == (7, 7, 120)
    assert {"store", "cache_ttl", "concurrency", "api_key"} <= option_names()
    assert "cache" not in option_names() and "effort" not in option_names()  # derived, not taken
    with pytest.raises(TypeError, match="temperature"):
        kx.Extractor(Review, temperature=0.3)


def test_a_ready_config_and_overrides() -> None:
    config = kx.ExtractorConfig(concurrency=4, instructions="Be brief.", api_key=KEY)
    ex = kx.Extractor(Review, config=config)
    assert ex.config is config and ex.config.instructions == "Be brief."
    derived = kx.Extractor(Review, config=config, rpm=600)
    assert derived.config == dataclasses.replace(config, rpm=600)
    assert (derived.config.rpm, derived.config.concurrency, config.rpm) == (600, 4, None)
    with pytest.raises(kx.ConfigurationError, match="config must be a kx.ExtractorConfig"):
        kx.Extractor(Review, config={"concurrency": 4})  # type: ignore[arg-type]


def test_frozen() -> None:
    config = kx.ExtractorConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.concurrency = 99  # type: ignore[misc]
    with pytest.raises(AttributeError):
        kx.Extractor(Review).concurrency = 99  # type: ignore[misc]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("concurrency", 0),
        ("concurrency", 1001),
        ("timeout", float("nan")),
        ("max_retry_wait", -1),
        ("max_retries", -1),
        ("max_completion_tokens", 10**9),
        ("rpm", 0),
        ("tpm", True),
        ("max_total_tokens", 0),
        ("max_cost", -1.0),
        ("mode", "xml"),
        ("cache_ttl", "1d"),
        ("http_backend", "curl"),
        ("store", 3.5),
        ("column_prefix", 1),
        ("limits", {"concurrency": 4}),
        ("budget", None),
        ("max_video_bytes", 0),
        ("grounding", "yes"),
        ("adaptive", 1),
        ("model", ""),
        ("api_key", 123),
        ("reasoning_effort", "enormous"),
        ("max_image_pixels", 10),
        ("fetch_timeout", 0),
        ("stream", "yes"),
        ("progress", None),
        ("examples", "not pairs"),
        ("reasoning_effort", ["low"]),
        ("max_fetch_bytes", 1.5),
        ("base_url", "127.0.0.1:8000"),
        ("base_url", "ftp://x"),
        ("base_url", "http://"),
        ("base_url", "https://api.example.com/?key=1"),
        ("base_url", 8000),
        ("pricing", {"kimi-k3.1-pro": 5}),
        ("pricing", {"kimi-k3": {"input": 1}}),
        ("pricing", 5),
    ],
)
def test_every_bad_setting_is_a_configuration_error_naming_it(setting: str, value: Any) -> None:
    with pytest.raises(kx.ConfigurationError, match=setting):
        kx.ExtractorConfig(**{setting: value})
    # replace() validates again: a derived config is never an invalid one.
    with pytest.raises(kx.ConfigurationError, match=setting):
        dataclasses.replace(kx.ExtractorConfig(), **{setting: value})
    with pytest.raises(kx.ConfigurationError, match=setting):
        kx.Extractor(Review, **{setting: value})


def test_a_budget_that_cannot_pay_for_one_request_is_refused_on_replace() -> None:
    config = kx.ExtractorConfig(max_total_tokens=100_000)
    with pytest.raises(kx.ConfigurationError, match="max_total_tokens=1,000 cannot pay"):
        dataclasses.replace(config, max_total_tokens=1_000)


def test_the_key_is_a_secret_never_in_a_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    config = kx.ExtractorConfig(api_key=KEY)
    assert isinstance(config.api_key, type(config.secret)) and config.secret is not None
    assert config.secret.get() == KEY
    ex = kx.Extractor(Review, config=config)
    derived = dataclasses.replace(config, rpm=5)
    texts = [repr(config), str(config), repr(derived), repr(ex), str(ex), repr(config.api_key)]
    texts.append(repr(pickle.loads(pickle.dumps(config))))
    assert not any(KEY in text or KEY[:12] in text for text in texts)
    assert derived.secret is not None and derived.secret.get() == KEY
    # A key read from the environment is held the same way.
    monkeypatch.setenv("KIMI_API_KEY", KEY)
    from_env = kx.ExtractorConfig()
    assert from_env.secret is not None and from_env.secret.get() == KEY
    assert KEY not in repr(from_env)


def test_derived_values_follow_replace(tmp_path: Path) -> None:
    config = kx.ExtractorConfig(store=tmp_path / "a.sqlite3", reasoning_effort="medium")
    assert config.store_path == tmp_path / "a.sqlite3" and config.effort == "high"
    other = dataclasses.replace(config, store=False, model="kimi-k3", reasoning_effort=None)
    assert other.store_path is None and other.effort is None
    assert other.model_info.name == "kimi-k3"
    assert dataclasses.replace(config, max_image_pixels=4096).media.max_image_pixels == 4096


def test_store_is_the_result_store_and_cache_its_deprecated_name(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite3"
    assert kx.Extractor(Review, store=path).store_path == path
    with pytest.warns(DeprecationWarning, match="use store="):
        old = kx.Extractor(Review, cache=path)
    assert old.store_path == path and old.config.store == path
    with pytest.warns(DeprecationWarning, match="store_path"):
        assert old.cache_path == path
    with pytest.raises(kx.ConfigurationError, match="store= only"):
        kx.Extractor(Review, store=path, cache=path)
    assert kx.Extractor(Review, store=False).store_path is None
    # The accessor takes the old name too (it builds the Extractor), with the same warning.
    frame = pd.DataFrame({"review": ["fine"]})
    with pytest.warns(DeprecationWarning, match="use store="):
        assert frame.kimi.estimate(Review, text="review", cache=False).rows == 1


# -- Prices ------------------------------------------------------------------------------------

RATES = ("input", "cached_input", "cache_write", "output", "cache_write_1h")
GOOD_PRICE = {"input": 2.0, "cached_input": 0.2, "cache_write": 2.0, "output": 10.0}
#: Anything that is not a finite number >= 0: NaN and infinities, negatives, other types.
BAD_RATES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not (x >= 0 and x < math.inf)),
    st.integers(max_value=-1),
    st.sampled_from(["2", None, True, [1.0], Decimal("1")]),
)


@given(rate=st.sampled_from(RATES), value=BAD_RATES)
def test_a_price_that_is_not_a_finite_rate_at_least_zero_is_refused(rate: str, value: Any) -> None:
    # A NaN rate made every budget check pass (max_cost never stopped anything); a negative one
    # made spending grow the budget.
    if rate == "cache_write_1h" and value is None:
        return  # None is cache_write_1h's "same as cache_write"
    with pytest.raises(kx.ConfigurationError, match=f"Pricing.{rate} must be a finite number"):
        kx.Pricing(**{**GOOD_PRICE, rate: value})


@given(
    rates=st.fixed_dictionaries(
        {r: st.floats(min_value=0, max_value=1e6) | st.integers(0, 10**6) for r in RATES}
    )
)
def test_any_finite_price_at_least_zero_is_accepted(rates: dict[str, float]) -> None:
    price = kx.Pricing(**rates)
    assert all(getattr(price, r) == float(v) for r, v in rates.items())
    assert all(isinstance(getattr(price, r), float) for r in RATES)


def test_a_bad_price_in_a_pricing_dict_is_refused_before_any_request(sim) -> None:
    # This was accepted, and the run died with a raw ExceptionGroup after a billed request.
    with pytest.raises(kx.ConfigurationError, match=r"pricing\['kimi-k3.1-pro'\] must be"):
        kx.Extractor(
            Review, base_url=sim.base_url, api_key=sim.api_key, pricing={"kimi-k3.1-pro": 5}
        )
    # Every entry is checked, not only the model's own.
    with pytest.raises(kx.ConfigurationError, match=r"pricing\['kimi-k3'\] must be"):
        kx.ExtractorConfig(pricing={"kimi-k3": "cheap"})
    with pytest.raises(kx.ConfigurationError, match="Pricing.output"):
        kx.ExtractorConfig(pricing={"kimi-k3.1-pro": kx.Pricing(1, 1, 1, float("nan"))})
    assert sim.history == []


# -- Base URL ----------------------------------------------------------------------------------

HOSTS = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,20}){0,3}", fullmatch=True)
GOOD_URLS = st.builds(
    lambda scheme, host, port, path: f"{scheme}://{host}{port}{path}",
    st.sampled_from(["http", "https", "HTTPS"]),
    HOSTS | st.sampled_from(["127.0.0.1", "[::1]", "10.1.2.3"]),
    st.sampled_from(["", ":8000", ":1", ":65535"]),
    st.sampled_from(["", "/", "/v1", "/api/v1/"]),
)


@given(url=GOOD_URLS)
def test_any_http_url_with_a_host_is_accepted(url: str) -> None:
    assert kx.ExtractorConfig(base_url=url, store=False).base_url == url


@given(url=st.text(max_size=40))
def test_any_base_url_without_an_http_scheme_and_host_is_refused(url: str) -> None:
    parts = None
    with contextlib.suppress(ValueError):
        parts = urlsplit(url)
        parts.port  # noqa: B018
    usable = (
        parts is not None
        and parts.scheme.lower() in ("http", "https")
        and bool(parts.hostname)
        and not (parts.query or parts.fragment or "@" in url)
        and not any(c.isspace() or not c.isprintable() for c in url)
    )
    if not url or url == "simulator":
        return  # "" is unset, "simulator" the bundled simulator
    if usable:
        assert kx.ExtractorConfig(base_url=url, store=False).base_url == url
    else:
        with pytest.raises(kx.ConfigurationError, match="base_url"):
            kx.ExtractorConfig(base_url=url)


@given(
    # A key as userinfo may hold any character allowed there (sub-delims, ':', '%' escapes).
    key=st.from_regex(r"sk-[A-Za-z0-9._~!$&'()*+,;=:%-]{12,40}", fullmatch=True),
    with_user=st.booleans(),
)
def test_a_key_in_the_base_url_user_info_is_refused_and_never_shown(
    key: str, with_user: bool
) -> None:
    userinfo = f"user:{key}" if with_user else key
    url = f"https://{userinfo}@api.example.com/v1"
    with pytest.raises(kx.ConfigurationError, match="base_url must not hold credentials") as info:
        kx.Extractor(Review, base_url=url)
    printed = "".join(traceback.format_exception(info.value))
    assert key not in printed and key not in repr(info.value)


def test_the_environment_base_url_is_checked_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIMI_BASE_URL", "localhost:8000")
    with pytest.raises(kx.ConfigurationError, match="KIMI_BASE_URL must be an http"):
        kx.ExtractorConfig()
    monkeypatch.setenv("KIMI_BASE_URL", "https://sk-secret-0123456789@proxy.example.com")
    with pytest.raises(kx.ConfigurationError, match="KIMI_BASE_URL must not hold") as info:
        kx.ExtractorConfig()
    assert "sk-secret" not in str(info.value)
    # The simulator is never chosen by a leftover variable.
    monkeypatch.setenv("KIMI_BASE_URL", "simulator")
    with pytest.raises(kx.ConfigurationError, match="KIMI_BASE_URL='simulator' is not read"):
        kx.ExtractorConfig()


def test_a_bad_template_conversion_stops_before_any_request(make_extractor, sim) -> None:
    frame = pd.DataFrame({"t": ["one", "two"]})
    with pytest.raises(kx.ConfigurationError, match=r"template field \{t!z\}"):
        make_extractor().run(frame, template="{t!z}")
    assert sim.history == []


# -- Did you mean ------------------------------------------------------------------------------


def test_a_misspelt_option_gets_a_suggestion() -> None:
    with pytest.raises(TypeError, match=r"'concurency' \(did you mean 'concurrency'\?\)"):
        kx.Extractor(Review, concurency=4)
    with pytest.raises(TypeError, match=r"'max_cots' \(did you mean 'max_cost'\?\)"):
        kx.ExtractorConfig(max_cots=1.0)
    with pytest.raises(TypeError, match=r"'Reasoning_Effort' \(did you mean 'reasoning_effort'"):
        dataclasses.replace(kx.ExtractorConfig(), Reasoning_Effort="low")
    with pytest.raises(TypeError, match=r"'temperature'; the settings"):  # nothing close
        kx.Extractor(Review, temperature=0.3)


def test_a_misspelt_model_name_warns_with_a_suggestion() -> None:
    with pytest.warns(UserWarning, match=r"'kimi-k31-pro' \(did you mean 'kimi-k3.1-pro'\?\)"):
        kx.ExtractorConfig(model="kimi-k31-pro")
    with pytest.warns(UserWarning, match=r"'Kimi-K3' \(did you mean 'kimi-k3'\?\)"):
        kx.ExtractorConfig(model="Kimi-K3")
    with pytest.raises(kx.ConfigurationError, match=r"'hihg' is not valid \(did you mean 'high'"):
        kx.ExtractorConfig(reasoning_effort="hihg")
