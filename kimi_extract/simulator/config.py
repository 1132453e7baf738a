"""The simulator's settings (``Config``, ``Responder``) and the answer record the app hands to
``streaming`` (``SimAnswer``): the records both sides read, so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..kimi import CACHE_MIN_TOKENS
from . import completion
from .cache import Lookup
from .extractive import PERTURBATIONS
from .limits import FaultRates
from .protocol import SimRequest
from .quality import QualityModel

Responder = Callable[[SimRequest], Any]


@dataclass
class Config:
    """Every ``Simulator`` option except host/port; see ``Simulator`` for their meaning."""

    api_key: str
    clock: Callable[[], float]
    seed: int = 0
    max_concurrency: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    retry_after_header: bool = False
    overload_rate: float = 0.0
    quota_usd: float | None = None
    pricing: dict[str, float] | None = None
    faults: FaultRates = field(default_factory=FaultRates)
    slow_first_byte_s: float = 2.0
    ttft_s: float = 0.0
    tokens_per_s: float | None = None
    stream_usage: str = "choices"
    cache_block_tokens: int = 64
    cache_min_tokens: int = CACHE_MIN_TOKENS
    cache_refresh_on_read: bool = False
    history_limit: int | None = None
    schema_level: Literal["strict", "ultra"] = "strict"
    #: "generated" or "extractive" (string fields copy spans of the user text), with the share
    #: of extractive strings perturbed and the perturbations allowed (``extractive``).
    answers: Literal["generated", "extractive"] = "generated"
    perturb: float = 0.0
    perturb_kinds: tuple[str, ...] = PERTURBATIONS
    #: The share of ``kx_quotes`` quotes made bad (fabricated or garbled; ``extractive``).
    quote_faults: float = 0.0
    #: How answers to rows that carry an answer key go wrong (``quality``); None: keys ignored.
    quality: QualityModel | None = None
    #: Limiter shapes and latency model (``limits``): see ``Simulator``.
    rate_shape: str = "sliding"
    window_s: float = 60.0
    burst_s: float = 0.1
    spurious_429_rate: float = 0.0
    latency: str = "fixed"
    latency_median_s: float = 1.0
    latency_p99_s: float = 10.0


@dataclass
class SimAnswer:
    """A chat answer ready to send."""

    body: dict[str, Any]
    outcome: completion.Outcome
    usage: dict[str, Any]
    lookup: Lookup
    headers: dict[str, str]
    faults: list[str]
    delay_s: float
    ttl: str
    request_body: dict[str, Any]
