"""Token accounting and cost.

``Usage`` buckets nest the way Kimi reports them (docs/reference/kimi-chat-completions-reference.md,
``ChatUsage``)::

    prompt_tokens            every input token of the request(s)
    ├── cached_tokens        served from the prefix cache (billed at the cached rate)
    ├── cache_write_tokens   written to the cache (K3.1: own rate; kimi-k3: reported as 0)
    └── (the rest)           regular input
    completion_tokens        every output token
    └── reasoning_tokens     of which reasoning

``Usage`` values add with ``+``; ``cost`` is in USD and NaN when the price is unknown.

The rows that travel between the stages live here too: ``RowInput`` (made by ``run.inputs`` or
``run.documents``, sent by ``run.conversation``) and ``RowResult`` (made by
``run.conversation``, ordered by ``run.scheduler``, turned into columns by ``table.frame``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .exceptions import ConfigurationError

if TYPE_CHECKING:
    from pydantic import BaseModel

#: More tokens than any request can use (10x the largest context window): a usage above it is a
#: malformed response, not a bill.
MAX_TOKENS_PER_RESPONSE = 10_000_000


def _count(value: Any, name: str, *, required: bool = False) -> int:
    """A token count from a usage object: a whole number in [0, MAX_TOKENS_PER_RESPONSE]."""
    if value is None:
        if required:
            raise ValueError(f"usage has no {name}")
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"usage.{name} is not a number ({type(value).__name__})")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ValueError(f"usage.{name} is not a whole number")
    count = int(value)
    if not 0 <= count <= MAX_TOKENS_PER_RESPONSE:
        raise ValueError(f"usage.{name} is out of range ({count:.3g})")
    return count


def _details(usage: dict[str, Any], name: str) -> dict[str, Any]:
    details = usage.get(name)
    if details is None:
        return {}
    if not isinstance(details, dict):
        raise ValueError(f"usage.{name} is not an object")
    return details


@dataclass(frozen=True)
class Pricing:
    """Prices in USD per million tokens.

    ``input`` is regular (uncached) input, ``cached_input`` a cache read, ``cache_write`` a 5-minute
    cache write (K3.1 series; kimi-k3 bills writes as regular input), ``output`` completion tokens,
    reasoning included. ``cache_write_1h`` prices writes made with ``prompt_cache_options.ttl =
    "1h"`` (defaults to ``cache_write``).
    """

    input: float
    cached_input: float
    cache_write: float
    output: float
    cache_write_1h: float | None = None

    def __post_init__(self) -> None:
        # A NaN rate makes every budget comparison False (max_cost never stops anything) and a
        # negative one lets spending grow the budget: refuse both when the price is made.
        for name in ("input", "cached_input", "cache_write", "output", "cache_write_1h"):
            value = getattr(self, name)
            if value is None and name == "cache_write_1h":
                continue
            if not (
                isinstance(value, numbers.Real)
                and not isinstance(value, bool)
                and math.isfinite(value)
                and float(value) >= 0
            ):
                raise ConfigurationError(
                    f"Pricing.{name} must be a finite number of USD per 1M tokens >= 0, "
                    f"got {value!r}"
                )
            object.__setattr__(self, name, float(value))

    def cost(self, usage: Usage, *, separate_cache_writes: bool = True, ttl: str = "5m") -> float:
        """USD cost of ``usage`` under the API reference's billing rules.

        The rules: docs/reference/kimi-chat-completions-reference.md, ``ChatUsage``.

        K3.1 series: regular input = prompt - cached - cache_write, writes at ``cache_write`` (or
        ``cache_write_1h`` when ``ttl == "1h"``). kimi-k3 (``separate_cache_writes=False``):
        regular input = prompt - cached.
        """
        write_rate = self.cache_write
        if ttl == "1h" and self.cache_write_1h is not None:
            write_rate = self.cache_write_1h
        if separate_cache_writes:
            regular = usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens
            writes = usage.cache_write_tokens
        else:
            regular = usage.prompt_tokens - usage.cached_tokens
            writes = 0
        total = (
            regular * self.input
            + usage.cached_tokens * self.cached_input
            + writes * write_rate
            + usage.completion_tokens * self.output
        )
        return total / 1_000_000


@dataclass(frozen=True)
class Usage:
    """Tokens, requests and cost; nested as in the module docstring. Add with ``+``."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0
    cost: float = 0.0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def cache_hit_share(self) -> float:
        """Share of prompt tokens served from the cache (0.0 when there were none)."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        # Spelled out (not a loop over dataclasses.fields): this runs once per answer.
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.cached_tokens + other.cached_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.completion_tokens + other.completion_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.requests + other.requests,
            self.cost + other.cost,
        )

    @classmethod
    def from_api(cls, usage: Any) -> Usage:
        """Read a response's ``usage`` object (one request); raises ValueError on a bad one.

        Reads ``prompt_tokens_details.cached_tokens``
        (docs/reference/kimi-chat-completions-reference.md, ``ChatUsage``) and falls back to a
        top-level ``usage.cached_tokens`` (Moonshot's own API: docs/reference/KIMI-NOTES.md,
        "Caching"); missing detail fields count as 0.
        A usage that is missing, not an object, lacks ``prompt_tokens`` / ``completion_tokens``,
        holds a count that is not a whole number in ``[0, MAX_TOKENS_PER_RESPONSE]``, or a bucket
        larger than the one it nests in is malformed (``ValueError``): billing must never silently
        count it as 0 tokens, $0 or a negative cost.
        """
        if not isinstance(usage, dict):
            raise ValueError(f"usage is missing or not an object ({type(usage).__name__})")
        prompt_details = _details(usage, "prompt_tokens_details")
        completion_details = _details(usage, "completion_tokens_details")
        cached = prompt_details.get("cached_tokens")
        if cached is None:
            cached = usage.get("cached_tokens")
        result = cls(
            prompt_tokens=_count(usage.get("prompt_tokens"), "prompt_tokens", required=True),
            cached_tokens=_count(cached, "cached_tokens"),
            cache_write_tokens=_count(
                prompt_details.get("cache_write_tokens"), "cache_write_tokens"
            ),
            completion_tokens=_count(
                usage.get("completion_tokens"), "completion_tokens", required=True
            ),
            reasoning_tokens=_count(completion_details.get("reasoning_tokens"), "reasoning_tokens"),
            requests=1,
        )
        if result.cached_tokens + result.cache_write_tokens > result.prompt_tokens:
            raise ValueError("usage: cached + cache-write tokens exceed prompt_tokens")
        if result.reasoning_tokens > result.completion_tokens:
            raise ValueError("usage: reasoning_tokens exceed completion_tokens")
        return result

    def priced(
        self, pricing: Pricing | None, *, separate_cache_writes: bool = True, ttl: str = "5m"
    ) -> Usage:
        """A copy whose ``cost`` is computed from ``pricing`` (NaN when pricing is None)."""
        cost = (
            pricing.cost(self, separate_cache_writes=separate_cache_writes, ttl=ttl)
            if pricing is not None
            else math.nan
        )
        return Usage(
            prompt_tokens=self.prompt_tokens,
            cached_tokens=self.cached_tokens,
            cache_write_tokens=self.cache_write_tokens,
            completion_tokens=self.completion_tokens,
            reasoning_tokens=self.reasoning_tokens,
            requests=self.requests,
            cost=cost,
        )

    def summary(self) -> str:
        """One line: tokens by bucket, cache-hit share and cost."""
        cost = "cost unknown" if math.isnan(self.cost) else f"cost ${self.cost:.4f}"
        return (
            f"{self.requests:,} requests; prompt {self.prompt_tokens:,} tokens "
            f"(cached {self.cached_tokens:,} = {self.cache_hit_share:.0%}, "
            f"cache write {self.cache_write_tokens:,}); completion {self.completion_tokens:,} "
            f"(reasoning {self.reasoning_tokens:,}); {cost}"
        )


#: Zero usage, shared (``Usage`` is immutable): a row's usage until it has one.
NO_USAGE = Usage()


#: The match kinds of a ``Span``, best first:
#:
#: - "exact", "normalized", "fuzzy": the value is in the text (verbatim or in a written form of
#:   the same number or date; equal after folding or by a rewrite rule; a close match whose
#:   differences change no digit, negation or content word); these count as grounded;
#: - "near": similar text is there but it says something else (a digit, a negation or a content
#:   word differs, named by ``diff``); the span is that text; not grounded, shown as doubtful;
#: - "quote" (``grounding="quotes"``): an inferred field whose supporting quote is in the text
#:   (the span is the quote's evidence); "inferred": a label the model chose rather than copied
#:   (enums, literals, booleans, fields marked ``kx_ground=False``); neither counts in
#:   ``kx_grounded`` and neither is unsupported;
#: - "none": the value was not found (unsupported).
SPAN_KINDS = ("exact", "normalized", "fuzzy", "near", "quote", "inferred", "none")
#: The kinds that say "this value is in the text, here".
GROUNDED_KINDS = frozenset({"exact", "normalized", "fuzzy"})
#: The kinds of inferred fields: outside ``kx_grounded``, never unsupported.
INFERRED_KINDS = frozenset({"quote", "inferred"})


@dataclass(frozen=True)
class Span:
    """Where one leaf of an answer sits in the text that was sent (grounding, ``kx_spans``).

    ``path`` names the leaf (``"vendor"``, ``"items[2].name"``); ``value`` is the leaf as text.
    ``start``/``end`` are Python ``str`` indices into the exact text that was sent, so
    ``text[start:end]`` is the evidence (for "near", the closest text); both are None when the
    leaf has no span. ``kind`` is one of ``SPAN_KINDS``; ``score`` is 0..100, calibrated: the
    share of spans of that kind and score that were right on the grounding benchmark's corpus
    (``kimi_extract.ground.calibrate``), 0 for none and inferred. ``page`` is the 1-based page
    of a document (None for plain rows); ``boxes`` are character boxes (left, top, right,
    bottom) on that page when its text layer gives them, else ``()``. ``quote`` is the
    supporting quote the model gave (``grounding="quotes"``), else None. ``diff`` says what
    differs between the value and the text of a "near" span (``'number: 2.2 vs 2.1'``), else
    None.
    """

    path: str
    value: str
    start: int | None = None
    end: int | None = None
    kind: str = "none"
    score: float = 0.0
    page: int | None = None
    boxes: tuple[tuple[float, float, float, float], ...] = ()
    quote: str | None = None
    diff: str | None = None

    @property
    def grounded(self) -> bool:
        """True when the leaf was found in the text (kind exact, normalized or fuzzy)."""
        return self.start is not None and self.kind in GROUNDED_KINDS

    @property
    def inferred(self) -> bool:
        """True for an inferred field (kind "inferred" or "quote"): not counted in
        ``kx_grounded``, never unsupported."""
        return self.kind in INFERRED_KINDS

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (a ``kx_spans`` cell holds a list of these); boxes become lists."""
        return {
            "path": self.path,
            "value": self.value,
            "start": self.start,
            "end": self.end,
            "kind": self.kind,
            "score": float(self.score),
            "page": self.page,
            "boxes": [list(box) for box in self.boxes],
            "quote": self.quote,
            "diff": self.diff,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Span:
        """The inverse of ``to_dict`` (missing keys take their defaults)."""
        diff = data.get("diff")
        return cls(
            path=str(data["path"]),
            value=str(data["value"]),
            start=data.get("start"),
            end=data.get("end"),
            kind=str(data.get("kind", "none")),
            score=float(data.get("score", 0.0)),
            page=data.get("page"),
            boxes=tuple(
                (float(box[0]), float(box[1]), float(box[2]), float(box[3]))
                for box in data.get("boxes") or ()
            ),
            quote=data.get("quote"),
            diff=diff if isinstance(diff, str) else None,
        )


#: A row's content: a text, or a list of chat content parts (images and videos first, then text).
Content = str | list[dict[str, Any]]


def is_missing(value: Any) -> bool:
    """True for a missing cell: None, NaN, ``pd.NA`` and ``pd.NaT`` (not for empty strings).

    The one test of a missing value for every stage (inputs, media, documents, explode); it
    needs no pandas import (pandas' missing markers are known by their type names).
    """
    if value is None:
        return True
    if isinstance(value, float):  # also numpy's float64
        return math.isnan(value)
    return type(value).__name__ in ("NAType", "NaTType")


@dataclass(frozen=True)
class Gleaning:
    """A row's follow-up passes (``run_documents(passes=N)``, ``run.passes``): up to
    ``passes`` answers in one conversation, each later one asked for the list items the
    earlier ones missed; ``dedupe_on``: the key fields that decide "the same item" (None:
    every field)."""

    passes: int
    dedupe_on: tuple[str, ...] | None = None


@dataclass
class RowInput:
    """One row ready to send: its index label, position, and content or the reason it has none."""

    label: Hashable
    position: int
    content: Content | None = None
    error: Exception | None = None
    #: The input values of the row, kept for streaming outputs (``run_to``, generator input).
    record: Mapping[str, Any] | None = None
    #: Follow-up passes asking for missed list items (documents only), else None.
    gleaning: Gleaning | None = None


@dataclass
class PassResult:
    """One pass of a row with follow-up passes: its answer, what it cost, what it added.

    ``added``: its list items that agree with no item of the earlier passes (None for the first
    pass); ``spans``: with ``grounding="quotes"``, its leaves checked through its quotes."""

    value: BaseModel
    usage: Usage
    added: int | None = None
    from_store: bool = False
    spans: list[Span] | None = None


@dataclass
class RowResult:
    """The outcome of one row: the value or the error, and what it cost."""

    label: Hashable
    position: int
    value: BaseModel | None = None
    usage: Usage = NO_USAGE
    attempts: int = 0
    latency_s: float = 0.0
    error: str | None = None
    exception: BaseException | None = field(default=None, repr=False)
    web_searches: int = 0
    #: Served from the result store without a request; ``saved`` is its original usage.
    from_store: bool = False
    saved: Usage | None = None
    #: The row's input values, kept only for streaming outputs.
    record: Mapping[str, Any] | None = field(default=None, repr=False)
    #: ``grounding=``: one ``Span`` per leaf of ``value`` (None when grounding is off or the row
    #: has no value).
    spans: list[Span] | None = field(default=None, repr=False)
    #: Rows with follow-up passes (``RowInput.gleaning``): each pass run, in order (``value`` is
    #: the first pass's answer); None otherwise.
    passes: list[PassResult] | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """True when the row holds a validated value."""
        return self.value is not None and self.error is None
