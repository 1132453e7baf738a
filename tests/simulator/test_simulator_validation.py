"""The simulator's own request validator agrees with the ``jsonschema`` package.

The simulator validates bodies without jsonschema (a base install has only the library's
dependencies), so its small validator is checked here, on generated bodies, against the real
thing: the same verdict on every body, and the same JSON path for the problem where jsonschema's
``best_match`` names one.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema.exceptions import best_match

from kimi_extract.simulator.validation import (
    component_schema,
    fast_path_agrees,
    first_error,
    openapi_components,
    schema_error,
)

VALIDATOR = jsonschema.Draft202012Validator(component_schema("ChatCompletionRequest"))

BASE: dict[str, Any] = {
    "model": "kimi-k3.1-pro",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
    ],
    "max_completion_tokens": 100,
    "temperature": 1.0,
    "stream": False,
    "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},
        {"type": "web_search"},
    ],
    "tool_choice": "auto",
    "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}},
    "prompt_cache_options": {"ttl": "5m"},
}

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["", "user", "assistant", "auto", "none", "required", "text", "5m", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, sub in value.items():
            found += _paths(sub, (*prefix, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            found += _paths(sub, (*prefix, index))
    return found


@st.composite
def mutated_bodies(draw: st.DrawFn) -> Any:
    """A valid body with a few places replaced, deleted, or given new keys."""
    body: Any = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(body)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if not path:
            if action == "replace":
                body = draw(JSON)
            continue
        parent = body
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if action == "replace":
            parent[last] = draw(JSON)
        elif action == "delete":
            del parent[last]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(JSON)
    return body


def _json_path(path: Any) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_bodies())
def test_own_validator_gives_jsonschemas_verdict_and_path(body: Any) -> None:
    components = openapi_components()
    mine = first_error(components["ChatCompletionRequest"], body, components)
    errors = list(VALIDATOR.iter_errors(body))
    theirs = best_match(errors)
    assert (mine is None) == (theirs is None), (mine, theirs and theirs.message)
    assert fast_path_agrees(body)
    if theirs is not None and mine is not None and len(errors) == 1:
        # With one problem in the body, both name the same place (with several, jsonschema's
        # ranking between unrelated problems is its own; we report the first in schema order).
        # Inside a failed oneOf, both point into the value that matched no branch, though they
        # may pick different branches' complaints about it.
        root = theirs
        while root.parent is not None:
            root = root.parent
        assert _json_path(mine[1]).startswith(root.json_path), (mine, theirs.message)
        if root.validator != "oneOf":
            assert _json_path(mine[1]) == theirs.json_path, (mine, theirs.message)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_arbitrary_json_bodies_get_the_same_verdict(body: Any) -> None:
    components = openapi_components()
    mine = first_error(components["ChatCompletionRequest"], body, components)
    assert (mine is None) == VALIDATOR.is_valid(body)


def test_messages_read_like_jsonschemas() -> None:
    assert schema_error({}) == "'model' is a required property at $"
    body = {**BASE, "messages": [{"role": "user", "content": 5}]}
    problem = schema_error(body)
    assert problem is not None and problem.endswith("at $.messages[0].content")
    assert schema_error(BASE) is None
