"""The settings groups: limits, connection, budget, prompt cache, grounding (and media).

Each group is a frozen dataclass that checks itself when made (``config.fields``), with a
docstring under every field. ``kx.ExtractorConfig`` holds one of each; its flat keywords
(``concurrency=32``) are the fields of these groups, so ``kx.Extractor(Review, concurrency=32)``
and ``kx.Extractor(Review, limits=kx.Limits(concurrency=32))`` are the same extractor. The run
takes them as they are: the transport takes ``Connection``, the limiter ``Limits``, the budget
``Budget``. ``kimi_extract.media.parts.MediaOptions`` is the media group.

Checks that need more than one group (a budget that must pay for one request's
``max_completion_tokens``, a cache TTL the model must accept) are ``ExtractorConfig``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from ..exceptions import ConfigurationError
from ..http.backends import BACKENDS, DEFAULT_MAX_RESPONSE_BYTES
from ..kimi import CACHE_TTLS, MAX_CONCURRENCY
from .fields import (
    check_bool,
    check_count,
    check_optional_positive,
    check_positive,
    check_seconds,
)

__all__ = ["Budget", "Connection", "GroundingOptions", "Limits", "PromptCache"]

#: The library's part of every request's ``User-Agent`` header.
LIBRARY_USER_AGENT = "kimi-extract/0.1"
#: The longest ``user_agent`` accepted.
MAX_USER_AGENT = 200


@dataclass(frozen=True)
class Limits:
    """How fast requests go: rows in flight, and client-side limits per minute.

    ``kx.Limits(concurrency=32, rpm=600)``, as httpx's ``Limits``. The limits hold across every
    run of the extractor, and across a Dask cluster as a whole.
    """

    concurrency: int = 16
    """Rows in flight at once (1 to 1,000, the highest Kimi tier's concurrency); the HTTP
    connection pool is sized to it."""

    rpm: int | None = None
    """Client-side limit of requests per minute: no 60-second window holds more sends (None:
    no limit)."""

    tpm: int | None = None
    """Client-side limit of tokens per minute (prompt estimate plus completion), over any
    60-second window (None: no limit)."""

    adaptive: bool = True
    """A paced opening (8 at once, then 50/s until a round trip after the first answer) and a
    window that grows by answers; limits named in 429s adopted with their window; 429s that
    name nothing read by their pattern (a rate limit cuts a CUBIC send rate, a window shown by
    a stall is kept to, random refusals cut nothing). See docs/reliability.md, "Rate limits"."""

    def __post_init__(self) -> None:
        check_positive("concurrency", self.concurrency)
        if self.concurrency > MAX_CONCURRENCY:
            raise ConfigurationError(
                f"concurrency={self.concurrency:,} exceeds the maximum {MAX_CONCURRENCY:,} (the "
                "highest Kimi tier's concurrency); use a value up to your account's limit"
            )
        check_optional_positive("rpm", self.rpm)
        check_optional_positive("tpm", self.tpm)
        check_bool("adaptive", self.adaptive)


@dataclass(frozen=True)
class Connection:
    """How each HTTP attempt is made and retried.

    ``kx.Connection(timeout=120, max_retries=3)``. Retried: 408, 409, 429 rate limits, 5xx,
    timeouts and connection errors, with full-jitter exponential backoff; a wait the server asks
    for is honoured exactly. Never retried: 400, 401, 403, 404 and an empty balance.
    """

    max_retries: int = 8
    """Extra attempts after the first for a transient failure (0: none). 429s that ask to slow
    down do not count while the run makes progress (``max_retry_wait``)."""

    max_retry_wait: float = 60.0
    """Longest wait in seconds before a retry; a server that asks for a longer wait fails the
    row instead (never shortened). Also how long a run may go without an answer before its 429s
    count toward ``max_retries`` again; once it has had an answer, 60 s longer, or four times
    its mean gap between answers if that is longer still."""

    timeout: float = 600.0
    """Deadline in seconds for each HTTP attempt, from connect to last byte; a stream also fails
    after ``min(timeout, 120)`` seconds of silence between two events."""

    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    """Cap on one response body after decompression, in bytes; a larger one is that row's
    ``ResponseTooLargeError`` (not retried)."""

    http_backend: str = "aiohttp"
    """The HTTP client: ``"aiohttp"``, ``"httpx-aiohttp"`` or ``"httpx"``."""

    user_agent: str | None = None
    """Your application's name and version (``"invoice-bot/2.1"``), sent before the library's
    in the ``User-Agent`` header of every API request (``invoice-bot/2.1 kimi-extract/0.1``), so
    the provider's and your proxy's logs tell your traffic apart. Printable ASCII, at most 200
    characters; None: ``kimi-extract/0.1`` alone."""

    def __post_init__(self) -> None:
        check_count("max_retries", self.max_retries)
        check_seconds("max_retry_wait", self.max_retry_wait, allow_zero=True)
        check_seconds("timeout", self.timeout)
        check_positive("max_response_bytes", self.max_response_bytes)
        if self.http_backend not in BACKENDS:
            raise ConfigurationError(
                f"http_backend must be one of {BACKENDS}, got {self.http_backend!r}"
            )
        agent = self.user_agent
        if agent is not None and not (
            isinstance(agent, str)
            and 0 < len(agent.strip()) <= MAX_USER_AGENT
            and all(" " <= c <= "~" for c in agent)
        ):
            # A header value: a line break or control character would end or split the header.
            raise ConfigurationError(
                f"user_agent must be printable ASCII of 1 to {MAX_USER_AGENT} characters (such "
                f"as 'invoice-bot/2.1'), got {agent!r}"[:300]
            )

    @property
    def user_agent_header(self) -> str:
        """The ``User-Agent`` sent: ``user_agent`` (if any), then ``LIBRARY_USER_AGENT``."""
        if self.user_agent is None:
            return LIBRARY_USER_AGENT
        return f"{self.user_agent.strip()} {LIBRARY_USER_AGENT}"


@dataclass(frozen=True)
class Budget:
    """Hard limits on what one run may spend, as pydantic-ai's ``UsageLimits``.

    ``kx.Budget(max_cost=5.0)``. Every attempt reserves its worst case (its prompt plus all of
    ``max_completion_tokens``) before it is sent, so billed totals never cross a cap; the run
    stops with ``BudgetExceeded`` when the next attempt would not fit. Each cap must pay for one
    request's worst case, or nothing could be sent.
    """

    max_cost: float | None = None
    """Budget in USD for the whole run (needs prices for the model: the package table or
    ``pricing=``); None: no cap."""

    max_total_tokens: int | None = None
    """Budget in tokens for the whole run, prompt and completion of every request (not the API's
    per-request ``max_tokens``: that is ``max_completion_tokens``); None: no cap. Old name:
    ``max_tokens`` (deprecated)."""

    def __post_init__(self) -> None:
        check_optional_positive("max_total_tokens", self.max_total_tokens)
        cost = self.max_cost
        if cost is not None and not (
            isinstance(cost, int | float)
            and not isinstance(cost, bool)
            and math.isfinite(cost)
            and cost > 0
        ):
            raise ConfigurationError(f"max_cost must be a positive number of USD, got {cost!r}")

    @property
    def limited(self) -> bool:
        """Whether any cap is set."""
        return self.max_cost is not None or self.max_total_tokens is not None


@dataclass(frozen=True)
class PromptCache:
    """Kimi's prompt cache: how long a written prefix lives, and writing it once.

    ``kx.PromptCache(cache_ttl="1h")``. "Cache" here is always Kimi's prompt cache; finished
    rows are kept in the result store (``store=``).
    """

    cache_ttl: str | None = "auto"
    """Prompt-cache write TTL, K3.1 series only: ``"5m"`` or ``"1h"``; ``"auto"`` picks ``1h``
    when the run is expected to last long enough for one 1-hour write to be cheaper than repeated
    5-minute ones, else sends nothing (the server's 5m); None never sends it."""

    cache_warm: bool = True
    """When the rows share a prefix the cache can hold (over 256 tokens), send one request first
    and fan out after it completes, so the prefix is written once and read by every other row."""

    def __post_init__(self) -> None:
        if self.cache_ttl not in (None, "auto", *CACHE_TTLS):
            raise ConfigurationError(
                f"cache_ttl must be 'auto', '5m', '1h' or None, got {self.cache_ttl!r}"
            )
        check_bool("cache_warm", self.cache_warm)


@dataclass(frozen=True)
class GroundingOptions:
    """Finding each extracted value in the text that was sent (kimi_extract/ground/).

    ``kx.GroundingOptions(grounding="quotes")``, or ``grounding=True`` as a flat keyword. Adds
    the ``kx_spans`` and ``kx_grounded`` columns; check them with ``kx.review``.
    """

    grounding: bool | Literal["quotes"] = False
    """True: after validation, align every leaf of each answer to the text sent (no extra
    tokens). ``"quotes"``: also ask the model for a supporting quote per field, and mark a value
    unsupported when its quote is not in the text (more completion tokens)."""

    grounding_fields: Mapping[str, bool] | None = None
    """Which fields are grounded: a dict of field paths (list indexes left out: ``"sentiment"``,
    ``"lines.kind"``) to True (ground the field's values) or False (an inferred field: kind
    "inferred", outside ``kx_grounded``, never unsupported). None: enums, ``Literal`` fields,
    booleans and fields marked ``Field(json_schema_extra={"kx_ground": False})`` are inferred,
    every other field is grounded."""

    def __post_init__(self) -> None:
        if not (isinstance(self.grounding, bool) or self.grounding == "quotes"):
            raise ConfigurationError(
                f"grounding must be True, False or 'quotes', got {self.grounding!r}"
            )
        fields = self.grounding_fields
        if fields is not None and not (
            isinstance(fields, Mapping)
            and all(isinstance(k, str) and k for k in fields)
            and all(isinstance(v, bool) for v in fields.values())
        ):
            raise ConfigurationError(
                "grounding_fields must be a dict of field paths to True (ground) or False "
                f"(inferred), got {fields!r}"
            )
