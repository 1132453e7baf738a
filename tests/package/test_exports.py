"""The public namespace stays explicit and sorted (after httpx's tests/test_exported_members.py)."""

from __future__ import annotations
import __future__

import inspect

import pytest

import kimi_extract as kx
from kimi_extract import exceptions

#: Every public name of ``kimi_extract``, sorted. A name added to or dropped from the package
#: fails here until this list says so: the public API changes only on purpose.
EXPECTED = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "Budget",
    "BudgetExceeded",
    "Comparison",
    "CompiledSchema",
    "ConfigurationError",
    "Connection",
    "ContextOverflowError",
    "EmptyInputError",
    "Estimate",
    "Evaluation",
    "EvaluationError",
    "Extractor",
    "ExtractorConfig",
    "GroundingOptions",
    "InputError",
    "KimiExtractError",
    "Limits",
    "MODELS",
    "MediaError",
    "MediaOptions",
    "MissingAPIKeyError",
    "ModelInfo",
    "NotFoundError",
    "PermissionDeniedError",
    "Pricing",
    "PromptCache",
    "QuotaExceededError",
    "RateLimitError",
    "ResponseTooLargeError",
    "RowError",
    "RunInterrupted",
    "RunReport",
    "RunStopped",
    "SchemaError",
    "ServerError",
    "Simulator",
    "StoreError",
    "ToolLoopError",
    "TruncatedError",
    "Usage",
    "ValidationFailedError",
    "__version__",
    "compare",
    "compile_schema",
    "evaluate",
    "plot_compare",
    "plot_usage",
    "read_corrections",
    "response_format",
    "review",
]


def test_all_is_exactly_the_public_api():
    assert EXPECTED == sorted(EXPECTED)
    assert kx.__all__ == EXPECTED


@pytest.mark.parametrize("name", EXPECTED)
def test_every_exported_name_is_importable(name):
    namespace: dict[str, object] = {}
    exec(f"from kimi_extract import {name}", namespace)  # the statement a user writes
    value = namespace[name]
    assert value is getattr(kx, name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert value.__module__.startswith("kimi_extract."), value.__module__


def test_every_public_name_in_the_namespace_is_in_all():
    public = {
        name
        for name in dir(kx)
        if not name.startswith("_")
        and not inspect.ismodule(getattr(kx, name))
        and not isinstance(getattr(kx, name), __future__._Feature)  # from __future__ import ...
    }
    assert sorted(public - set(kx.__all__)) == []


def test_every_exception_class_is_exported():
    """A user can catch every error the package defines by its public name."""
    defined = {
        name
        for name, value in vars(exceptions).items()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and value.__module__ == exceptions.__name__
    }
    assert sorted(defined - set(kx.__all__)) == []


def test_response_format_shape():
    from pydantic import BaseModel

    class Thing(BaseModel):
        name: str

    rf = kx.response_format(Thing)
    assert rf["type"] == "json_schema"
    assert set(rf["json_schema"]) == {"name", "strict", "schema"}
    assert rf["json_schema"]["strict"] is True and rf["json_schema"]["name"] == "Thing"


def test_no_two_public_classes_share_a_name():
    """One name, one thing: the client's and the simulator's records are named apart
    (``Exchange`` / ``SimExchange``, ``Answer`` / ``SimAnswer``, ``HttpReply`` / ``Reply``)."""
    import ast
    from collections import defaultdict
    from pathlib import Path

    root = Path(kx.__file__).parent
    homes: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                homes[node.name].append(path.relative_to(root).as_posix())
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}
