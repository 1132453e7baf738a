"""The simulator's settings groups: faults, limits, latency, answers and the prompt cache.

Each group is a small frozen dataclass that checks itself when made, as the client's settings
groups do (``kimi_extract.config``; httpx's ``Limits``, pydantic-ai's ``UsageLimits``): every
field has a default and, on the line below it, a docstring saying what it does, its unit and its
range; ``__post_init__`` raises a ``ConfigurationError`` naming the field that is wrong, so a
group that exists is a valid one, and ``dataclasses.replace`` checks again. ``field_docs`` reads
the docstrings (docs/simulator-settings.md is generated from them: ``kimi_extract.simulator.docs``).

``SimulatorConfig`` (``config``) holds one of each; its flat keywords (``rpm=120``) are the
fields of these groups. The simulator is an island (it imports no client module), so these
checks are its own, written the same way as the client's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigurationError
from ..kimi import CACHE_MIN_TOKENS
from .extractive import PERTURBATIONS
from .limits import LATENCY_SHAPES, RATE_SHAPES, WINDOW_S, FaultRates
from .quality import QualityModel, quality_model
from .recall import KeyIndex

__all__ = ["AnswerOptions", "CacheOptions", "FaultOptions", "LatencyOptions", "LimitOptions"]

#: The ``pricing`` keys the simulator bills by (USD per 1M tokens; ``limits.cost_usd``).
PRICING_KEYS = ("input", "cached_input", "cache_write", "output", "cache_write_1h")
ANSWER_MODES = ("generated", "extractive")


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_rate(name: str, value: object) -> None:
    """A share of requests or values: a number from 0 to 1."""
    if not (_is_number(value) and 0.0 <= value <= 1.0):  # type: ignore[operator]
        raise ConfigurationError(f"{name} must be between 0 and 1, got {value!r}")


def check_seconds(name: str, value: object, *, allow_zero: bool) -> None:
    """A duration: a finite number of seconds, > 0 (>= 0 with ``allow_zero``)."""
    if not (_is_number(value) and (value >= 0 if allow_zero else value > 0)):  # type: ignore[operator]
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(
            f"{name} must be a finite number of seconds {bound}, got {value!r}"
        )


def check_whole(name: str, value: object, *, minimum: int, optional: bool = False) -> None:
    """A whole number >= ``minimum`` (a bool is not one); None too with ``optional``."""
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigurationError(
            f"{name} must be {what}{' or None' if optional else ''}, got {value!r}"
        )


def check_bool(name: str, value: object) -> None:
    """An on/off setting: exactly True or False."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {value!r}")


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    """One of a few named values."""
    if not (isinstance(value, str) and value in choices):
        quoted = ", ".join(repr(choice) for choice in choices)
        raise ConfigurationError(f"{name} must be one of {quoted}, got {value!r}")


@dataclass(frozen=True)
class FaultOptions:
    """Seeded faults: errors, broken streams and refusals at set rates, whatever the load.

    ``FaultOptions(fault_500=0.05, fault_stream_cut=0.1)``. Each rate is a per-request
    probability from 0 to 1, drawn from the simulator's ``seed``, so a given seed and arrival
    order give the same faults. At most one of 500 / reset / cut / invalid JSON / truncate hits
    a request (in that order); a slow first byte combines with any.
    """

    fault_500: float = 0.0
    """Share of requests answered 500 ``server_error`` instead of their answer (not billed)."""

    fault_reset: float = 0.0
    """Share of requests whose connection is closed without a response (not billed)."""

    fault_stream_cut: float = 0.0
    """Share of streamed requests cut off mid-stream, before the final event (not billed)."""

    fault_slow_first_byte: float = 0.0
    """Share of requests that wait ``slow_first_byte_s`` more before their first byte."""

    slow_first_byte_s: float = 2.0
    """The extra wait of a slow first byte, in seconds (>= 0)."""

    fault_invalid_json: float = 0.0
    """Share of JSON answers whose content is not valid JSON: prose around it, or the JSON cut
    short (``finish_reason`` stays ``"stop"``)."""

    fault_truncate: float = 0.0
    """Share of answers cut to about half, with ``finish_reason: "length"``."""

    overload_rate: float = 0.0
    """Share of requests refused with 429 ``engine_overloaded_error``."""

    spurious_429_rate: float = 0.0
    """Share of requests refused with Kimi's rate-limit message (429
    ``rate_limit_reached_error``, naming the configured RPM, else the concurrency limit, else
    3,000) whatever the load, as Kimi's
    gateway does at times: a 429 that is not a rate signal."""

    def __post_init__(self) -> None:
        for name in (
            "fault_500",
            "fault_reset",
            "fault_stream_cut",
            "fault_slow_first_byte",
            "fault_invalid_json",
            "fault_truncate",
            "overload_rate",
            "spurious_429_rate",
        ):
            check_rate(name, getattr(self, name))
        check_seconds("slow_first_byte_s", self.slow_first_byte_s, allow_zero=True)

    def rates(self) -> FaultRates:
        """The rates of the faults drawn after admission (``limits.draw_faults``)."""
        return FaultRates(
            self.fault_500,
            self.fault_reset,
            self.fault_stream_cut,
            self.fault_slow_first_byte,
            self.fault_invalid_json,
            self.fault_truncate,
        )


@dataclass(frozen=True)
class LimitOptions:
    """Rate limits, concurrency and quota, enforced as Kimi does (all off by default).

    ``LimitOptions(rpm=120, rate_shape="bucket")``. A refused request gets a 429 in Kimi's words
    ("... reached organization max RPM: 120, please try again after 2 seconds"), is not billed
    and does not count toward the windows.
    """

    max_concurrency: int | None = None
    """Requests admitted and not yet finished; one more is a 429 (None: no limit)."""

    rpm: int | None = None
    """Requests admitted per minute, in the shape ``rate_shape`` (None: no limit)."""

    tpm: int | None = None
    """Tokens per minute, prompt plus completion of each admitted request, charged before its
    answer is sent, in the shape ``rate_shape`` (None: no limit)."""

    rate_shape: str = "sliding"
    """How ``rpm`` and ``tpm`` are enforced: ``"sliding"`` (any 60 s holds at most the limit),
    ``"fixed"`` (60 s windows from the first request) or ``"bucket"`` (a token bucket refilled at
    ``limit / 60`` per second, holding ``burst_s`` seconds' worth)."""

    window_s: float = WINDOW_S
    """The window of the sliding and fixed shapes in seconds (> 0). Limits stay per minute: a
    window holds ``limit * window_s / 60`` (at least 1). Shorter windows show many windows in a
    short benchmark; Kimi's is 60 s."""

    burst_s: float = 0.1
    """The bucket shape's burst: at most this many seconds' worth of the limit at once (> 0;
    at least one request)."""

    retry_after_header: bool = False
    """Send a ``Retry-After`` header with each rate-limit 429 (Kimi sends none: the wait is
    only in the message)."""

    quota_usd: float | None = None
    """Once the billed spend reaches this many USD, every request is a 429
    ``exceeded_current_quota_error`` (None: no quota)."""

    pricing: Mapping[str, float] | None = None
    """USD per 1M tokens by bucket (``input``, ``cached_input``, ``cache_write``, ``output``,
    optional ``cache_write_1h``) for the billed spend and ``quota_usd``, for every model
    (None: the model table's prices)."""

    def __post_init__(self) -> None:
        for name in ("max_concurrency", "rpm", "tpm"):
            check_whole(name, getattr(self, name), minimum=1, optional=True)
        check_choice("rate_shape", self.rate_shape, RATE_SHAPES)
        check_seconds("window_s", self.window_s, allow_zero=False)
        check_seconds("burst_s", self.burst_s, allow_zero=False)
        check_bool("retry_after_header", self.retry_after_header)
        if self.quota_usd is not None and not (_is_number(self.quota_usd) and self.quota_usd >= 0):
            raise ConfigurationError(
                f"quota_usd must be a number of USD >= 0 or None, got {self.quota_usd!r}"
            )
        if self.pricing is not None:
            prices = self.pricing
            if not isinstance(prices, Mapping) or not all(
                key in PRICING_KEYS and _is_number(price) and price >= 0
                for key, price in prices.items()
            ):
                raise ConfigurationError(
                    f"pricing must map some of {PRICING_KEYS} to USD per 1M tokens >= 0, got "
                    f"{prices!r}"
                )
            object.__setattr__(self, "pricing", dict(prices))  # a copy the caller cannot change


@dataclass(frozen=True)
class LatencyOptions:
    """How long answers take: time to the first byte and output pacing.

    ``LatencyOptions(latency="lognormal")``: each answer's delay drawn from a seeded lognormal
    with a median of 1 s and a 99th percentile of 10 s, on top of ``ttft_s``.
    """

    ttft_s: float = 0.0
    """Seconds before each answer's first byte (>= 0)."""

    tokens_per_s: float | None = None
    """Output pacing: a stream sends its events at this many tokens per second, and a plain
    response waits for its whole answer at that rate (None: no pacing)."""

    latency: str = "fixed"
    """``"fixed"`` (every answer waits ``ttft_s``) or ``"lognormal"`` (``ttft_s`` plus a seeded
    lognormal delay with median ``latency_median_s`` and 99th percentile ``latency_p99_s``)."""

    latency_median_s: float = 1.0
    """The lognormal delay's median in seconds (> 0, at most ``latency_p99_s``)."""

    latency_p99_s: float = 10.0
    """The lognormal delay's 99th percentile in seconds."""

    def __post_init__(self) -> None:
        check_seconds("ttft_s", self.ttft_s, allow_zero=True)
        if self.tokens_per_s is not None:
            check_seconds("tokens_per_s", self.tokens_per_s, allow_zero=False)
        check_choice("latency", self.latency, LATENCY_SHAPES)
        check_seconds("latency_median_s", self.latency_median_s, allow_zero=False)
        check_seconds("latency_p99_s", self.latency_p99_s, allow_zero=False)
        if self.latency == "lognormal" and self.latency_median_s > self.latency_p99_s:
            raise ConfigurationError(
                f"latency_median_s must be > 0 and <= latency_p99_s, got "
                f"{self.latency_median_s} > {self.latency_p99_s}"
            )


@dataclass(frozen=True)
class AnswerOptions:
    """What the simulated model answers: made-up or copied strings, and mistakes.

    ``AnswerOptions(answers="extractive", perturb=0.3)`` copies every plain string of a JSON
    answer from the user's text and changes 30 % of them, to test grounding offline.
    """

    answers: str = "generated"
    """``"generated"`` (strings are words of the user text) or ``"extractive"`` (every plain
    string of a JSON answer is a span of the last user message, deterministic per request)."""

    perturb: float = 0.0
    """With extractive answers: the share (0 to 1) of strings changed by one of
    ``perturb_kinds``."""

    perturb_kinds: Sequence[str] = PERTURBATIONS
    """The changes ``perturb`` draws from: ``"case"``, ``"spacing"``, ``"typo"``, ``"width"``
    (full-width forms); a non-empty selection."""

    quote_faults: float = 0.0
    """With extractive answers: the share (0 to 1) of the supporting quotes a quoted schema asks
    for (``grounding="quotes"``) that are fabricated or garbled."""

    quality: QualityModel | str | None = "illustrative"
    """How a ``json_schema`` answer to a row whose text carries an answer key
    (``kimi_extract.simulator.quality.with_answer_key``) goes wrong: ``"illustrative"`` (made-up
    error rates per model and effort), ``"exact"`` (no mistakes), a ``QualityModel``, or None /
    ``"off"`` (answer keys ignored). Rows without a key are unaffected."""

    answer_keys: Sequence[Any] = ()
    """Answer keys of long documents whose values say where they are written (``"@at"``,
    ``"@decoys"``; ``kimi_extract/simulator/recall.py``): a ``json_schema`` request without a key
    of its own is answered from the one whose located texts its conversation shows, as much as
    its text shows and as its model's ``Recall`` finds (``QualityModel.recall``), pass by pass."""

    def __post_init__(self) -> None:
        check_choice("answers", self.answers, ANSWER_MODES)
        check_rate("perturb", self.perturb)
        kinds = self.perturb_kinds
        if (
            isinstance(kinds, str)
            or not isinstance(kinds, Sequence | frozenset | set)
            or not kinds
            or not set(kinds) <= set(PERTURBATIONS)
        ):
            shown = list(kinds) if isinstance(kinds, Sequence | set | frozenset) else kinds
            raise ConfigurationError(
                f"perturb_kinds must be a non-empty subset of {PERTURBATIONS}, got {shown!r}"
            )
        object.__setattr__(self, "perturb_kinds", tuple(kinds))
        check_rate("quote_faults", self.quote_faults)
        quality_model(self.quality)  # raises a ConfigurationError naming quality
        keys = self.answer_keys
        if isinstance(keys, str | bytes | dict) or not isinstance(keys, Sequence):
            raise ConfigurationError(
                f"answer_keys must be a list of answer keys (JSON objects), got {keys!r:.80}"
            )
        KeyIndex(keys)  # raises a ConfigurationError naming answer_keys
        object.__setattr__(self, "answer_keys", tuple(keys))


@dataclass(frozen=True)
class CacheOptions:
    """The implicit prefix cache: how prompts are cut into cached blocks.

    ``CacheOptions(cache_refresh_on_read=True)``. Cached and cache-write tokens are reported in
    ``usage`` as Kimi does; entries live 5 minutes, or 1 hour when a request asks for it.
    """

    cache_block_tokens: int = 64
    """Tokens per cached block (>= 1); only full blocks are cached."""

    cache_min_tokens: int = CACHE_MIN_TOKENS
    """A prompt is written to the cache, and a cached prefix read, only when longer than this
    many tokens (>= 0)."""

    cache_refresh_on_read: bool = False
    """A read also resets the expiry of the blocks it read (by default an entry lives its TTL
    from the write that made it)."""

    def __post_init__(self) -> None:
        check_whole("cache_block_tokens", self.cache_block_tokens, minimum=1)
        check_whole("cache_min_tokens", self.cache_min_tokens, minimum=0)
        check_bool("cache_refresh_on_read", self.cache_refresh_on_read)


#: Every group, by the attribute ``SimulatorConfig`` holds it under.
GROUPS: dict[str, type[Any]] = {
    "faults": FaultOptions,
    "limits": LimitOptions,
    "latency_options": LatencyOptions,
    "answer_options": AnswerOptions,
    "cache": CacheOptions,
}
