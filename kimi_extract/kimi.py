"""The Kimi model table: per-model rules, limits and prices, in one place.

Every quirk below cites the document that states it. "seed" is the Kimi Chat Completions reference
shipped with the project (``seeds/kimi-chat-completions-reference.md``, OpenAPI ``components``);
"notes" is ``KIMI-NOTES.md`` (other clients' findings against the live API).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from .exceptions import ConfigurationError
from .records import Pricing

#: seed, ``info.description``: all three models have a 1,048,576-token context window.
CONTEXT_WINDOW = 1_048_576
#: seed, ``max_completion_tokens.maximum``.
MAX_COMPLETION_TOKENS = 1_048_576
#: Our default output budget for extraction. Reasoning tokens count toward it (seed,
#: ``max_completion_tokens``). 16,384 leaves room for low-effort reasoning plus a large JSON answer;
#: a truncated answer is retried once with double the budget.
DEFAULT_MAX_COMPLETION_TOKENS = 16_384

#: seed ``servers``: direct.evolink.ai is the default (text, long-lived connections);
#: api.evolink.ai is the primary multimodal endpoint and a fallback for text.
DEFAULT_BASE_URL = "https://direct.evolink.ai"
MULTIMODAL_BASE_URL = "https://api.evolink.ai"

#: seed, ``reasoning_effort``: "For generic client compatibility, `medium` maps to `high`,
#: `xhigh` to `max`, and `minimal` / `none` to `low`; `none` does not disable reasoning."
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
    #: Whether ``prompt_cache_options`` may be sent (K3.1 series only; seed).
    cache_options: bool
    #: Whether usage reports cache writes separately and bills them at their own rate. seed,
    #: ``ChatUsage.prompt_tokens``: K3.1 regular input = prompt - cached - cache_write; kimi-k3
    #: regular input = prompt - cached (writes billed as regular input).
    separate_cache_writes: bool
    context_window: int = CONTEXT_WINDOW
    #: USD per million tokens; None where we cannot cite a price (the seed lists none).
    pricing: Pricing | None = None


# Prices (USD per 1M tokens). The seed lists none; these are the published rates, cited:
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
    # seed, ``model``: "`kimi-k3.1-pro` | Latest-generation model (recommended) | low/high/max".
    "kimi-k3.1-pro": ModelInfo(
        "kimi-k3.1-pro", ("low", "high", "max"), True, True, pricing=_K31_PRO_PRICE
    ),
    # seed: "Same parameters as Pro, faster generation".
    "kimi-k3.1-pro-highspeed": ModelInfo(
        "kimi-k3.1-pro-highspeed",
        ("low", "high", "max"),
        True,
        True,
        pricing=_K31_HIGHSPEED_PRICE,
    ),
    # seed: "`kimi-k3` | Previous-generation model | Only `max`"; no prompt_cache_options.
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
        f"kimi_extract does not know the model {name!r}; sending it unchanged with K3.1 rules "
        f"(known: {', '.join(MODELS)})",
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
            f"reasoning_effort={effort!r} is not valid; use one of {sorted(EFFORT_ALIASES)}"
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
        return pricing.get(model, default)
    if pricing is not None:
        raise ConfigurationError("pricing must be a kx.Pricing or a dict of model -> kx.Pricing")
    return default
