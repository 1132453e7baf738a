"""The simulator's settings: one frozen ``SimulatorConfig`` in groups, the flat keywords as before.

- flat keywords and groups make the same config, and a keyword beside ``config=`` changes that
  setting (properties over many settings);
- every setting checks itself: a bad value is a ``ConfigurationError`` naming it, before any
  server starts (also from ``kimi-extract simulate``);
- settings given in a config reach the server;
- docs/simulator-settings.md is generated from the docstrings under the fields.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kimi_extract import cli
from kimi_extract.exceptions import ConfigurationError
from kimi_extract.settings_docs import field_docs
from kimi_extract.simulator import (
    FaultOptions,
    LatencyOptions,
    LimitOptions,
    Simulator,
    SimulatorConfig,
    server,
)
from kimi_extract.simulator.config import GROUP_OF, option_names
from kimi_extract.simulator.docs import settings_markdown
from kimi_extract.simulator.extractive import PERTURBATIONS
from kimi_extract.simulator.options import GROUPS, PRICING_KEYS
from kimi_extract.simulator.quality import QualityModel

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "simulator-settings.md"
KEY = "sk-sim-config-test"

_seconds = st.floats(0.0, 50.0, allow_nan=False)
_positive_seconds = st.floats(0.001, 50.0, allow_nan=False)
_rate = st.floats(0.0, 1.0, allow_nan=False)
_limit = st.none() | st.integers(1, 10**7)

#: A valid value of every setting, by its flat name.
VALID: dict[str, st.SearchStrategy[Any]] = {
    "api_key": st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=40),
    "seed": st.integers(-(2**40), 2**40),
    "clock": st.sampled_from([time.monotonic, time.time, None]),
    "schema_level": st.sampled_from(["strict", "ultra"]),
    "stream_usage": st.sampled_from(["choices", "separate"]),
    "history_limit": st.none() | st.integers(0, 1000),
    "fault_500": _rate,
    "fault_reset": _rate,
    "fault_stream_cut": _rate,
    "fault_slow_first_byte": _rate,
    "slow_first_byte_s": _seconds,
    "fault_invalid_json": _rate,
    "fault_truncate": _rate,
    "overload_rate": _rate,
    "spurious_429_rate": _rate,
    "max_concurrency": _limit,
    "rpm": _limit,
    "tpm": _limit,
    "rate_shape": st.sampled_from(["sliding", "fixed", "bucket"]),
    "window_s": _positive_seconds,
    "burst_s": _positive_seconds,
    "retry_after_header": st.booleans(),
    "quota_usd": st.none() | st.floats(0.0, 1e6, allow_nan=False),
    "pricing": st.none()
    | st.dictionaries(st.sampled_from(PRICING_KEYS), st.floats(0.0, 1e4, allow_nan=False)),
    "ttft_s": _seconds,
    "tokens_per_s": st.none() | _positive_seconds,
    "latency": st.sampled_from(["fixed", "lognormal"]),
    "latency_median_s": st.floats(0.01, 5.0),
    "latency_p99_s": st.floats(5.0, 60.0),
    "answers": st.sampled_from(["generated", "extractive"]),
    "perturb": _rate,
    "perturb_kinds": st.lists(st.sampled_from(PERTURBATIONS), min_size=1, unique=True).map(tuple),
    "quote_faults": _rate,
    "quality": st.sampled_from(["illustrative", "exact", "off", None, QualityModel()]),
    "cache_block_tokens": st.integers(1, 4096),
    "cache_min_tokens": st.integers(0, 10_000),
    "cache_refresh_on_read": st.booleans(),
    "answer_keys": st.lists(
        st.fixed_dictionaries(
            {"items": st.lists(st.builds(lambda t: {"sku": t, "@at": f"line {t}"}, st.text()))}
        ),
        max_size=3,
    ).map(tuple),
}
#: A value every setting refuses, by its flat name.
BAD: dict[str, Any] = {
    "api_key": "",
    "seed": "seven",
    "clock": 12.5,
    "schema_level": "lenient",
    "stream_usage": "sometimes",
    "history_limit": -1,
    "fault_500": 1.5,
    "fault_reset": -0.1,
    "fault_stream_cut": math.nan,
    "fault_slow_first_byte": "often",
    "slow_first_byte_s": -2.0,
    "fault_invalid_json": True,
    "fault_truncate": 2,
    "overload_rate": 1.01,
    "spurious_429_rate": 2.0,
    "max_concurrency": 0,
    "rpm": -60,
    "tpm": 1.5,
    "rate_shape": "leaky",
    "window_s": 0,
    "burst_s": math.inf,
    "retry_after_header": "yes",
    "quota_usd": -1.0,
    "pricing": {"input": -1.0},
    "ttft_s": -0.5,
    "tokens_per_s": 0,
    "latency": "pareto",
    "latency_median_s": 0,
    "latency_p99_s": math.nan,
    "answers": "abstractive",
    "perturb": 1.5,
    "perturb_kinds": ("rot13",),
    "quote_faults": -1,
    "quality": "perfect",
    "cache_block_tokens": 0,
    "cache_min_tokens": -1,
    "cache_refresh_on_read": 1,
    "answer_keys": ["not a JSON object"],
}
#: Every keyword ``Simulator(...)`` took before its settings were grouped.
FLAT_KEYWORDS = (
    "api_key responder port host clock seed max_concurrency rpm tpm retry_after_header "
    "overload_rate quota_usd pricing fault_500 fault_reset fault_stream_cut "
    "fault_slow_first_byte slow_first_byte_s fault_invalid_json fault_truncate ttft_s "
    "tokens_per_s stream_usage cache_block_tokens cache_min_tokens cache_refresh_on_read "
    "history_limit schema_level rate_shape window_s burst_s spurious_429_rate latency "
    "latency_median_s latency_p99_s answers perturb perturb_kinds quote_faults quality"
).split()
#: Settings added since, each in a group.
NEW_SETTINGS = {"answer_keys"}


def test_every_keyword_of_the_flat_simulator_is_still_taken() -> None:
    settings_ = option_names() - set(GROUPS)
    assert settings_ == set(FLAT_KEYWORDS) - {"responder", "port", "host"} | NEW_SETTINGS
    assert set(FLAT_KEYWORDS) | NEW_SETTINGS <= set(inspect.signature(Simulator).parameters)
    assert set(VALID) == settings_ and set(BAD) == settings_


def _grouped(flat: dict[str, Any]) -> dict[str, Any]:
    """The same settings as groups: each group made from its own fields."""
    grouped = {name: value for name, value in flat.items() if name not in GROUP_OF}
    for group, cls in GROUPS.items():
        part = {name: value for name, value in flat.items() if GROUP_OF.get(name) == group}
        grouped[group] = cls(**part)
    return grouped


def _read_back(config: SimulatorConfig, name: str) -> Any:
    value = getattr(config, name)
    return dict(value) if name == "pricing" and value is not None else value


_settings = st.fixed_dictionaries({}, optional=VALID)


@settings(max_examples=150, deadline=None)
@given(flat=_settings)
def test_flat_keywords_and_groups_make_the_same_config(flat: dict[str, Any]) -> None:
    config = SimulatorConfig(**flat)
    assert config == SimulatorConfig(**_grouped(flat))
    for name, value in flat.items():  # each setting reads back by its name, as given
        expected = time.monotonic if name == "clock" and value is None else value
        assert _read_back(config, name) == expected, name
    for name in option_names() - set(flat) - set(GROUPS):  # the others keep their defaults
        assert _read_back(config, name) == _read_back(SimulatorConfig(), name), name
    sim = Simulator(**flat)
    assert sim.config == config and sim.api_key == config.api_key


@settings(max_examples=150, deadline=None)
@given(base=_settings, overrides=_settings)
def test_keywords_beside_a_config_change_those_settings(
    base: dict[str, Any], overrides: dict[str, Any]
) -> None:
    expected = SimulatorConfig(**{**base, **overrides})
    config = SimulatorConfig(**_grouped(base))
    assert Simulator(config=config, **overrides).config == expected
    assert dataclasses.replace(config, **overrides) == expected
    assert Simulator(config=config).config is config


def test_a_flat_keyword_beside_its_group_wins() -> None:
    config = SimulatorConfig(limits=LimitOptions(rpm=10, tpm=99), rpm=20)
    assert (config.rpm, config.tpm) == (20, 99)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_setting_is_a_configuration_error_naming_it(name: str) -> None:
    for make in (SimulatorConfig, Simulator):
        with pytest.raises(ConfigurationError, match=name):
            make(**{name: BAD[name]})
    if name in GROUP_OF:  # the group refuses it too, made alone or derived
        cls = GROUPS[GROUP_OF[name]]
        with pytest.raises(ConfigurationError, match=name):
            cls(**{name: BAD[name]})
        with pytest.raises(ConfigurationError, match=name):
            dataclasses.replace(cls(), **{name: BAD[name]})
    with pytest.raises(ConfigurationError, match=name):
        Simulator(config=SimulatorConfig(), **{name: BAD[name]})


def test_a_lognormal_median_above_its_p99_is_refused() -> None:
    LatencyOptions(latency_median_s=20.0)  # unused by the fixed shape, as before
    with pytest.raises(ConfigurationError, match="latency_median_s"):
        LatencyOptions(latency="lognormal", latency_median_s=20.0)


def test_groups_and_the_config_are_their_own_types() -> None:
    with pytest.raises(ConfigurationError, match="limits must be a LimitOptions"):
        SimulatorConfig(limits=FaultOptions())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="config must be a SimulatorConfig"):
        Simulator("sk-a-key-given-positionally")  # type: ignore[arg-type]


def test_a_misspelt_setting_names_the_closest_one() -> None:
    with pytest.raises(TypeError, match=r"^Simulator\(\) got .*'rmp' \(did you mean 'rpm'\?\)"):
        Simulator(rmp=60)
    with pytest.raises(TypeError, match="fault_500"):
        SimulatorConfig(fault500=0.1)


def test_a_config_is_frozen_and_keeps_its_own_copies() -> None:
    prices = {"input": 1.0, "output": 2.0}
    kinds = ["case", "typo"]
    config = SimulatorConfig(pricing=prices, perturb_kinds=kinds, api_key=KEY)
    prices["input"] = 99.0
    kinds.append("width")
    assert config.pricing == {"input": 1.0, "output": 2.0}
    assert config.perturb_kinds == ("case", "typo")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.seed = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        config.rpm = 3  # type: ignore[misc]
    assert KEY not in repr(config) and KEY not in repr(Simulator(config=config).config)


def test_help_lists_every_setting() -> None:
    shown = inspect.signature(Simulator).parameters
    assert list(shown)[:4] == ["config", "responder", "port", "host"]
    assert set(shown) - {"config", "responder", "port", "host"} == option_names()
    assert set(inspect.signature(SimulatorConfig).parameters) == option_names()


def _post(sim: Simulator, client: httpx.Client) -> int:
    body = {"model": "kimi-k3.1-pro", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"Authorization": f"Bearer {sim.api_key}"}
    return client.post(
        sim.base_url + "/v1/chat/completions", json=body, headers=headers
    ).status_code


def test_settings_in_a_config_reach_the_server() -> None:
    now = [600.0]
    config = SimulatorConfig(
        api_key=KEY,
        clock=lambda: now[0],
        limits=LimitOptions(rpm=1, rate_shape="fixed"),
    )
    with Simulator(config=config, rpm=2) as sim, httpx.Client(timeout=10) as client:
        assert [_post(sim, client) for _ in range(3)] == [200, 200, 429]  # the override's 2
        now[0] = 660.0
        assert _post(sim, client) == 200
    with Simulator(config=SimulatorConfig(faults=FaultOptions(fault_500=1.0))) as sim:
        with httpx.Client(timeout=10) as client:
            assert _post(sim, client) == 500


def test_serve_keeps_no_history_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[SimulatorConfig] = []

    class Stopped(Simulator):
        def start(self) -> Simulator:
            made.append(self.config)
            raise KeyboardInterrupt

    monkeypatch.setattr(server, "Simulator", Stopped)
    server.serve(port=0, rpm=5)
    server.serve(port=0, config=SimulatorConfig(rpm=7))
    server.serve(port=0, config=SimulatorConfig(history_limit=3))
    server.serve(port=0, config=SimulatorConfig(history_limit=3), history_limit=9)
    assert [(c.rpm, c.history_limit) for c in made] == [(5, 0), (7, 0), (None, 3), (None, 9)]


def test_simulate_refuses_a_bad_flag_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["simulate", "--port", "0", "--perturb", "1.5"]) == cli.EXIT_STOPPED
    err = capsys.readouterr().err
    assert err.startswith("error: perturb must be between 0 and 1") and "Traceback" not in err


# -- the settings page -------------------------------------------------------------------------


def test_every_setting_has_a_docstring() -> None:
    for cls in (SimulatorConfig, *GROUPS.values()):
        assert set(field_docs(cls)) == {f.name for f in fields(cls)}, cls.__name__
        assert all(doc.strip() for doc in field_docs(cls).values())


def test_the_settings_page_is_the_generated_one() -> None:
    assert PAGE.read_text(encoding="utf-8") == settings_markdown(), (
        "docs/simulator-settings.md is out of date: run "
        "`python -m kimi_extract.simulator.docs docs/simulator-settings.md`"
    )


def test_the_page_lists_every_setting_and_group() -> None:
    page = settings_markdown()
    for name in option_names() - set(GROUPS):
        assert f"| `{name}=` |" in page, name
    for group, cls in GROUPS.items():
        assert f"`{group}={cls.__name__}(...)`" in page


def test_the_pages_example_runs() -> None:
    block = PAGE.read_text(encoding="utf-8").split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(block, str(PAGE), "exec"), {})


def test_the_readme_links_the_settings_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The simulator", 1)[1].split("\n## ", 1)[0]
    assert "docs/simulator-settings.md" in section
