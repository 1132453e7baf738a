"""The Kimi profile: the model table and every Kimi-specific rule, in one place.

Every rule below cites the document that states it, by its path in the repository and the part
of it (docs/reference/README.md describes them):
``docs/reference/kimi-chat-completions-reference.md`` is the Kimi Chat Completions reference (cited
by its OpenAPI fields, such as ``max_completion_tokens``); ``docs/reference/KIMI-NOTES.md`` holds
other clients' findings against the live API (cited by heading); "walle" is Moonshot's own schema
validator (https://github.com/MoonshotAI/walle, ``docs/walle.md`` and ``conf.go``). The logic that
applies a rule stays with its stage (schema, media, http, run) and imports the rule from here; this
module imports only ``exceptions`` and ``records`` (layer 0, tests/package/test_layers.py).

Sections: models and limits; hosts; prompt cache; tools and web search; errors and rate limits;
media; the schema dialect (walle).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Literal

from .exceptions import ConfigurationError, did_you_mean
from .records import Pricing

#: docs/reference/kimi-chat-completions-reference.md, ``info.description``: all three models have a
#: 1,048,576-token context window.
CONTEXT_WINDOW = 1_048_576
#: docs/reference/kimi-chat-completions-reference.md, ``max_completion_tokens.maximum``.
MAX_COMPLETION_TOKENS = 1_048_576
#: Our default output budget for extraction. Reasoning tokens count toward it
#: (docs/reference/kimi-chat-completions-reference.md, ``max_completion_tokens``). 16,384 leaves
#: room for low-effort reasoning plus a large JSON answer; a truncated answer is retried once with
#: double the budget.
DEFAULT_MAX_COMPLETION_TOKENS = 16_384

#: docs/reference/kimi-chat-completions-reference.md, ``max_completion_tokens``: "Default: 131072"
#: (what the server uses when it is omitted).
SERVER_DEFAULT_MAX_COMPLETION_TOKENS = 131_072

# -- Hosts -------------------------------------------------------------------------------------
#: docs/reference/kimi-chat-completions-reference.md, ``servers`` and the BaseURL note:
#: direct.evolink.ai is the default (text, long-lived connections); api.evolink.ai is the primary
#: multimodal endpoint and a fallback for text.
DEFAULT_BASE_URL = "https://direct.evolink.ai"
MULTIMODAL_BASE_URL = "https://api.evolink.ai"
#: Not a Kimi host: ``base_url="simulator"`` sends every request to the bundled Kimi simulator,
#: started once per process (``kimi_extract.shared_simulator``); a local endpoint (no default
#: result store, ``run.store.is_local_endpoint``).
SIMULATOR_BASE_URL = "simulator"
#: docs/reference/kimi-chat-completions-reference.md, message content parts: the media part types (a
#: request carrying one goes to the multimodal host: the same page's BaseURL note).
MEDIA_PART_TYPES = frozenset({"image_url", "video_url"})

#: docs/reference/kimi-chat-completions-reference.md, ``response_format.type``: the
#: structured-output modes a run may ask for (``text`` is never asked: every answer is parsed as
#: JSON).
Mode = Literal["json_schema", "json_object"]

# -- Prompt cache --------------------------------------------------------------------------------
#: docs/reference/kimi-chat-completions-reference.md, ``prompt_cache_options.ttl``: "Cache TTL: 5m
#: or 1h; default: 5m" (K3.1 series only).
CACHE_TTLS = ("5m", "1h")
DEFAULT_CACHE_TTL = "5m"
LONG_CACHE_TTL = "1h"
#: The same TTLs in seconds.
CACHE_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
#: docs/reference/KIMI-NOTES.md, "Caching": a request can hit the cache only if the cached prefix is
#: longer than 256 tokens.
CACHE_MIN_TOKENS = 256

# -- Tools and web search ------------------------------------------------------------------------
#: docs/reference/KIMI-NOTES.md, "Web search", and
#: docs/reference/kimi-chat-completions-reference.md, ``ToolCall.type``: the built-in search tool's
#: function name; its calls have type ``builtin_function``.
WEB_SEARCH_FUNCTION = "$web_search"
BUILTIN_FUNCTION = "builtin_function"
#: docs/reference/kimi-chat-completions-reference.md, ``tools``: how a request offers web search
#: (``{"type":"web_search"}``).
WEB_SEARCH_TOOL = {"type": "web_search"}
#: docs/reference/KIMI-NOTES.md, "Structured output": tool names must match this. (At most 128
#: tools: docs/reference/kimi-chat-completions-reference.md, ``tools.maxItems``, which the simulator
#: checks with that page's OpenAPI schema, docs/reference/kimi-openapi.yaml.)
TOOL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9-_]{2,63}$")

# -- Errors and rate limits ----------------------------------------------------------------------
#: docs/reference/KIMI-NOTES.md, "Errors and limits", and
#: docs/reference/kimi-chat-completions-reference.md, ``ErrorResponse``: the HTTP status each error
#: ``type`` stands for (an error object can also arrive in a 200 body or a stream event).
STATUS_OF_ERROR_TYPE = {
    "invalid_request_error": 400,
    "content_filter": 400,
    "invalid_authentication_error": 401,
    "incorrect_api_key_error": 401,
    "authentication_error": 401,
    "permission_denied_error": 403,
    "resource_not_found_error": 404,
    "not_found_error": 404,
    "rate_limit_reached_error": 429,
    "engine_overloaded_error": 429,
    "exceeded_current_quota_error": 429,
    "server_error": 500,
}
#: docs/reference/KIMI-NOTES.md, "Errors and limits": the one 429 that is not retried (the balance
#: is exhausted).
QUOTA_ERROR_TYPE = "exceeded_current_quota_error"
#: docs/reference/KIMI-NOTES.md, "Errors and limits": real 429s carry no Retry-After header; the
#: message says how long ("... please try again after 1 seconds").
RETRY_AFTER_MESSAGE = re.compile(r"try again after (\d+(?:\.\d+)?) ?(milliseconds|ms|seconds|s)\b")
#: docs/reference/KIMI-NOTES.md, "Errors and limits": the limit a 429 names ("request reached max
#: organization concurrency: 1", "organization max RPM: 3"; TPM alike).
LIMIT_MESSAGES = {
    "concurrency": re.compile(r"max(?:imum)?\s+(?:organization\s+)?concurrency:?\s*(\d+)", re.I),
    "rpm": re.compile(r"max(?:imum)?\s+(?:organization\s+)?RPM:?\s*(\d+)", re.I),
    "tpm": re.compile(r"max(?:imum)?\s+(?:organization\s+)?TPM:?\s*(\d+)", re.I),
}
#: docs/reference/KIMI-NOTES.md, "Errors and limits": RPM and TPM are per minute.
RATE_WINDOW_S = 60.0
#: docs/reference/KIMI-NOTES.md, "Errors and limits" (tiers): concurrency goes up to 1,000.
MAX_CONCURRENCY = 1000

# -- Media ---------------------------------------------------------------------------------------
#: docs/reference/KIMI-NOTES.md, "Media": video mp4, mpeg, mov, avi, x-flv, mpg, webm, wmv, 3gpp
#: (the API's MIME names), by file extension.
VIDEO_EXTENSIONS = {
    ".mp4": "video/mp4",
    ".m4v": "video/mp4",
    ".mpeg": "video/mpeg",
    ".mpg": "video/mpg",
    ".mov": "video/mov",
    ".avi": "video/avi",
    ".flv": "video/x-flv",
    ".webm": "video/webm",
    ".wmv": "video/wmv",
    ".3gp": "video/3gpp",
}

# -- The schema dialect (walle) ------------------------------------------------------------------
#: walle ``conf.go``: the validation levels; "strict" is "the most permissive level required by
#: Moonshot AI server", "ultra" the most thorough (and walle's default).
Level = Literal["strict", "ultra"]
LEVELS: tuple[Level, ...] = ("strict", "ultra")
SERVER_LEVEL: Level = "strict"
#: walle.md "Object": property names that are schema keywords.
RESERVED_PROPERTY_NAMES = frozenset({"$defs", "$ref", "anyOf", "required", "additionalProperties"})
#: walle (``utils.go`` ResolveSubschema): a schema path part holding both ``{`` and ``}`` reads as
#: ``anyOf{index}``, so under a property or ``$defs`` name such as ``a{b}`` the lookup walle makes
#: before checking an enum, ``required``, ``$ref`` or ``anyOf`` fails ("invalid path").
BRACED_NAME = re.compile(r"\{.*\}|\}.*\{", re.DOTALL)


@dataclass(frozen=True)
class SchemaLimits:
    """walle's size limits (``conf.go`` defaults; walle.md quotes older, smaller numbers).

    ``max_depth`` counts nested ``properties`` levels (a ``$ref`` adds its target's depth);
    ``max_size`` is the schema's compact JSON length in bytes; ``max_properties`` is the number of
    property names across all objects; the enum string length applies only to an enum of more
    than ``enum_string_check_threshold`` values.
    """

    max_enum_items: int = 1000
    max_enum_string_length: int = 75000
    enum_string_check_threshold: int = 2500
    max_any_of_items: int = 500
    max_depth: int = 30
    max_size: int = 120000
    max_properties: int = 3000


#: walle's defaults: what the server enforces.
DEFAULT_LIMITS = SchemaLimits()

#: docs/reference/kimi-chat-completions-reference.md, ``reasoning_effort``: "For generic client
#: compatibility, `medium` maps to `high`, `xhigh` to `max`, and `minimal` / `none` to `low`;
#: `none` does not disable reasoning."
EFFORT_ALIASES = {
    "low": "low",
    "high": "high",
    "max": "max",
    "medium": "high",
    "xhigh": "max",
    "minimal": "low",
    "none": "low",
}


@dataclass(frozen=True)
class ModelInfo:
    """What the client must know about one model."""

    name: str
    #: Reasoning efforts the model accepts after alias normalization.
    efforts: tuple[str, ...]
    #: Whether ``prompt_cache_options`` may be sent (K3.1 series only;
    #: docs/reference/kimi-chat-completions-reference.md, ``prompt_cache_options``).
    cache_options: bool
    #: Whether usage reports cache writes separately and bills them at their own rate.
    #: docs/reference/kimi-chat-completions-reference.md, ``ChatUsage.prompt_tokens``: K3.1 regular
    #: input = prompt - cached - cache_write; kimi-k3 regular input = prompt - cached (writes
    #: billed as regular input).
    separate_cache_writes: bool
    context_window: int = CONTEXT_WINDOW
    #: USD per million tokens; None where we cannot cite a price (the reference lists none).
    pricing: Pricing | None = None


# Prices (USD per 1M tokens). docs/reference/kimi-chat-completions-reference.md lists none; these
# are the published rates, cited:
# - K3.1 series: docs.apiyi.com/api-capabilities/kimi-k3-1/overview ("rates aligned with the
#   official site", read 2026-10) and novita.ai/models/llm/moonshotai-kimi-k3.1-pro (same figures):
#   pro input 2.00, output 10.00, cache read 0.20, cache write 5m 2.00 / 1h 4.00;
#   highspeed input 4.00, output 20.00, cache read 0.20, cache write 5m 4.00 / 1h 8.00.
# - kimi-k3: platform.kimi.ai/docs/pricing/chat-k3 as quoted in getagentseal/codeburn PR 709:
#   input 3.00, output 15.00, cache read 0.30 (writes are billed as regular input).
# Prices change; pass ``Extractor(pricing=kx.Pricing(...))`` to override.
_K31_PRO_PRICE = Pricing(
    input=2.00, cached_input=0.20, cache_write=2.00, output=10.00, cache_write_1h=4.00
)
_K31_HIGHSPEED_PRICE = Pricing(
    input=4.00, cached_input=0.20, cache_write=4.00, output=20.00, cache_write_1h=8.00
)
_K3_PRICE = Pricing(input=3.00, cached_input=0.30, cache_write=3.00, output=15.00)

MODELS: dict[str, ModelInfo] = {
    # docs/reference/kimi-chat-completions-reference.md, ``model``: "`kimi-k3.1-pro` |
    # Latest-generation model (recommended) | low/high/max".
    "kimi-k3.1-pro": ModelInfo(
        "kimi-k3.1-pro", ("low", "high", "max"), True, True, pricing=_K31_PRO_PRICE
    ),
    # The same page, ``model``: "Same parameters as Pro, faster generation".
    "kimi-k3.1-pro-highspeed": ModelInfo(
        "kimi-k3.1-pro-highspeed",
        ("low", "high", "max"),
        True,
        True,
        pricing=_K31_HIGHSPEED_PRICE,
    ),
    # The same page, ``model``: "`kimi-k3` | Previous-generation model | Only `max`"; no
    # prompt_cache_options.
    "kimi-k3": ModelInfo("kimi-k3", ("max",), False, False, pricing=_K3_PRICE),
}

DEFAULT_MODEL = "kimi-k3.1-pro"

_warned: set[tuple[str, str]] = set()


def _warn_once(key: tuple[str, str], message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    warnings.warn(message, UserWarning, stacklevel=4)


def model_info(name: str) -> ModelInfo:
    """Rules for ``name``; unknown names get K3.1-like rules and a one-time warning.

    Unknown names are passed through unchanged so new models work before this table knows them.
    """
    info = MODELS.get(name)
    if info is not None:
        return info
    _warn_once(
        ("model", name),
        f"kimi_extract does not know the model {name!r}{did_you_mean(name, MODELS)}; sending it "
        f"unchanged with K3.1 rules (known: {', '.join(MODELS)})",
    )
    return ModelInfo(name, ("low", "high", "max"), True, True)


def normalize_effort(info: ModelInfo, effort: str | None) -> str | None:
    """The reasoning_effort to send for ``info``, or None to omit it.

    Aliases are normalized (medium->high, xhigh->max, minimal/none->low). kimi-k3 takes only max:
    any other value warns once and sends max.
    """
    if effort is None:
        return None
    normalized = EFFORT_ALIASES.get(effort)
    if normalized is None:
        raise ConfigurationError(
            f"reasoning_effort={effort!r} is not valid{did_you_mean(effort, EFFORT_ALIASES)}; "
            f"use one of {sorted(EFFORT_ALIASES)}"
        )
    if normalized not in info.efforts:
        _warn_once(
            ("effort", info.name),
            f"{info.name} supports only reasoning_effort={'/'.join(info.efforts)}; "
            f"sending {info.efforts[-1]!r} instead of {effort!r}",
        )
        return info.efforts[-1]
    return normalized


def resolve_pricing(
    pricing: Pricing | dict[str, Pricing] | None, model: str, default: Pricing | None
) -> Pricing | None:
    """The price to bill ``model`` at: ``pricing`` (one, or a dict by model name) or the default."""
    if isinstance(pricing, Pricing):
        return pricing
    if isinstance(pricing, dict):
        # Every entry is checked, not only this model's: a derived run on another model (or a
        # typo in a key's value) must not fail after a billed request.
        for name, price in pricing.items():
            if not isinstance(name, str) or not isinstance(price, Pricing):
                raise ConfigurationError(
                    f"pricing[{name!r}] must be a kx.Pricing(input, cached_input, cache_write, "
                    f"output) keyed by a model name, got {type(price).__name__} {price!r}"
                )
        return pricing.get(model, default)
    if pricing is not None:
        raise ConfigurationError(
            "pricing must be a kx.Pricing or a dict of model -> kx.Pricing, got "
            f"{type(pricing).__name__}"
        )
    return default
