"""Errors are consistent: every configuration error is a ``ConfigurationError``.

``exceptions.py``'s docstring draws the tree. A setting that cannot work is a
``ConfigurationError`` (a ``ValueError``); a bad row is a ``RowError`` / ``InputError``. Plain
``ValueError`` / ``TypeError`` are left only where they mean something else, listed in
``PLAIN_RAISES`` with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kimi_extract.exceptions import ConfigurationError, SchemaError

ROOT = Path(__file__).resolve().parents[2] / "kimi_extract"

#: (module path, enclosing function) -> why a plain ValueError / TypeError is right there.
PLAIN_RAISES = {
    ("records.py", "_count"): "malformed usage from the server: the transport's retry reads it",
    ("records.py", "_details"): "malformed usage from the server",
    ("records.py", "from_api"): "malformed usage from the server",
    ("http/wire.py", "*"): "malformed completion from the server: a retried response error",
    ("accessor.py", "split_options"): "an unknown keyword argument is Python's TypeError",
    ("config/core.py", "check_option_names"): "an unknown keyword argument is Python's TypeError",
    ("accessor.py", "build_extractor"): "a keyword the call does not take: Python's TypeError",
    ("simulator/app.py", "_reject_constant"): "json's hook refusing NaN / Infinity in a body",
    ("simulator/validation.py", "_check_keywords"): "the bundled openapi.json needs a new keyword",
    ("simulator/extractive.py", "perturb"): "a bug, not a setting: Simulator() checks kinds",
    ("simulator/config.py", "check_option_names"): "an unknown keyword is Python's TypeError",
}


def _plain_raises() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if not (isinstance(exc, ast.Name) and exc.id in ("ValueError", "TypeError")):
                continue
            where: ast.AST = node
            while where in parents and not isinstance(
                where, ast.FunctionDef | ast.AsyncFunctionDef
            ):
                where = parents[where]
            function = getattr(where, "name", "<module>")
            found.append((path.relative_to(ROOT).as_posix(), function, node.lineno))
    return found


def test_plain_value_and_type_errors_are_only_where_listed():
    raises = _plain_raises()
    unlisted = [
        f"kimi_extract/{module}:{line} in {function}()"
        for module, function, line in raises
        if (module, function) not in PLAIN_RAISES and (module, "*") not in PLAIN_RAISES
    ]
    places = {(module, function) for module, function, _ in raises}
    places |= {(module, "*") for module, _, _ in raises}
    assert not set(PLAIN_RAISES) - places, "PLAIN_RAISES lists places that no longer raise"
    assert not unlisted, (
        "a plain ValueError/TypeError is raised; a setting that cannot work is a "
        "ConfigurationError (add to PLAIN_RAISES only if it is not a configuration error):\n"
        + "\n".join(unlisted)
    )


def test_configuration_errors_raised_by_lower_layers():
    from kimi_extract.kimi import model_info, normalize_effort
    from kimi_extract.schema import compile_schema
    from kimi_extract.schema.dialect import check_schema

    with pytest.raises(SchemaError, match="BaseModel subclass"):
        compile_schema(dict)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="level"):
        check_schema({"type": "object"}, level="loose")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="reasoning_effort"):
        normalize_effort(model_info("kimi-k3"), "enormous")
    from kimi_extract.records import Pricing

    with pytest.raises(ConfigurationError, match="Pricing.output"):
        Pricing(input=1.0, cached_input=0.1, cache_write=1.0, output=-5.0)


def test_configuration_errors_raised_by_the_http_layer():
    from kimi_extract.http.backends import make_backend
    from kimi_extract.http.routing import Router

    with pytest.raises(ConfigurationError, match="failover_after"):
        Router(failover_after=0)
    with pytest.raises(ConfigurationError, match="unknown http backend"):
        make_backend("carrier-pigeon", headers={}, concurrency=1, timeout=1.0, connect_timeout=1.0)


@pytest.mark.parametrize(
    ("examples", "match"),
    [
        ([("only one",)], "pair"),
        ([("text", 42)], "output must be"),
        ([(42, {"name": "x"})], "input must be"),
        ([("text", {"name": ["not", "a", "string"]})], "does not validate"),
    ],
)
def test_bad_examples_are_configuration_errors(examples, match):
    from pydantic import BaseModel

    import kimi_extract as kx

    class Thing(BaseModel):
        name: str

    with pytest.raises(ConfigurationError, match=match):
        kx.Extractor(Thing, examples=examples, api_key="sk-test", store=None)


@pytest.mark.parametrize(
    "options",
    [
        {"schema_level": "loose"},
        {"stream_usage": "sometimes"},
        {"rate_shape": "square"},
        {"latency": "random"},
        {"cache_block_tokens": 0},
        {"fault_500": 1.5},
    ],
)
def test_simulator_options_are_configuration_errors(options):
    from kimi_extract.simulator import Simulator

    with pytest.raises(ConfigurationError):
        Simulator(**options)
