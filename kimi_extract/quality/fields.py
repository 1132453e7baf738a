"""The fields ``evaluate`` scores, read from the Pydantic model: one node per field path.

Paths: a top-level field is its name (``total``); a field of a nested model joins names with a
dot (``address.city``); a list is its name (``items``) and the fields of its items follow
``[]`` (``items[].quantity``). The matcher of each leaf follows its type (``matching``):

====================================================  =======================================
type                                                  matcher
====================================================  =======================================
``float``, ``Decimal`` (and unions of numbers)       ``NumberMatcher()`` (relative 1e-9)
``int``                                               ``NumberMatcher(rel=0)`` (exact)
``date`` / ``datetime`` / ``time``                    ``DateMatcher("date" / "datetime" / "time")``
``str``                                               ``TextMatcher()``
``bool``, ``Literal[...]``, an ``Enum``               ``ExactMatcher(allowed=...)``
``list[X]``, ``set[X]``, ``tuple[X, ...]``            ``ListMatcher()`` over items of X
a ``BaseModel``                                       its fields, each by its own type
anything else (``dict``, ``Any``, other unions...)    ``ExactMatcher()`` (canonical JSON)
====================================================  =======================================

``Optional[X]`` is X. ``matchers={"path": matcher}`` replaces the matcher of a path; a leaf
matcher given for a list of single values applies to its items.
"""

from __future__ import annotations

import collections.abc
import datetime as dt
import decimal
import enum
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Union

from pydantic import BaseModel

from ..exceptions import ConfigurationError
from .matching import (
    DateMatcher,
    ExactMatcher,
    FunctionMatcher,
    LeafMatcher,
    ListMatcher,
    NumberMatcher,
    TextMatcher,
)


@dataclass(frozen=True, eq=False)
class Leaf:
    """A single value, compared by ``matcher``."""

    path: str
    matcher: LeafMatcher


@dataclass(frozen=True, eq=False)
class Group:
    """A nested model: its fields by name."""

    path: str
    names: tuple[str, ...]
    children: tuple[Node, ...]


@dataclass(frozen=True, eq=False)
class Items:
    """A list: its items (a ``Leaf`` or a ``Group``, or another ``Items``), paired by
    ``matcher``."""

    path: str
    item: Node
    matcher: ListMatcher


Node = Leaf | Group | Items

_LISTS = (list, set, frozenset, collections.abc.Sequence, collections.abc.Set)


def _strip(annotation: Any) -> Any:
    """``Annotated[X, ...]`` -> X and ``Optional[X]`` -> X (repeatedly)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _is_number(annotation: Any) -> bool:
    return (
        isinstance(annotation, type)
        and issubclass(annotation, (int, float, decimal.Decimal))
        and not issubclass(annotation, bool)
    )


def _leaf_matcher(annotation: Any) -> LeafMatcher | None:
    """The default matcher of a single-value type (None: not a single value)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return ExactMatcher(allowed=tuple(typing.get_args(annotation)))
    if origin in (Union, types.UnionType):
        args = [_strip(a) for a in typing.get_args(annotation) if a is not type(None)]
        return NumberMatcher() if all(_is_number(a) for a in args) else ExactMatcher()
    if not isinstance(annotation, type):
        return None
    if issubclass(annotation, enum.Enum):
        return ExactMatcher(allowed=tuple(member.value for member in annotation))
    if issubclass(annotation, bool):
        return ExactMatcher(allowed=(True, False))
    if _is_number(annotation):
        return NumberMatcher(rel=0.0) if issubclass(annotation, int) else NumberMatcher()
    if issubclass(annotation, dt.datetime):
        return DateMatcher("datetime")
    if issubclass(annotation, dt.date):
        return DateMatcher("date")
    if issubclass(annotation, dt.time):
        return DateMatcher("time")
    if issubclass(annotation, str):
        return TextMatcher()
    return None


def _item_type(annotation: Any) -> Any | None:
    """X for list[X], set[X], tuple[X, ...], Sequence[X] (None for other types)."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is tuple:
        return args[0] if len(args) == 2 and args[1] is Ellipsis else None
    if origin in _LISTS or (isinstance(origin, type) and issubclass(origin, (list, set))):
        return args[0] if args else Any
    return None


def build(
    model: type[BaseModel],
    names: list[str],
    matchers: Mapping[str, Any] | None = None,
) -> Group:
    """The tree of ``model``'s fields ``names`` (top level), with ``matchers`` applied."""
    overrides = dict(matchers or {})
    used: set[str] = set()
    root = Group(
        path="",
        names=tuple(names),
        children=tuple(
            _node(model.model_fields[name].annotation, name, overrides, used, (model,))
            for name in names
        ),
    )
    unknown = sorted(set(overrides) - used)
    if unknown:
        known = [node.path for node in walk(root)]
        raise ConfigurationError(
            f"matchers= names field path(s) {unknown} that the model {model.__name__} (as far as "
            f"the gold data has it) does not have; its paths: {known}"
        )
    return root


def _override(path: str, overrides: Mapping[str, Any], used: set[str]) -> Any:
    if path not in overrides:
        return None
    used.add(path)
    matcher = overrides[path]
    if isinstance(matcher, (LeafMatcher, ListMatcher)):  # noqa: UP038
        return matcher
    if callable(matcher):
        return FunctionMatcher(typing.cast(Callable[[Any, Any], Any], matcher))
    raise ConfigurationError(
        f"matchers[{path!r}] is {matcher!r}: use a matcher from kimi_extract.quality "
        "(NumberMatcher, DateMatcher, TextMatcher, ExactMatcher, ListMatcher) or a function "
        "fn(gold, pred) -> bool | float"
    )


def _node(
    annotation: Any,
    path: str,
    overrides: Mapping[str, Any],
    used: set[str],
    seen: tuple[type, ...],
) -> Node:
    annotation = _strip(annotation)
    chosen = _override(path, overrides, used)
    item = _item_type(annotation)
    if item is not None:
        if isinstance(chosen, LeafMatcher):  # a leaf matcher for a list of single values
            if _strip(item) is not Any and _leaf_matcher(_strip(item)) is None:
                raise ConfigurationError(
                    f"matchers[{path!r}] is a {type(chosen).__name__}, but {path} is a list of "
                    "objects: give a ListMatcher here, and matchers for the item fields "
                    f"({path}[].name)"
                )
            used.add(path + "[]")
            inner: Node = Leaf(path + "[]", chosen)
            if path + "[]" in overrides:
                raise ConfigurationError(f"matchers names both {path!r} and {path + '[]'!r}")
            chosen = None
        else:
            inner = _node(item, path + "[]", overrides, used, seen)
        return Items(path, inner, chosen if isinstance(chosen, ListMatcher) else ListMatcher())
    if isinstance(chosen, ListMatcher):
        raise ConfigurationError(f"matchers[{path!r}] is a ListMatcher, but {path} is not a list")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if chosen is not None:
            raise ConfigurationError(
                f"matchers[{path!r}]: {path} is an object; give matchers for its fields "
                f"({path}.name) instead"
            )
        if annotation in seen:  # a recursive model: compare the deeper levels as whole values
            return Leaf(path, ExactMatcher())
        prefix = path + "."
        names = tuple(annotation.model_fields)
        return Group(
            path,
            names,
            tuple(
                _node(
                    annotation.model_fields[name].annotation,
                    prefix + name,
                    overrides,
                    used,
                    (*seen, annotation),
                )
                for name in names
            ),
        )
    return Leaf(path, chosen or _leaf_matcher(annotation) or ExactMatcher())


def walk(node: Node) -> Iterator[Leaf | Items]:
    """Every scored node under ``node``, depth first: leaves and lists (not nested models, nor
    the items of a list of single values, which the list scores)."""
    if isinstance(node, Group):
        for child in node.children:
            yield from walk(child)
    elif isinstance(node, Items):
        yield node
        if not isinstance(node.item, Leaf):
            yield from walk(node.item)
    else:
        yield node
