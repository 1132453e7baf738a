"""``SimulatorConfig``: every ``Simulator`` setting in one frozen, checked object; and the records
the app hands to ``streaming`` (``Responder``, ``SimAnswer``), so neither imports the other.

The settings come in groups (``options``: faults, limits, latency, answers, cache) beside the
simulator's own (key, seed, clock, schema level, stream usage, history). Flat keywords are the
front door, as for the client's ``ExtractorConfig``: ``SimulatorConfig(rpm=120)`` routes ``rpm``
into the ``limits`` group and ``config.rpm`` reads it back; a group can be given whole
(``SimulatorConfig(limits=LimitOptions(rpm=120))``), and a flat keyword given beside its group
changes that field of it. ``dataclasses.replace(config, rpm=60)`` and
``Simulator(config=config, rpm=60)`` derive a variant, checked again. A wrong value is a
``ConfigurationError`` naming the setting; a misspelt name is Python's ``TypeError``, naming the
closest one.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

from ..exceptions import ConfigurationError, did_you_mean
from . import completion
from .cache import Lookup
from .options import (
    GROUPS,
    AnswerOptions,
    CacheOptions,
    FaultOptions,
    LatencyOptions,
    LimitOptions,
    check_choice,
    check_whole,
)
from .protocol import DEFAULT_API_KEY, SimRequest

__all__ = ["Responder", "SimAnswer", "SimulatorConfig", "option_names"]

Responder = Callable[[SimRequest], Any]

SCHEMA_LEVELS = ("strict", "ultra")
STREAM_USAGE = ("choices", "separate")
#: Each group field's flat keyword -> the attribute of the group that holds it.
GROUP_OF: dict[str, str] = {f.name: group for group, cls in GROUPS.items() for f in fields(cls)}


@dataclass(frozen=True, init=False)
class SimulatorConfig:
    """Every ``Simulator`` setting, checked once: the simulator's own and five groups.

    ``SimulatorConfig(rpm=120, answers="extractive")``: every keyword is a field below or a field of
    a group (see the module docstring). Frozen: derive a variant with ``dataclasses.replace(config,
    rpm=60)``, which checks again. docs/simulator-settings.md lists every setting.
    """

    api_key: str = field(default=DEFAULT_API_KEY, repr=False)
    """The key clients must send (``Authorization: Bearer ...``); others get a 401."""

    seed: int = 0
    """Seeds every random draw: faults, overload, latency and response ids."""

    clock: Callable[[], float] = time.monotonic
    """Seconds, for cache expiry and rate windows; a test passes a virtual clock (None:
    ``time.monotonic``)."""

    schema_level: Literal["strict", "ultra"] = "strict"
    """How ``response_format`` schemas and tool ``parameters`` are checked
    (``kimi_extract.schema.dialect``, MoonshotAI/walle's levels): ``"strict"`` (what Moonshot's
    server enforces) or ``"ultra"`` (walle's most thorough check)."""

    stream_usage: Literal["choices", "separate"] = "choices"
    """Where a stream's usage goes: ``"choices"`` (the last chunk carries it at its top level and
    in its choice, as Kimi sends it) or ``"separate"`` (a chunk of its own after the last one,
    only when the request sets ``stream_options.include_usage``, as OpenAI sends it)."""

    history_limit: int | None = None
    """Keep only the last N exchanges in ``Simulator.history`` (None: all; ``serve`` keeps
    none). The counters and ``SimExchange.index`` still count every request."""

    faults: FaultOptions = field(default_factory=FaultOptions)
    """Faults (``FaultOptions``)."""

    limits: LimitOptions = field(default_factory=LimitOptions)
    """Limits (``LimitOptions``)."""

    latency_options: LatencyOptions = field(default_factory=LatencyOptions)
    """Latency (``LatencyOptions``)."""

    answer_options: AnswerOptions = field(default_factory=AnswerOptions)
    """Answers (``AnswerOptions``)."""

    cache: CacheOptions = field(default_factory=CacheOptions)
    """The prefix cache (``CacheOptions``)."""

    if TYPE_CHECKING:  # the flat names of the group fields (config.rpm ...), read-only

        def __getattr__(self, name: str) -> Any: ...

    def __init__(self, **settings: Any) -> None:
        check_option_names(settings, "SimulatorConfig")
        for spec in fields(self):
            if spec.name in GROUPS:
                group = settings.get(spec.name, MISSING)
                cls = GROUPS[spec.name]
                if group is MISSING:
                    group = cls()
                elif not isinstance(group, cls):
                    raise ConfigurationError(
                        f"{spec.name} must be a {cls.__name__}, got {type(group).__name__}"
                    )
                changes = {k: v for k, v in settings.items() if GROUP_OF.get(k) == spec.name}
                if changes:  # a flat keyword wins over its group (replace passes the group)
                    group = dataclasses.replace(group, **changes)
                value = group
            else:
                value = settings.get(spec.name, spec.default)
            object.__setattr__(self, spec.name, value)
        self._check()

    def _check(self) -> None:
        if (
            not isinstance(self.api_key, str)
            or not self.api_key
            or self.api_key != self.api_key.strip()
        ):
            raise ConfigurationError(
                "api_key must be a non-empty string without surrounding spaces"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ConfigurationError(f"seed must be an integer, got {self.seed!r}")
        if self.clock is None:  # as ``Simulator(clock=None)`` has always meant
            object.__setattr__(self, "clock", time.monotonic)
        if not callable(self.clock):
            raise ConfigurationError(
                f"clock must be a callable returning seconds, got {self.clock!r}"
            )
        check_choice("schema_level", self.schema_level, SCHEMA_LEVELS)
        check_choice("stream_usage", self.stream_usage, STREAM_USAGE)
        check_whole("history_limit", self.history_limit, minimum=0, optional=True)


def _flat(name: str, group: str) -> property:
    """``config.<name>``: the field ``name`` of the group ``group``, read-only."""

    def read(config: SimulatorConfig) -> Any:
        return getattr(getattr(config, group), name)

    return property(read, doc=f"``{group}.{name}`` (read-only).")


for _name, _group in GROUP_OF.items():
    setattr(SimulatorConfig, _name, _flat(_name, _group))


def option_names() -> frozenset[str]:
    """Every keyword ``SimulatorConfig`` (and so ``Simulator``) takes: its own settings, the
    groups, and the flat names of the groups' fields."""
    return frozenset({f.name for f in fields(SimulatorConfig)} | set(GROUP_OF))


def check_option_names(given: Iterable[str], where: str) -> None:
    """Raise Python's ``TypeError`` for a keyword ``where`` does not take, with a suggestion."""
    known = sorted(option_names())
    unknown = sorted(set(given) - set(known))
    if unknown:
        names = ", ".join(f"{name!r}{did_you_mean(name, known)}" for name in unknown)
        raise TypeError(
            f"{where}() got unexpected keyword argument(s) {names}; the settings are the fields "
            "of SimulatorConfig and its groups (docs/simulator-settings.md)"
        )


def signature_parameters() -> list[inspect.Parameter]:
    """``SimulatorConfig(...)``'s keywords as ``help()`` shows them: its own settings, each group
    and the group's fields by their flat names (keyword-only, with defaults)."""
    parameters = []
    for spec in fields(SimulatorConfig):
        specs = [spec] + (list(fields(GROUPS[spec.name])) if spec.name in GROUPS else [])
        for one in specs:
            default = one.default_factory() if one.default_factory is not MISSING else one.default
            parameters.append(
                inspect.Parameter(
                    one.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=one.type
                )
            )
    return parameters


setattr(  # noqa: B010  (mypy: no such attribute)
    SimulatorConfig, "__signature__", inspect.Signature(signature_parameters())
)

_clashes = set(GROUP_OF) & {f.name for f in fields(SimulatorConfig)}
assert not _clashes, f"a group field takes the name of a setting: {sorted(_clashes)}"


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
