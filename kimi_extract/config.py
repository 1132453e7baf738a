"""Every ``Extractor`` setting in one frozen, validated object: ``ExtractorConfig``.

``Extractor(Review, concurrency=32)`` builds one; ``Extractor(Review, config=cfg)`` takes a ready
one (``Extractor(Review, config=cfg, rpm=600)`` is ``dataclasses.replace(cfg, rpm=600)``). A
config is checked once, when it is made: a wrong type or range raises a ``ConfigurationError``
naming the setting, before any request. ``dataclasses.replace(cfg, ...)`` checks again, so a
derived run (a Dask partition) gets a valid config, never a mutated copy.

The settings, with their defaults:

- ``instructions``: the system prompt (static, so it forms a cacheable prefix).
  ``examples``: optional few-shot ``(input, output)`` pairs (checked against the output model by
  the ``Extractor``).
- ``model``: default ``kimi-k3.1-pro``. ``reasoning_effort``: default ``"low"`` (the API's own
  default is max; aliases are normalized, see ``effort``).
- ``api_key``: default env ``KIMI_API_KEY`` then ``EVOLINK_API_KEY``; held as a
  ``transport.Secret`` (never shown in a repr). ``base_url``: default env ``KIMI_BASE_URL``, else
  routed per request: image/video requests to ``https://api.evolink.ai``, text to
  ``https://direct.evolink.ai``, failing over between them (``kimi_extract.http.routing``). It
  must be an ``http(s)://`` URL with a host and no user info, query or fragment
  (``check_base_url``; an error never echoes what came before an ``@``), or ``"simulator"``
  (given in code only, never read from the environment): the bundled simulator, started once
  per process (``kimi_extract.shared_simulator``), with no key (none is read; passing one is an
  error) and no default store.
- ``concurrency``: rows in flight at once (default 16, at most ``MAX_CONCURRENCY`` = 1,000).
  ``validation_retries``: reasks after an invalid answer (default 2). ``max_completion_tokens``:
  output budget incl. reasoning (default 16,384; a truncated answer is retried once with double).
- ``pricing``: a ``kx.Pricing`` or a dict of them by model name (default: the package's table);
  every entry is checked (``Pricing`` checks its own rates: finite, >= 0).
- ``cache_ttl``: Kimi's prompt cache: ``"5m"`` or ``"1h"`` write TTL (K3.1 only); ``"auto"``
  (default) picks 1h when the run is expected to outlast the point where one 1-hour write is
  cheaper than repeated 5-minute writes, else sends nothing (the server's 5 m default); None never
  sends it. ``cache_warm``: when the shared prefix is long enough to be cached (> 256 tokens),
  send one request first and fan out after it completes, so the prefix is written once.
- ``store``: the result store (a path; a ``postgresql://user@host/db`` URL, one store for many
  machines, held as a ``StoreURL`` that never shows its password; None/True: the default
  location; False: none); runs against a server on this machine (the simulator,
  ``localhost``, ``0.0.0.0``, its host name or addresses: ``run.store.is_local_endpoint``) get
  no default store.
- ``max_cost`` / ``max_tokens``: hard budgets, checked before every attempt against its worst case
  (``kimi_extract.http.limits.Budget``); each must pay for one request's worst case.
- ``rpm`` / ``tpm``: client-side request and token limits per minute (no 60-second window exceeds
  them). ``adaptive``: slow start and a CUBIC send rate that backs off on 429s and adopts the
  limits Kimi's 429 messages name.
- ``mode``: ``"json_schema"`` (strict structured output) or ``"json_object"``.
- ``max_retries``, ``max_retry_wait``: the transport retry policy. ``timeout``: deadline in
  seconds for each HTTP attempt, from connect to last byte (streams: also the longest silence
  between two events, at most 120 s). ``max_response_bytes``: cap on one response body after
  decompression (default 32 MiB); a larger one fails that row with ``ResponseTooLargeError``.
  ``http_backend``: ``"aiohttp"`` (default) or ``"httpx"``.
- ``progress``: show a tqdm bar. ``prefix``: prepended to output column names. ``stream``: request
  SSE streams (results are identical). ``web_search``: offer Kimi's built-in ``$web_search`` tool
  and run the tool loop (at most ``max_tool_rounds`` rounds per row; adds ``kx_web_searches``).
- Media (``kimi_extract.media.parts.MediaOptions``): ``max_image_pixels``: larger images are
  downscaled to this many pixels (default 1,048,576 = 1024 x 1024; None: never). ``fetch_urls``:
  download http(s) image/video URLs and send them inline. ``fetch_timeout``: seconds for each
  whole download (default 30). ``max_fetch_bytes``: largest image download, after decompression
  (default 20 MiB). ``allow_private_urls``: let ``fetch_urls`` reach loopback, private and
  link-local addresses (refused by default). ``max_decode_pixels``: refuse to decode an image
  larger than this many pixels (default 50,000,000; None: no cap but Pillow's).
- ``grounding``: after validation, align every leaf of each answer to the text that was sent
  (``kimi_extract.ground``; no extra tokens) and add ``kx_spans`` / ``kx_grounded`` (default
  False). ``"quotes"`` also asks the model for a supporting quote per field (``schema.quotes``)
  and marks a value unsupported when its quote is not in the text (``run.grounding``).
  ``grounding_fields``: a dict of field paths (list indexes left out: ``"sentiment"``,
  ``"lines.kind"``) to True (ground the field's values) or False (an inferred field: kind
  "inferred", outside ``kx_grounded``, never unsupported); default None: enums, ``Literal``
  fields, booleans and fields marked ``Field(json_schema_extra={"kx_ground": False})`` are
  inferred, every other field is grounded.

A misspelt keyword is Python's ``TypeError``, naming the closest setting (``check_option_names``).

Derived once from the settings (not arguments; recomputed by ``replace``): ``model_info``,
``effort`` (the reasoning effort sent), ``resolved_pricing``, ``store_path``, ``media`` and
``retry``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal
from urllib.parse import urlsplit

from .exceptions import ConfigurationError, did_you_mean
from .http.backends import BACKENDS, DEFAULT_MAX_RESPONSE_BYTES
from .http.transport import RetryPolicy, Secret
from .kimi import (
    CACHE_TTLS,
    DEFAULT_MAX_COMPLETION_TOKENS,
    DEFAULT_MODEL,
    EFFORT_ALIASES,
    MAX_COMPLETION_TOKENS,
    MAX_CONCURRENCY,
    SIMULATOR_BASE_URL,
    ModelInfo,
    model_info,
    normalize_effort,
    resolve_pricing,
)
from .media.parts import (
    DEFAULT_FETCH_TIMEOUT,
    DEFAULT_MAX_DECODE_PIXELS,
    DEFAULT_MAX_FETCH_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    MediaOptions,
)
from .records import Pricing
from .run.request import Mode
from .run.store import Location, StoreURL, is_local_endpoint
from .run.store import resolve as resolve_store
from .run.store_base import is_store_url

__all__ = [
    "API_KEY_ENV_VARS",
    "BASE_URL_ENV_VAR",
    "MAX_CONCURRENCY",
    "ExtractorConfig",
    "check_base_url",
    "check_budget_fits",
    "check_option_names",
    "option_names",
]

API_KEY_ENV_VARS = ("KIMI_API_KEY", "EVOLINK_API_KEY")
BASE_URL_ENV_VAR = "KIMI_BASE_URL"

#: Starts the bundled simulator (once per process) and returns its ``(base_url, api_key)``, for
#: ``base_url="simulator"``. Installed by ``kimi_extract.shared_simulator``, which the package
#: imports: nothing below the package's shells imports the simulator (tests/test_layers.py).
simulator_starter: Callable[[], tuple[str, str]] | None = None


def simulator_endpoint() -> tuple[str, str]:
    """The bundled simulator's ``(base_url, api_key)``, starting it on first use."""
    if simulator_starter is None:  # only when kimi_extract.shared_simulator failed to import
        raise ConfigurationError("base_url='simulator': the bundled simulator is not available")
    return simulator_starter()


@dataclass(frozen=True)
class ExtractorConfig:
    """Every ``Extractor`` setting, validated once (see the module docstring for each one).

    Frozen: derive a variant with ``dataclasses.replace(config, rpm=600)``, which validates again.
    The API key is held as a ``Secret`` and never appears in the repr.
    """

    instructions: str | None = None
    examples: Sequence[tuple[Any, Any]] | None = None
    model: str = DEFAULT_MODEL
    reasoning_effort: str | None = "low"
    api_key: str | Secret | None = field(default=None, repr=False)
    base_url: str | None = None
    concurrency: int = 16
    validation_retries: int = 2
    max_completion_tokens: int = DEFAULT_MAX_COMPLETION_TOKENS
    pricing: Pricing | dict[str, Pricing] | None = None
    cache_ttl: str | None = "auto"
    cache_warm: bool = True
    store: str | os.PathLike[str] | StoreURL | bool | None = None
    max_cost: float | None = None
    max_tokens: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    adaptive: bool = True
    mode: Mode = "json_schema"
    max_retries: int = 8
    max_retry_wait: float = 60.0
    timeout: float = 600.0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    progress: bool = True
    prefix: str = ""
    stream: bool = False
    web_search: bool = False
    max_tool_rounds: int = 3
    http_backend: str = "aiohttp"
    max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS
    fetch_urls: bool = False
    fetch_timeout: float = DEFAULT_FETCH_TIMEOUT
    max_fetch_bytes: int = DEFAULT_MAX_FETCH_BYTES
    allow_private_urls: bool = False
    max_decode_pixels: int | None = DEFAULT_MAX_DECODE_PIXELS
    grounding: bool | Literal["quotes"] = False
    grounding_fields: Mapping[str, bool] | None = None

    # -- derived in __post_init__ (recomputed by replace) ----------------------------------------
    #: The model's rules (``kimi.model_info``).
    model_info: ModelInfo = field(init=False, repr=False, compare=False)
    #: The reasoning effort sent (aliases normalized for the model; None: omitted).
    effort: str | None = field(init=False, repr=False, compare=False)
    #: The price this model is billed at (``pricing`` resolved), or None when unknown.
    resolved_pricing: Pricing | None = field(init=False, repr=False, compare=False)
    #: The result store: a file (``Path``), a PostgreSQL database (``StoreURL``, shown without
    #: its password), or None for no store.
    store_path: Location | None = field(init=False, repr=False, compare=False)
    media: MediaOptions = field(init=False, repr=False, compare=False)
    retry: RetryPolicy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("base_url", "api_key", "instructions"):
            value = getattr(self, name)
            if name == "api_key" and isinstance(value, Secret):
                continue
            if value is not None and not isinstance(value, str):
                raise ConfigurationError(
                    f"{name} must be a string or None, got {type(value).__name__}"
                )
        if self.reasoning_effort is not None and not isinstance(self.reasoning_effort, str):
            raise ConfigurationError(
                f"reasoning_effort must be one of {sorted(EFFORT_ALIASES)} or None, got "
                f"{self.reasoning_effort!r}"
            )
        if self.base_url:
            check_base_url(self.base_url, "base_url")
        if not isinstance(self.prefix, str):
            raise ConfigurationError(f"prefix must be a string, got {type(self.prefix).__name__}")
        if not isinstance(self.model, str) or not self.model:
            raise ConfigurationError(f"model must be a model name, got {self.model!r}")
        if self.examples is not None and (
            isinstance(self.examples, str | bytes) or not isinstance(self.examples, Sequence)
        ):
            raise ConfigurationError(
                f"examples must be a list of (input, output) pairs, got {self.examples!r}"
            )
        for name in ("cache_warm", "adaptive", "progress", "stream", "web_search"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigurationError(
                    f"{name} must be True or False, got {getattr(self, name)!r}"
                )
        if not (isinstance(self.grounding, bool) or self.grounding == "quotes"):
            raise ConfigurationError(
                f"grounding must be True, False or 'quotes', got {self.grounding!r}"
            )
        if self.grounding_fields is not None and not (
            isinstance(self.grounding_fields, Mapping)
            and all(isinstance(k, str) and k for k in self.grounding_fields)
            and all(isinstance(v, bool) for v in self.grounding_fields.values())
        ):
            raise ConfigurationError(
                "grounding_fields must be a dict of field paths to True (ground) or False "
                f"(inferred), got {self.grounding_fields!r}"
            )
        _check_positive("concurrency", self.concurrency)
        if self.concurrency > MAX_CONCURRENCY:
            raise ConfigurationError(
                f"concurrency={self.concurrency:,} exceeds the maximum {MAX_CONCURRENCY:,} (the "
                "highest Kimi tier's concurrency); use a value up to your account's limit"
            )
        _check_seconds("timeout", self.timeout)
        _check_seconds("max_retry_wait", self.max_retry_wait, allow_zero=True)
        _check_positive("max_response_bytes", self.max_response_bytes)
        _check_positive("max_completion_tokens", self.max_completion_tokens)
        if self.max_completion_tokens > MAX_COMPLETION_TOKENS:
            raise ConfigurationError(
                f"max_completion_tokens={self.max_completion_tokens} exceeds the API maximum "
                f"{MAX_COMPLETION_TOKENS:,}"
            )
        for name in ("validation_retries", "max_retries", "max_tool_rounds"):
            count = getattr(self, name)
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise ConfigurationError(f"{name} must be an integer >= 0, got {count!r}")
        if self.mode not in ("json_schema", "json_object"):
            raise ConfigurationError(
                f"mode must be 'json_schema' or 'json_object', got {self.mode!r}"
            )
        if self.cache_ttl not in (None, "auto", *CACHE_TTLS):
            raise ConfigurationError(
                f"cache_ttl must be 'auto', '5m', '1h' or None, got {self.cache_ttl!r}"
            )
        if self.http_backend not in BACKENDS:
            raise ConfigurationError(
                f"http_backend must be one of {BACKENDS}, got {self.http_backend!r}"
            )
        for name in ("rpm", "tpm", "max_tokens"):
            if getattr(self, name) is not None:
                _check_positive(name, getattr(self, name))
        max_cost = self.max_cost
        if max_cost is not None and not (
            isinstance(max_cost, int | float)
            and not isinstance(max_cost, bool)
            and math.isfinite(max_cost)
            and max_cost > 0
        ):
            raise ConfigurationError(f"max_cost must be a positive number of USD, got {max_cost!r}")
        if not (self.store is None or isinstance(self.store, bool | str | os.PathLike | StoreURL)):
            raise ConfigurationError(
                "store must be a path, a postgresql:// URL, True/None (default location) or "
                f"False, got {self.store!r}"
            )
        if is_store_url(self.store) and not isinstance(self.store, StoreURL):
            # Held as a StoreURL from here on: the config's repr never shows the password.
            object.__setattr__(self, "store", StoreURL(str(self.store)))

        info = model_info(self.model)
        if self.cache_ttl in CACHE_TTLS and not info.cache_options:
            raise ConfigurationError(
                f"{self.model} does not accept prompt_cache_options (K3.1 series only); drop "
                "cache_ttl"
            )
        try:
            effort = normalize_effort(info, self.reasoning_effort)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        pricing = resolve_pricing(self.pricing, self.model, info.pricing)
        if max_cost is not None and pricing is None:
            raise ConfigurationError(
                f"max_cost needs prices for {self.model}: pass pricing=kx.Pricing(...) "
                "(or use max_tokens)"
            )
        check_budget_fits(self.max_tokens, max_cost, self.max_completion_tokens, pricing)
        media = MediaOptions(
            max_image_pixels=self.max_image_pixels,
            fetch_urls=self.fetch_urls,
            fetch_timeout=self.fetch_timeout,
            max_fetch_bytes=self.max_fetch_bytes,
            allow_private_urls=self.allow_private_urls,
            max_decode_pixels=self.max_decode_pixels,
        )

        # The environment fills what was not given, once: a replaced config keeps what it read.
        base_url = self.base_url or None
        if base_url is None:
            base_url = os.environ.get(BASE_URL_ENV_VAR) or None
            if base_url == SIMULATOR_BASE_URL:
                raise ConfigurationError(
                    f"{BASE_URL_ENV_VAR}={SIMULATOR_BASE_URL!r} is not read from the environment: "
                    "choose the simulator in code (base_url='simulator') or with the CLI's "
                    "--simulate, so a leftover variable never sends a real run to it"
                )
            if base_url is not None:
                check_base_url(base_url, BASE_URL_ENV_VAR)
        key: str | Secret | None
        if base_url == SIMULATOR_BASE_URL:
            # The bundled simulator has its own key; a real key is neither needed nor read.
            if self.api_key is not None:
                raise ConfigurationError(
                    "api_key: base_url='simulator' uses the bundled simulator's own key; drop "
                    "api_key= (or pass the real endpoint's base_url)"
                )
            key = None
        else:
            key = self.api_key or next(
                (os.environ[v] for v in API_KEY_ENV_VARS if os.environ.get(v)), None
            )
        secret = Secret(key) if isinstance(key, str) else key
        store_path = resolve_store(self.store)
        if (self.store is None or self.store is True) and is_local_endpoint(base_url):
            # The simulator (or another server on this machine) never writes into the default
            # store that real runs read: pass store=path to keep its results.
            store_path = None

        derived = {
            "base_url": base_url,
            "api_key": secret,
            "model_info": info,
            "effort": effort,
            "resolved_pricing": pricing,
            "store_path": store_path,
            "media": media,
            "retry": RetryPolicy(max_retries=self.max_retries, max_wait=self.max_retry_wait),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    def __new__(cls, *args: Any, **options: Any) -> ExtractorConfig:
        # Before the generated __init__, so a misspelt setting gets a suggestion, not only
        # Python's "unexpected keyword argument" (replace() passes through here too).
        check_option_names(options, option_names(), "ExtractorConfig")
        return super().__new__(cls)

    @property
    def secret(self) -> Secret | None:
        """The API key (a ``Secret``), or None when none was given or found."""
        return self.api_key if isinstance(self.api_key, Secret) else None

    @property
    def simulated(self) -> bool:
        """Whether requests go to the bundled simulator (``base_url="simulator"``)."""
        return self.base_url == SIMULATOR_BASE_URL


def option_names() -> frozenset[str]:
    """The settings ``ExtractorConfig`` (and so ``Extractor``) takes as keyword arguments."""
    return frozenset(f.name for f in fields(ExtractorConfig) if f.init)


def check_option_names(given: Iterable[str], known: Iterable[str], where: str) -> None:
    """Raise Python's ``TypeError`` for a keyword ``where`` does not take, with a suggestion."""
    choices = sorted(known)
    unknown = sorted(set(given) - set(choices))
    if unknown:
        names = ", ".join(f"{name!r}{did_you_mean(name, choices)}" for name in unknown)
        raise TypeError(
            f"{where}() got unexpected keyword argument(s) {names}; the settings are the fields "
            "of kx.ExtractorConfig"
        )


def check_base_url(url: object, setting: str) -> None:
    """Refuse a base URL no request could use, naming ``setting``; never echo credentials.

    It must be ``"simulator"`` (the bundled simulator) or an ``http://`` / ``https://`` URL with
    a host (and optionally a port and a path, such as ``https://api.example.com/v1``), without
    user info (``user:key@host``: pass the key as ``api_key``), query or fragment.
    """
    if url == SIMULATOR_BASE_URL and setting == "base_url":
        return
    if not isinstance(url, str):
        raise ConfigurationError(f"{setting} must be a string or None, got {type(url).__name__}")
    shown = _without_secrets(url)
    example = "such as 'https://api.example.com' or 'http://127.0.0.1:8000'"
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ConfigurationError(f"{setting} holds spaces or control characters: {shown!r}")
    if "@" in url:
        raise ConfigurationError(
            f"{setting} must not hold credentials (user info before '@'): pass the key as "
            f"api_key= or in {API_KEY_ENV_VARS[0]}; got {shown!r}"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port out of range or not a number)
    except ValueError:
        raise ConfigurationError(
            f"{setting} is not a valid URL (a bad port or IPv6 brackets): {shown!r}"
        ) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"{setting} must be an http:// or https:// URL with a host, {example}; got {shown!r}"
            + (" (or 'simulator' for the bundled simulator)" if setting == "base_url" else "")
        )
    if parts.query or parts.fragment:
        raise ConfigurationError(
            f"{setting} takes no query or fragment (requests go to its /v1/chat/completions); "
            f"got {shown!r}"
        )


def _without_secrets(url: str) -> str:
    """``url`` as an error may show it: anything up to an ``@`` (user info: a key) and the query
    or fragment hidden."""
    if "@" in url:
        scheme = re.match(r"(?i)https?://", url)
        url = (scheme.group(0) if scheme else "") + "***@" + url.rpartition("@")[2]
    return re.sub(r"[?#].*", "?...", url, flags=re.S)


def check_budget_fits(
    max_tokens: int | None,
    max_cost: float | None,
    max_completion_tokens: int,
    pricing: Pricing | None,
    per: str = "",
) -> None:
    """A budget must pay for one request's worst case, or no request could ever be sent."""
    fix = "raise it or lower max_completion_tokens (each request reserves all of it)"
    if max_tokens is not None and max_tokens <= max_completion_tokens:
        raise ConfigurationError(
            f"budget max_tokens={max_tokens:,}{per} cannot pay for one request: its worst case is "
            f"max_completion_tokens={max_completion_tokens:,} plus the prompt; {fix}"
        )
    if max_cost is not None and pricing is not None and pricing.output > 0:
        completion_cost = max_completion_tokens * pricing.output / 1_000_000
        if completion_cost >= max_cost:
            fitting = int(max_cost * 1_000_000 / pricing.output)
            raise ConfigurationError(
                f"budget max_cost=${max_cost:g}{per} cannot pay for one request: "
                f"max_completion_tokens={max_completion_tokens:,} may cost "
                f"${completion_cost:.4f} at ${pricing.output:g}/M output tokens (fewer than "
                f"{fitting:,} would fit); {fix}"
            )


def _check_seconds(name: str, value: float, *, allow_zero: bool = False) -> None:
    """A duration setting: a finite number of seconds, > 0 (>= 0 with ``allow_zero``)."""
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(
            f"{name} must be a finite number of seconds {bound}, got {value!r}"
        )


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")
