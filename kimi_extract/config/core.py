"""``ExtractorConfig``: every ``Extractor`` setting in one frozen, validated object.

The settings, their defaults and what they do are the docstrings under the fields here and in
the groups (``config.groups``); docs/configuration.md is generated from them
(``kimi_extract.config.docs``).

Flat keywords are the front door: ``kx.ExtractorConfig(concurrency=32)`` and
``kx.Extractor(Review, concurrency=32)`` route ``concurrency`` into the ``limits`` group, and
``config.concurrency`` reads it back. A group can be given whole
(``kx.Extractor(Review, limits=kx.Limits(concurrency=32))``); a flat keyword given beside its
group changes that field of it. ``dataclasses.replace(config, rpm=600)`` and
``kx.Extractor(Review, config=cfg, rpm=600)`` derive a variant and check it again, so a derived
run (a Dask partition) gets a valid config, never a mutated copy.

A config is checked once, when it is made: a wrong type or range raises a
``ConfigurationError`` naming the setting, before any request. A misspelt keyword is Python's
``TypeError``, naming the closest setting (``check_option_names``). Old names
(``DEPRECATED_NAMES``) work for one release with a ``DeprecationWarning`` naming the new one.

Derived once from the settings (not arguments; recomputed by ``replace``): ``model_info``,
``effort`` (the reasoning effort sent), ``resolved_pricing`` and ``store_path``; the environment
fills ``base_url`` and ``api_key`` when they were not given (``config.endpoint``).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from ..dispatch import check_hooks
from ..exceptions import ConfigurationError, did_you_mean
from ..http.secret import Secret
from ..kimi import (
    CACHE_TTLS,
    DEFAULT_MAX_COMPLETION_TOKENS,
    DEFAULT_MODEL,
    EFFORT_ALIASES,
    MAX_COMPLETION_TOKENS,
    SIMULATOR_BASE_URL,
    Mode,
    ModelInfo,
    model_info,
    normalize_effort,
    resolve_pricing,
)
from ..media.parts import MediaOptions
from ..records import Pricing
from .endpoint import check_base_url, is_local_endpoint, resolve_endpoint
from .fields import check_bool, check_count, check_positive, warn_deprecated
from .groups import Budget, Connection, GroundingOptions, Limits, PromptCache
from .location import Location, StoreURL, is_store_url
from .location import resolve as resolve_store

__all__ = [
    "DEPRECATED_NAMES",
    "GROUPS",
    "ExtractorConfig",
    "check_budget_fits",
    "check_option_names",
    "option_names",
    "setting_default",
]

#: The groups an ``ExtractorConfig`` holds: attribute -> class.
GROUPS: dict[str, type[Any]] = {
    "limits": Limits,
    "connection": Connection,
    "budget": Budget,
    "prompt_cache": PromptCache,
    "media": MediaOptions,
    "grounding_options": GroundingOptions,
}
#: Each group field's flat keyword -> the attribute of the group that holds it.
GROUP_OF: dict[str, str] = {f.name: group for group, cls in GROUPS.items() for f in fields(cls)}
#: Old setting names still accepted for one release, with a ``DeprecationWarning``: old -> new.
DEPRECATED_NAMES = {"cache": "store", "max_tokens": "max_total_tokens", "prefix": "column_prefix"}
_RENAMED_BECAUSE = {
    "cache": "the result store; 'cache' now means Kimi's prompt cache only (cache_ttl, cache_warm)",
    "max_tokens": "the whole run's token budget; the API's per-request cap is "
    "max_completion_tokens",
    "prefix": "prepended to the output column names",
}


@dataclass(frozen=True, init=False)
class ExtractorConfig:
    """Every ``Extractor`` setting, validated once: the extractor's own fields and six groups.

    ``kx.ExtractorConfig(instructions="...", concurrency=32)``: every keyword is a field below
    or a field of a group (see the module docstring). Frozen: derive a variant with
    ``dataclasses.replace(config, rpm=600)``, which validates again. The API key is held as a
    ``Secret`` and never appears in the repr.
    """

    instructions: str | None = None
    """The system prompt. Static, so it is part of the prefix Kimi's prompt cache serves."""

    examples: Sequence[tuple[Any, Any]] | None = None
    """Few-shot ``(input, output)`` pairs sent after the instructions (also part of the cached
    prefix); each output is checked against the output model when the extractor is made."""

    model: str = DEFAULT_MODEL
    """``kimi-k3.1-pro``, ``kimi-k3.1-pro-highspeed`` or ``kimi-k3``; an unknown name is sent
    unchanged, with a warning naming the closest known one."""

    reasoning_effort: str | None = "low"
    """K3.1: ``low``, ``high`` or ``max`` (``medium`` -> high, ``xhigh`` -> max, ``minimal`` /
    ``none`` -> low; the API's own default is max); ``kimi-k3`` takes only max. None: not sent."""

    api_key: str | Secret | None = field(default=None, repr=False)
    """The key; default: the environment's ``KIMI_API_KEY``, then ``EVOLINK_API_KEY``. Held as a
    ``Secret``: never in logs, reprs, errors, files or frames. None with
    ``base_url="simulator"``."""

    base_url: str | None = None
    """An ``http(s)://host[:port][/path]`` URL without credentials (``user:key@`` is refused),
    query or fragment; or ``"simulator"`` (in code only): the bundled simulator, started once
    per process. Default: the environment's ``KIMI_BASE_URL``, else routed per request (media to
    ``https://api.evolink.ai``, text to ``https://direct.evolink.ai``, with failover)."""

    mode: Mode = "json_schema"
    """``"json_schema"``: strict structured output; ``"json_object"`` for endpoints without it
    (the schema goes into the system prompt)."""

    max_completion_tokens: int = DEFAULT_MAX_COMPLETION_TOKENS
    """Output budget of one request, reasoning included (at most 1,048,576); an answer cut at
    it is retried once with double."""

    validation_retries: int = 2
    """Reasks after an invalid answer: the validation errors are sent back and the model asked
    again."""

    stream: bool = False
    """Request SSE streams (the results are identical)."""

    web_search: bool = False
    """Offer Kimi's built-in ``$web_search`` tool and run the tool loop; adds the
    ``kx_web_searches`` column."""

    max_tool_rounds: int = 3
    """Tool-call rounds allowed per row (with ``web_search``) before the row fails."""

    pricing: Pricing | dict[str, Pricing] | None = None
    """A ``kx.Pricing(input, cached_input, cache_write, output)`` in USD per 1M tokens (each
    finite and >= 0), or a dict of them by model name; default: the package's table
    (``kimi_extract/kimi.py``, with its sources)."""

    store: str | os.PathLike[str] | StoreURL | bool | None = None
    """The result store: finished rows are kept there and a rerun serves them again. A file
    path (SQLite), or a ``postgresql://user@host/db`` URL (one store for many machines; held as
    a ``StoreURL``, never shown with its password). None or True: the default file in the user
    cache directory (env ``KIMI_EXTRACT_STORE``: ``off`` or a URL; ``KIMI_EXTRACT_STORE_DIR``
    moves it); False: none. A server on this machine (the simulator, ``localhost``,
    ``0.0.0.0``, its host name or addresses) gets no default store. Old name: ``cache``
    (deprecated)."""

    progress: bool = True
    """Show a tqdm bar: rows, errors, tokens, cache-hit share, send rate, the limit that
    binds."""

    hooks: Sequence[Any] = ()
    """Objects that observe every run, as httpx's ``event_hooks``: each has any of
    ``on_run_start``, ``on_row_start``, ``on_attempt``, ``on_response``, ``on_retry``,
    ``on_reask``, ``on_chunk``, ``on_row_end``, ``on_run_end`` (plain or ``async``), each given a
    small frozen event (``kimi_extract.hooks``: usage, timing, attempt, status; never the key).
    Prompts and answers are in the events only for a hook whose class sets
    ``capture_content = True``. A hook that raises is logged once and called no more in that
    run; it never fails a row. docs/hooks.md."""

    column_prefix: str = ""
    """Prepended to the output column names, to keep them apart from input columns (``kx_``
    names are reserved). Old name: ``prefix`` (deprecated)."""

    limits: Limits = field(default_factory=Limits)
    """Rows in flight and rates (``kx.Limits``)."""

    connection: Connection = field(default_factory=Connection)
    """Each HTTP attempt and its retries (``kx.Connection``)."""

    budget: Budget = field(default_factory=Budget)
    """What one run may spend (``kx.Budget``)."""

    prompt_cache: PromptCache = field(default_factory=PromptCache)
    """Kimi's prompt cache (``kx.PromptCache``)."""

    media: MediaOptions = field(default_factory=MediaOptions)
    """Images and videos (``kx.MediaOptions``)."""

    grounding_options: GroundingOptions = field(default_factory=GroundingOptions)
    """Finding each value in the text sent (``kx.GroundingOptions``)."""

    # -- derived when made (recomputed by replace) -------------------------------------------
    #: The model's rules (``kimi.model_info``).
    model_info: ModelInfo = field(init=False, repr=False, compare=False)
    #: The reasoning effort sent (aliases normalized for the model; None: omitted).
    effort: str | None = field(init=False, repr=False, compare=False)
    #: The price this model is billed at (``pricing`` resolved), or None when unknown.
    resolved_pricing: Pricing | None = field(init=False, repr=False, compare=False)
    #: The result store: a file (``Path``), a PostgreSQL database (``StoreURL``, shown without
    #: its password), or None for no store.
    store_path: Location | None = field(init=False, repr=False, compare=False)

    if TYPE_CHECKING:  # the flat names of the group fields (config.concurrency ...), read-only

        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, **settings: Any) -> None:
        settings = _renamed(settings)
        check_option_names(settings, option_names(), "ExtractorConfig")
        for spec in fields(self):
            if not spec.init or spec.name in GROUPS:
                continue
            if spec.name in settings:
                value = settings[spec.name]
            elif spec.default_factory is not MISSING:
                value = spec.default_factory()
            else:
                value = spec.default
            object.__setattr__(self, spec.name, value)
        for name, cls in GROUPS.items():
            group = settings.get(name, MISSING)
            if group is MISSING:
                group = cls()
            elif not isinstance(group, cls):
                raise ConfigurationError(
                    f"{name} must be a kx.{cls.__name__}, got {type(group).__name__}"
                )
            changes = {k: v for k, v in settings.items() if GROUP_OF.get(k) == name}
            if changes:  # a flat keyword wins over its group (replace passes the group)
                group = dataclasses.replace(group, **changes)
            object.__setattr__(self, name, group)
        self._check_and_derive()

    def _check_and_derive(self) -> None:
        """Check the extractor's own fields and what spans groups; fill the derived values."""
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
        if not isinstance(self.column_prefix, str):
            raise ConfigurationError(
                f"column_prefix must be a string, got {type(self.column_prefix).__name__}"
            )
        if not isinstance(self.model, str) or not self.model:
            raise ConfigurationError(f"model must be a model name, got {self.model!r}")
        if self.examples is not None and (
            isinstance(self.examples, str | bytes) or not isinstance(self.examples, Sequence)
        ):
            raise ConfigurationError(
                f"examples must be a list of (input, output) pairs, got {self.examples!r}"
            )
        object.__setattr__(self, "hooks", check_hooks(self.hooks))
        for name in ("progress", "stream", "web_search"):
            check_bool(name, getattr(self, name))
        check_positive("max_completion_tokens", self.max_completion_tokens)
        if self.max_completion_tokens > MAX_COMPLETION_TOKENS:
            raise ConfigurationError(
                f"max_completion_tokens={self.max_completion_tokens} exceeds the API maximum "
                f"{MAX_COMPLETION_TOKENS:,}"
            )
        check_count("validation_retries", self.validation_retries)
        check_count("max_tool_rounds", self.max_tool_rounds)
        if self.mode not in ("json_schema", "json_object"):
            raise ConfigurationError(
                f"mode must be 'json_schema' or 'json_object', got {self.mode!r}"
            )
        if not (self.store is None or isinstance(self.store, bool | str | os.PathLike | StoreURL)):
            raise ConfigurationError(
                "store must be a path, a postgresql:// URL, True/None (default location) or "
                f"False, got {self.store!r}"
            )
        if is_store_url(self.store) and not isinstance(self.store, StoreURL):
            # Held as a StoreURL from here on: the config's repr never shows the password.
            object.__setattr__(self, "store", StoreURL(str(self.store)))

        info = model_info(self.model)
        if self.prompt_cache.cache_ttl in CACHE_TTLS and not info.cache_options:
            raise ConfigurationError(
                f"{self.model} does not accept prompt_cache_options (K3.1 series only); drop "
                "cache_ttl"
            )
        try:
            effort = normalize_effort(info, self.reasoning_effort)
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from None
        pricing = resolve_pricing(self.pricing, self.model, info.pricing)
        budget = self.budget
        if budget.max_cost is not None and pricing is None:
            raise ConfigurationError(
                f"max_cost needs prices for {self.model}: pass pricing=kx.Pricing(...) "
                "(or use max_total_tokens)"
            )
        check_budget_fits(
            budget.max_total_tokens, budget.max_cost, self.max_completion_tokens, pricing
        )
        # The environment fills what was not given, once: a replaced config keeps what it read.
        base_url, secret = resolve_endpoint(self.base_url, self.api_key)
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
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @property
    def secret(self) -> Secret | None:
        """The API key (a ``Secret``), or None when none was given or found."""
        return self.api_key if isinstance(self.api_key, Secret) else None

    @property
    def simulated(self) -> bool:
        """Whether requests go to the bundled simulator (``base_url="simulator"``)."""
        return self.base_url == SIMULATOR_BASE_URL

    @property
    def max_tokens(self) -> int | None:
        """Deprecated name of ``max_total_tokens``."""
        warn_deprecated("ExtractorConfig.max_tokens is deprecated: use max_total_tokens")
        return self.budget.max_total_tokens

    @property
    def prefix(self) -> str:
        """Deprecated name of ``column_prefix``."""
        warn_deprecated("ExtractorConfig.prefix is deprecated: use column_prefix")
        return self.column_prefix


def _flat(name: str, group: str) -> property:
    """``config.<name>``: the field ``name`` of the group ``group``, read-only."""

    def read(config: ExtractorConfig) -> Any:
        return getattr(getattr(config, group), name)

    return property(read, doc=f"``{group}.{name}`` (read-only).")


for _name, _group in GROUP_OF.items():
    setattr(ExtractorConfig, _name, _flat(_name, _group))


def _signature() -> inspect.Signature:
    """``ExtractorConfig(...)``'s keywords as ``help()`` and editors show them: its own settings,
    each group, and the group's fields by their flat names (all keyword-only, with defaults)."""
    parameters = []
    for spec in fields(ExtractorConfig):
        specs = [spec] + (list(fields(GROUPS[spec.name])) if spec.name in GROUPS else [])
        for one in specs if spec.init else []:
            default = one.default_factory() if one.default_factory is not MISSING else one.default
            parameters.append(
                inspect.Parameter(
                    one.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=one.type
                )
            )
    return inspect.Signature(parameters)


setattr(ExtractorConfig, "__signature__", _signature())  # noqa: B010  (mypy: no such attribute)


def _renamed(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with each old name (``DEPRECATED_NAMES``) under its new one, warning once
    each. An old name given with its new one wins: ``dataclasses.replace`` passes every field
    (``Extractor`` refuses the pair before it gets here)."""
    renamed = dict(settings)
    for old, new in DEPRECATED_NAMES.items():
        if old in renamed:
            warn_deprecated(f"{old}= is deprecated: use {new}= ({_RENAMED_BECAUSE[old]})")
            renamed[new] = renamed.pop(old)
    return renamed


def option_names() -> frozenset[str]:
    """Every keyword ``ExtractorConfig`` (and so ``Extractor``) takes: its own settings, the
    groups, and the flat names of the groups' fields (old names not included)."""
    own = {f.name for f in fields(ExtractorConfig) if f.init}
    return frozenset(own | set(GROUP_OF))


def setting_default(name: str) -> Any:
    """The default of a setting, by its flat name (for help texts; never re-listed elsewhere)."""
    group = GROUP_OF.get(name)
    cls = GROUPS[group] if group is not None else ExtractorConfig
    spec = next(f for f in fields(cls) if f.name == name)
    return spec.default_factory() if spec.default_factory is not MISSING else spec.default


def check_option_names(given: Iterable[str], known: Iterable[str], where: str) -> None:
    """Raise Python's ``TypeError`` for a keyword ``where`` does not take, with a suggestion."""
    choices = sorted(set(known) | set(DEPRECATED_NAMES))
    unknown = sorted(set(given) - set(choices))
    if unknown:
        names = ", ".join(f"{name!r}{did_you_mean(name, choices)}" for name in unknown)
        raise TypeError(
            f"{where}() got unexpected keyword argument(s) {names}; the settings are the fields "
            "of kx.ExtractorConfig and its groups (docs/configuration.md)"
        )


def check_budget_fits(
    max_total_tokens: int | None,
    max_cost: float | None,
    max_completion_tokens: int,
    pricing: Pricing | None,
    per: str = "",
) -> None:
    """A budget must pay for one request's worst case, or no request could ever be sent."""
    fix = "raise it or lower max_completion_tokens (each request reserves all of it)"
    if max_total_tokens is not None and max_total_tokens <= max_completion_tokens:
        raise ConfigurationError(
            f"budget max_total_tokens={max_total_tokens:,}{per} cannot pay for one request: its "
            f"worst case is max_completion_tokens={max_completion_tokens:,} plus the prompt; "
            f"{fix}"
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


_clashes = set(GROUP_OF) & ({f.name for f in fields(ExtractorConfig)} | set(GROUPS))
assert not _clashes, f"a group field takes the name of a setting: {sorted(_clashes)}"
