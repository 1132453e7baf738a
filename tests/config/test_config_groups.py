"""The settings in groups: each group checks itself, flat keywords and groups are one config,
``replace`` keeps working, and the old names still work for one release."""

from __future__ import annotations

import dataclasses
import inspect
import operator
import pickle
import warnings
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kimi_extract as kx
from kimi_extract.config import GROUP_OF, GROUPS, option_names
from kimi_extract.config.fields import field_docs
from kimi_extract.extractor import MOVED_ATTRIBUTES
from kimi_extract.http.backends import BACKENDS

from ..conftest import Review

#: A valid value for every group field (the default model has prices; budgets fit one request).
VALID = {
    "concurrency": st.integers(1, 1000),
    "rpm": st.none() | st.integers(1, 10**6),
    "tpm": st.none() | st.integers(1, 10**9),
    "adaptive": st.booleans(),
    "max_retries": st.integers(0, 20),
    "max_retry_wait": st.floats(0, 1e4),
    "timeout": st.floats(0.01, 1e5),
    "max_response_bytes": st.integers(1, 2**40),
    "http_backend": st.sampled_from(BACKENDS),
    "user_agent": st.none() | st.from_regex(r"[a-z][a-z0-9.-]{0,30}/[0-9.]{1,8}", fullmatch=True),
    "max_cost": st.none() | st.floats(1.0, 1e6),
    "max_total_tokens": st.none() | st.integers(20_000, 10**12),
    "cache_ttl": st.sampled_from([None, "auto", "5m", "1h"]),
    "cache_warm": st.booleans(),
    "max_image_pixels": st.none() | st.integers(784, 10**9),
    "fetch_urls": st.booleans(),
    "fetch_timeout": st.floats(0.01, 1e4),
    "max_fetch_bytes": st.integers(1, 2**40),
    "max_video_bytes": st.integers(1, 2**40),
    "allow_private_urls": st.booleans(),
    "max_decode_pixels": st.none() | st.integers(784, 10**10),
    "grounding": st.sampled_from([False, True, "quotes"]),
    "grounding_fields": st.none()
    | st.dictionaries(st.sampled_from(["sentiment", "aspects", "lines.kind"]), st.booleans()),
}


def test_every_group_field_has_a_valid_value_strategy() -> None:
    assert set(VALID) == set(GROUP_OF)


@settings(max_examples=200, deadline=None)
@given(drawn=st.fixed_dictionaries({}, optional=VALID))
def test_flat_keywords_groups_and_replace_make_the_same_config(drawn: dict[str, Any]) -> None:
    flat = kx.ExtractorConfig(store=False, **drawn)
    groups = {
        name: cls(**{k: v for k, v in drawn.items() if GROUP_OF[k] == name})
        for name, cls in GROUPS.items()
        if any(GROUP_OF[k] == name for k in drawn)
    }
    grouped = kx.ExtractorConfig(store=False, **groups)
    replaced = dataclasses.replace(kx.ExtractorConfig(store=False), **drawn)
    assert flat == grouped == replaced
    for name, value in drawn.items():
        assert getattr(flat, name) == value  # read back by its flat name
        assert getattr(getattr(flat, GROUP_OF[name]), name) == value
    assert pickle.loads(pickle.dumps(flat)) == flat


def test_an_extractor_takes_groups_and_flat_keywords_alike() -> None:
    by_group = kx.Extractor(Review, limits=kx.Limits(concurrency=32), store=False)
    by_name = kx.Extractor(Review, concurrency=32, store=False)
    assert by_group.config == by_name.config
    assert by_name.config.limits == kx.Limits(concurrency=32)


def test_a_flat_keyword_wins_over_its_group() -> None:
    config = kx.ExtractorConfig(limits=kx.Limits(concurrency=4, rpm=5), store=False)
    # replace() passes every field, groups included: the flat change lands inside the group.
    derived = dataclasses.replace(config, rpm=600)
    assert derived.limits == kx.Limits(concurrency=4, rpm=600)
    assert kx.Extractor(Review, config=config, rpm=600).config == derived
    both = kx.ExtractorConfig(limits=kx.Limits(concurrency=4), concurrency=8, store=False)
    assert both.limits.concurrency == 8


@pytest.mark.parametrize(
    ("group", "setting", "value"),
    [
        (kx.Limits, "concurrency", 0),
        (kx.Limits, "rpm", -1),
        (kx.Limits, "adaptive", "yes"),
        (kx.Connection, "timeout", float("inf")),
        (kx.Connection, "http_backend", "curl"),
        (kx.Connection, "max_retries", 1.5),
        (kx.Budget, "max_cost", float("nan")),
        (kx.Budget, "max_total_tokens", True),
        (kx.PromptCache, "cache_ttl", "1d"),
        (kx.PromptCache, "cache_warm", None),
        (kx.MediaOptions, "max_image_pixels", 10),
        (kx.GroundingOptions, "grounding", "quote"),
        (kx.GroundingOptions, "grounding_fields", {"total": "yes"}),
    ],
)
def test_every_group_checks_itself_naming_the_setting(group: Any, setting: str, value: Any) -> None:
    with pytest.raises(kx.ConfigurationError, match=setting):
        group(**{setting: value})
    with pytest.raises(kx.ConfigurationError, match=setting):
        dataclasses.replace(group(), **{setting: value})
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(group(), setting, value)


def test_a_group_of_the_wrong_type_is_refused_naming_it() -> None:
    with pytest.raises(kx.ConfigurationError, match="limits must be a kx.Limits, got Connection"):
        kx.ExtractorConfig(limits=kx.Connection())
    with pytest.raises(kx.ConfigurationError, match="media must be a kx.MediaOptions"):
        kx.Extractor(Review, media={"fetch_urls": True})


def test_every_setting_has_a_docstring() -> None:
    for cls in (kx.ExtractorConfig, *GROUPS.values()):
        documented = field_docs(cls)
        for spec in dataclasses.fields(cls):
            if spec.init:
                assert documented.get(spec.name, "").strip(), f"{cls.__name__}.{spec.name}"


def test_the_signature_lists_every_keyword_with_its_default() -> None:
    parameters = inspect.signature(kx.ExtractorConfig).parameters
    assert set(parameters) == option_names()
    assert parameters["concurrency"].default == 16 and parameters["limits"].default == kx.Limits()
    assert parameters["max_total_tokens"].default is None


def test_misspelt_settings_and_groups_get_a_suggestion() -> None:
    with pytest.raises(TypeError, match=r"'concurency' \(did you mean 'concurrency'\?\)"):
        kx.ExtractorConfig(concurency=4)
    with pytest.raises(TypeError, match=r"'limts' \(did you mean 'limits'\?\)"):
        kx.Extractor(Review, limts=kx.Limits())
    with pytest.raises(TypeError, match=r"'max_total_token' \(did you mean 'max_total_tokens'"):
        dataclasses.replace(kx.ExtractorConfig(), max_total_token=5)
    assert {"limits", "connection", "rpm", "max_video_bytes"} <= option_names()


# -- old names -----------------------------------------------------------------------------------

OLD_NAMES = [
    ("max_tokens", "max_total_tokens", 50_000),
    ("prefix", "column_prefix", "out_"),
    ("cache", "store", False),
]


@pytest.mark.parametrize(("old", "new", "value"), OLD_NAMES)
def test_an_old_name_works_with_a_warning_naming_the_new_one(old: str, new: str, value: Any):
    with pytest.warns(DeprecationWarning, match=f"{old}= is deprecated: use {new}=") as caught:
        config = kx.ExtractorConfig(**{old: value})
    assert caught[0].filename == __file__  # the warning names the caller's line
    assert getattr(config, new) == value
    with pytest.warns(DeprecationWarning, match=f"use {new}="):
        assert getattr(kx.Extractor(Review, **{old: value}).config, new) == value
    with pytest.warns(DeprecationWarning, match=f"use {new}="):
        derived = dataclasses.replace(kx.ExtractorConfig(), **{old: value})
    assert getattr(derived, new) == value
    with pytest.raises(kx.ConfigurationError, match=f"pass {new}= only"):
        kx.Extractor(Review, **{old: value, new: value})


def test_the_accessor_takes_the_old_names_too() -> None:
    frame = pd.DataFrame({"review": ["fine"]})
    with pytest.warns(DeprecationWarning, match="use max_total_tokens="):
        assert frame.kimi.estimate(Review, text="review", max_tokens=50_000, store=False).rows == 1


def test_reading_an_old_name_warns() -> None:
    config = kx.ExtractorConfig(max_total_tokens=50_000, column_prefix="out_")
    with pytest.warns(DeprecationWarning, match="use max_total_tokens"):
        assert config.max_tokens == 50_000
    with pytest.warns(DeprecationWarning, match="use column_prefix"):
        assert config.prefix == "out_"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (config.max_total_tokens, config.column_prefix) == (50_000, "out_")


def test_the_extractor_attributes_that_mirrored_settings_warn_and_read_the_config() -> None:
    ex = kx.Extractor(Review, rpm=60, max_total_tokens=50_000, column_prefix="out_", store=False)
    for name, where in MOVED_ATTRIBUTES.items():
        with pytest.warns(
            DeprecationWarning, match=f"Extractor.{name} is deprecated: use ex.{where}"
        ):
            value = getattr(ex, name)
        assert value == operator.attrgetter(where)(ex)
    with pytest.warns(DeprecationWarning):
        assert (ex.rpm, ex.max_tokens, ex.prefix) == (60, 50_000, "out_")
    with pytest.raises(AttributeError, match="is a setting"):
        ex.concurrency = 3
    with pytest.raises(AttributeError, match="no attribute 'concurency'"):
        ex.concurency  # type: ignore[attr-defined]  # noqa: B018
    # What stays: the model name, the store location, the run's results.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert (ex.model, ex.store_path, ex.last_run) == (ex.config.model, None, None)
