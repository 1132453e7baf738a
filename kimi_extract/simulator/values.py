"""JSON values valid against a schema, drawn from a seeded ``random.Random``.

A schema is compiled once into a graph of plans (``plans``; memoized by its JSON text, as every
row of a run shares one schema), which knows whether the schema has any valid value at all
(``problem_of``); each request then only draws (``drawing``). Strings are 1-3 consecutive words
of the user text (spans of it, perhaps perturbed, when ``words`` is an ``extractive.Source``).

What is honoured: ``type`` (a list: drawn as its first type with a value, null when none has
one; counted as every type it names), ``enum`` and ``const`` (only
values that meet the node's other keywords), ``anyOf`` / ``oneOf`` / ``allOf``, ``$ref`` (into
``$defs`` / ``definitions``, ``#`` is the root), ``properties`` / ``required`` /
``additionalProperties`` (a ``dict[str, X]``), ``items``, ``minimum`` / ``maximum`` and their
exclusive forms together, ``multipleOf``, ``minLength`` / ``maxLength`` / ``pattern`` /
``format``, ``minItems`` / ``maxItems`` / ``uniqueItems``, ``minProperties`` /
``maxProperties`` of dicts, and the compiler's ``Constraints:`` sentence (``constraints``),
which a ``$ref`` site or an ``anyOf`` parent passes to its target or branches. What is not: a
pattern that needs lookarounds or backreferences to match (its strings may miss), ``not``,
``if``/``then``, ``oneOf``'s "exactly one", ``patternProperties``, ``dependentRequired``.

Every value drawn is valid for a schema built from what is honoured, unless the answer would be
larger than the simulator draws (``AnswerTooLarge``: the model's answer is then cut).
"""

from __future__ import annotations

import json
import random
from typing import Any

from .constraints import constraints_of, parse_constraints
from .drawing import MAX_DEPTH, MAX_MINIMAL_STEPS, MAX_STEPS, Exhausted, draw
from .plans import Plan, explain
from .protocol import to_json
from .ranks import compile_plan

__all__ = [
    "MAX_DEPTH",
    "MAX_MINIMAL_STEPS",
    "MAX_STEPS",
    "AnswerTooLarge",
    "constraints_of",
    "dump_json",
    "generator",
    "json_value",
    "parse_constraints",
    "problem_of",
    "schema_of_example",
]


class AnswerTooLarge(Exception):
    """No answer fits the simulator's work bound; ``text`` is the answer cut where it stopped
    (unterminated JSON, as a model's answer cut by its output budget)."""

    def __init__(self, text: str) -> None:
        super().__init__("the answer is larger than the simulator draws")
        self.text = text


_COMPILED: dict[str, Plan] = {}


def generator(schema: Any, key: str | None = None) -> Plan:
    """The compiled plan of ``schema``; ``key`` (its JSON text) memoizes it."""
    if key is None:
        return compile_plan(schema)
    plan = _COMPILED.get(key)
    if plan is None:
        if len(_COMPILED) >= 512:
            _COMPILED.clear()
        plan = _COMPILED[key] = compile_plan(schema)
    return plan


def problem_of(schema: Any, key: str | None = None) -> str | None:
    """Why no value is valid against ``schema`` (walle's form: ``At path '...': ...``), or
    None when one is. ``key`` memoizes."""
    return explain(generator(schema, key))


def json_value(rng: random.Random, schema: Any, words: list[str], key: str | None = None) -> Any:
    """A value valid against ``schema`` with strings from ``words``; ``key`` memoizes.

    Raises ``AnswerTooLarge`` when the answer needs more work than the simulator does.
    """
    try:
        return draw(generator(schema, key), rng, words)
    except Exhausted as stopped:
        raise AnswerTooLarge(cut_json(stopped.partial)) from None


def dump_json(value: Any) -> str:
    """``value`` as ``protocol.to_json`` writes it, without recursion (any depth)."""
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, dict):
            stack.append(_Raw("}"))
            pairs = list(item.items())
            for index in range(len(pairs) - 1, -1, -1):
                key, sub = pairs[index]
                stack.append(sub)
                stack.append(_Raw(to_json(str(key)) + ": "))
                if index:
                    stack.append(_Raw(", "))
            stack.append(_Raw("{"))
        elif isinstance(item, list | tuple):
            stack.append(_Raw("]"))
            for index in range(len(item) - 1, -1, -1):
                stack.append(item[index])
                if index:
                    stack.append(_Raw(", "))
            stack.append(_Raw("["))
        else:
            out.append(to_json(item))
    return "".join(out)


class _Raw:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def cut_json(partial: Any) -> str:
    """The JSON of a partly drawn answer without its closing brackets: where the model stopped."""
    if partial is None:
        return ""
    return dump_json(partial).rstrip("]} ")


def schema_of_example(value: Any) -> dict[str, Any]:
    """A schema for values shaped like ``value`` (a JSON example in a prompt).

    Objects keep their keys; arrays get 1-3 items shaped like the example's items (one ``anyOf``
    branch per distinct item shape); scalars keep their JSON type.
    """
    if isinstance(value, dict):
        return {
            "type": "object",
            "properties": {key: schema_of_example(item) for key, item in value.items()},
        }
    if isinstance(value, list):
        shapes: dict[str, dict[str, Any]] = {}
        for item in value:
            shape = schema_of_example(item)
            shapes.setdefault(json.dumps(shape, sort_keys=True), shape)
        branches = list(shapes.values()) or [{"type": "string"}]
        items = branches[0] if len(branches) == 1 else {"anyOf": branches}
        return {"type": "array", "items": items, "minItems": 1}
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int):
        return {"type": "integer"}
    if isinstance(value, float):
        return {"type": "number"}
    if value is None:
        return {"type": "null"}
    return {"type": "string"}
