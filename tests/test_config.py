"""``ExtractorConfig``: one frozen settings object, validated once, derived with ``replace``."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.config import option_names

from .conftest import Review

KEY = "sk-config-secret-0123456789"


def test_extractor_options_are_the_config_fields() -> None:
    ex = kx.Extractor(Review, concurrency=7, rpm=120, api_key=KEY)
    assert isinstance(ex.config, kx.ExtractorConfig)
    assert (ex.config.concurrency, ex.concurrency, ex.config.rpm) == (7, 7, 120)
    assert {"store", "cache_ttl", "concurrency", "api_key"} <= option_names()
    assert "cache" not in option_names() and "effort" not in option_names()  # derived, not taken
    with pytest.raises(TypeError, match="temperature"):
        kx.Extractor(Review, temperature=0.3)


def test_a_ready_config_and_overrides() -> None:
    config = kx.ExtractorConfig(concurrency=4, instructions="Be brief.", api_key=KEY)
    ex = kx.Extractor(Review, config=config)
    assert ex.config is config and ex.instructions == "Be brief."
    derived = kx.Extractor(Review, config=config, rpm=600)
    assert derived.config == dataclasses.replace(config, rpm=600)
    assert (derived.rpm, derived.concurrency, config.rpm) == (600, 4, None)
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
        ("max_tokens", 0),
        ("max_cost", -1.0),
        ("mode", "xml"),
        ("cache_ttl", "1d"),
        ("http_backend", "curl"),
        ("store", 3.5),
        ("prefix", 1),
        ("model", ""),
        ("api_key", 123),
        ("reasoning_effort", "enormous"),
        ("max_image_pixels", 10),
        ("fetch_timeout", 0),
        ("stream", "yes"),
        ("progress", None),
        ("examples", "not pairs"),
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
    config = kx.ExtractorConfig(max_tokens=100_000)
    with pytest.raises(kx.ConfigurationError, match="max_tokens=1,000 cannot pay"):
        dataclasses.replace(config, max_tokens=1_000)


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
