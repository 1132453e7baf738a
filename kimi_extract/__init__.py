"""kimi_extract: typed structured extraction with Kimi models.

Declare a Pydantic model, run an ``Extractor`` over DataFrame rows, documents or images, and get a
DataFrame back with one column per field and per-row token, cache and cost accounting.
"""

from __future__ import annotations

from .estimate import Estimate
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
    InputError,
    KimiExtractError,
    MediaError,
    MissingAPIKeyError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    RowError,
    RunInterrupted,
    RunStopped,
    SchemaError,
    ServerError,
    TruncatedError,
    ValidationFailedError,
)
from .extractor import Extractor, RunReport
from .models import MODELS, ModelInfo
from .schema import CompiledSchema, compile_schema, response_format
from .simulator import Simulator
from .usage import Pricing, Usage

__version__ = "0.1.0"

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "BudgetExceeded",
    "CompiledSchema",
    "ConfigurationError",
    "ContextOverflowError",
    "EmptyInputError",
    "Estimate",
    "Extractor",
    "InputError",
    "KimiExtractError",
    "MODELS",
    "MediaError",
    "MissingAPIKeyError",
    "ModelInfo",
    "NotFoundError",
    "PermissionDeniedError",
    "Pricing",
    "QuotaExceededError",
    "RateLimitError",
    "RowError",
    "RunInterrupted",
    "RunReport",
    "RunStopped",
    "SchemaError",
    "ServerError",
    "Simulator",
    "TruncatedError",
    "Usage",
    "ValidationFailedError",
    "__version__",
    "compile_schema",
    "response_format",
]
