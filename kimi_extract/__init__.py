"""kimi_extract: typed structured extraction with Kimi models.

Declare a Pydantic model, run an ``Extractor`` over DataFrame rows, documents or images, and get a
DataFrame back with one column per field and per-row token, cache and cost accounting.
"""

from __future__ import annotations

import typing

from . import (
    accessor,  # noqa: F401  (registers the DataFrame .kimi accessor)
    shared_simulator,  # noqa: F401  (lets base_url="simulator" start the simulator)
)
from .config import (
    Budget,
    Connection,
    ExtractorConfig,
    GroundingOptions,
    Limits,
    MediaOptions,
    PromptCache,
)
from .exceptions import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    BudgetExceeded,
    ConfigurationError,
    ContextOverflowError,
    EmptyInputError,
    EvaluationError,
    InputError,
    KimiExtractError,
    MediaError,
    MissingAPIKeyError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    ResponseTooLargeError,
    RowError,
    RunInterrupted,
    RunStopped,
    SchemaError,
    ServerError,
    StoreError,
    ToolLoopError,
    TruncatedError,
    ValidationFailedError,
)
from .extractor import Extractor, RunReport
from .kimi import MODELS, ModelInfo
from .records import Pricing, Usage
from .run.estimate import Estimate
from .schema.compiled import CompiledSchema, compile_schema, response_format

if typing.TYPE_CHECKING:
    from .quality import Evaluation, evaluate
    from .quality.compare import compare
    from .quality.comparison import Comparison
    from .quality.plot import plot_compare
    from .simulator import Simulator
    from .table.corrections import read_corrections
    from .table.plot import plot_usage
    from .table.review import review

__version__ = "0.1.0"

__all__ = [
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

#: Public names whose modules load on first use, so ``import kimi_extract`` stays fast: the
#: simulator pulls in its HTTP server stack, which most runs against the real API never need;
#: ``plot_usage`` is only for notebooks (it imports matplotlib when called); ``review`` writes a
#: page after a run; ``evaluate`` / ``Evaluation`` score a finished run against gold;
#: ``read_corrections`` reads what a reviewer saved from the review page; ``compare`` /
#: ``Comparison`` / ``plot_compare`` weigh several settings by accuracy and cost.
_LAZY = {
    "Comparison": ".quality.comparison",
    "Evaluation": ".quality",
    "Simulator": ".simulator",
    "compare": ".quality.compare",
    "evaluate": ".quality",
    "plot_compare": ".quality.plot",
    "plot_usage": ".table.plot",
    "read_corrections": ".table.corrections",
    "review": ".table.review",
}


def __getattr__(name: str) -> typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kimi_extract' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
