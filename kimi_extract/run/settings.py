"""What every request of a run shares (``RowSettings``), made from the config in one place.

``RowSettings.from_config(config, compiled, static_messages, ...)`` is the one mapping from the
settings (``kimi_extract.config``) to the request every row sends: the model and its rules, the
shared prefix and its token count, the response format, the reasoning effort, the prompt-cache
options (``cache_ttl="auto"`` decided here for the run's length: ``auto_cache_ttl``), the tools,
and the endpoint that keys the result store. The row runner (``run.conversation``) reads only
this record, so its tests build one directly.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..kimi import (
    CACHE_MIN_TOKENS,
    CACHE_TTL_SECONDS,
    DEFAULT_CACHE_TTL,
    LONG_CACHE_TTL,
    WEB_SEARCH_FUNCTION,
    WEB_SEARCH_TOOL,
)
from ..records import Pricing
from ..schema.compiled import CompiledSchema
from .request import RequestKeys, estimate_prompt_tokens, response_format_for
from .store import store_key

if TYPE_CHECKING:
    from ..config import ExtractorConfig

__all__ = ["ASSUMED_REQUEST_S", "RowSettings", "auto_cache_ttl", "offered_tools"]

#: A typical low-effort extraction request, for run-length estimates (cache TTL choice).
ASSUMED_REQUEST_S = 10.0


@dataclass(frozen=True)
class RowSettings:
    """Everything about a request that is the same for every row of a run."""

    model: str
    compiled: CompiledSchema
    static_messages: tuple[dict[str, Any], ...]
    response_format: dict[str, Any]
    reasoning_effort: str | None
    max_completion_tokens: int
    validation_retries: int
    context_window: int
    prompt_cache_options: dict[str, Any] | None = None
    pricing: Pricing | None = None
    separate_cache_writes: bool = True
    cache_ttl: str = DEFAULT_CACHE_TTL
    #: Tokens of the static prefix and schema, counted once (used for the context check).
    prefix_tokens: int = 0
    stream: bool = False
    #: ``[{"type": "web_search"}]`` when web search is on.
    tools: tuple[dict[str, Any], ...] = ()
    #: Tool-call rounds allowed per row before giving up.
    max_tool_rounds: int = 3
    mode: str = "json_schema"
    #: The endpoint's identity (``store.endpoint_identity``): part of every store key.
    endpoint: str = ""
    #: ``grounding=``: align each valid answer's leaves to the row's text (``run.grounding``).
    grounding: bool | str = False
    #: ``grounding_fields``: field paths grounded (True) or inferred (False).
    grounding_fields: Mapping[str, bool] | None = None

    @classmethod
    def from_config(
        cls,
        config: ExtractorConfig,
        compiled: CompiledSchema,
        static_messages: Sequence[dict[str, Any]],
        *,
        endpoint: str,
        total_rows: int | None,
        ground_rows: bool = True,
    ) -> RowSettings:
        """The settings of a run of ``total_rows`` rows (None: unknown) under ``config``.

        ``compiled`` / ``static_messages``: the output schema and the shared prefix (system
        message and examples), made once per extractor. ``endpoint``: whose answers the store
        keeps. ``ground_rows=False``: no spans per row (documents ground merged rows instead).
        """
        info = config.model_info
        prefix_text = ""
        if config.mode == "json_schema":
            prefix_text = json.dumps(compiled.schema, separators=(",", ":"))
        static = tuple(static_messages)
        prefix_tokens = estimate_prompt_tokens(static, prefix_text)
        ttl = config.prompt_cache.cache_ttl
        if ttl == "auto":
            ttl = auto_cache_ttl(
                total_rows=total_rows,
                prefix_tokens=prefix_tokens,
                concurrency=config.limits.concurrency,
                rpm=config.limits.rpm,
                pricing=config.resolved_pricing,
                accepts_ttl=info.cache_options,
            )
        grounding = config.grounding_options
        return cls(
            model=config.model,
            compiled=compiled,
            static_messages=static,
            response_format=response_format_for(compiled, config.mode),
            reasoning_effort=config.effort,
            max_completion_tokens=config.max_completion_tokens,
            validation_retries=config.validation_retries,
            context_window=info.context_window,
            prompt_cache_options={"mode": "implicit", "ttl": ttl} if ttl else None,
            pricing=config.resolved_pricing,
            separate_cache_writes=info.separate_cache_writes,
            cache_ttl=ttl or DEFAULT_CACHE_TTL,
            prefix_tokens=prefix_tokens,
            stream=config.stream,
            tools=(dict(WEB_SEARCH_TOOL),) if config.web_search else (),
            max_tool_rounds=config.max_tool_rounds,
            mode=config.mode,
            endpoint=endpoint,
            grounding=grounding.grounding if ground_rows else False,
            grounding_fields=grounding.grounding_fields,
        )

    @functools.cached_property
    def offered_tools(self) -> frozenset[str]:
        """The function names ``tools`` offers (an answer calling another is refused)."""
        return offered_tools(self.tools)

    @functools.cached_property
    def _keys(self) -> RequestKeys:
        return RequestKeys(
            model=self.model,
            static_messages=self.static_messages,
            response_format=self.response_format,
            reasoning_effort=self.reasoning_effort,
            tools=self.tools,
            mode=self.mode,
        )

    def store_key(self, user: dict[str, Any]) -> str:
        """The result-store key of this row's request at this endpoint (``store.store_key``)."""
        return store_key(self.endpoint, self._keys.key(user))


def offered_tools(tools: tuple[dict[str, Any], ...]) -> frozenset[str]:
    """The function names a request offers: ``$web_search`` for ``{"type": "web_search"}``, the
    name of each function tool."""
    names = set()
    for tool in tools:
        if tool.get("type") == "web_search":
            names.add(WEB_SEARCH_FUNCTION)
        elif isinstance(tool.get("function"), dict) and tool["function"].get("name"):
            names.add(str(tool["function"]["name"]))
    return frozenset(names)


def auto_cache_ttl(
    *,
    total_rows: int | None,
    prefix_tokens: int,
    concurrency: int,
    rpm: int | None,
    pricing: Pricing | None,
    accepts_ttl: bool,
) -> str | None:
    """``cache_ttl="auto"``: ``"1h"`` when one 1-hour write is expected to cost less than the
    5-minute rewrites a run of this length needs (assuming ``ASSUMED_REQUEST_S`` per request);
    None (the server's 5m default) otherwise, or when the prefix is too short to be cached."""
    if not accepts_ttl or prefix_tokens <= CACHE_MIN_TOKENS or not total_rows:
        return None
    per_second = concurrency / ASSUMED_REQUEST_S
    if rpm:
        per_second = min(per_second, rpm / 60)
    expected_s = total_rows / per_second
    write_5m = pricing.cache_write if pricing else 1.0
    write_1h = (pricing.cache_write_1h or 2 * write_5m) if pricing else 2.0
    long_s, short_s = CACHE_TTL_SECONDS[LONG_CACHE_TTL], CACHE_TTL_SECONDS[DEFAULT_CACHE_TTL]
    if math.ceil(expected_s / long_s) * write_1h < math.ceil(expected_s / short_s) * write_5m:
        return LONG_CACHE_TTL
    return None
