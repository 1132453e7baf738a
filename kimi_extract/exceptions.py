"""Every error kimi_extract raises.

The hierarchy::

    KimiExtractError
    ├── ConfigurationError          bad settings; raised before the first request
    │   ├── MissingAPIKeyError      no key in the arguments or in KIMI_API_KEY / EVOLINK_API_KEY
    │   ├── SchemaError             an output model strict mode cannot express (names the field)
    │   ├── InputError              unknown column / template field, column clash, bad input type
    │   │   └── EvaluationError     gold or predictions that do not fit the model (names row, field)
    │   └── StoreError              the result store file is corrupt, foreign or unwritable
    ├── APIError                    the API answered with an error status
    │   ├── BadRequestError         400 (invalid_request_error, content_filter)
    │   ├── AuthenticationError     401
    │   ├── PermissionDeniedError   403
    │   ├── NotFoundError           404 (unknown model)
    │   ├── RateLimitError          429 rate_limit_reached_error / engine_overloaded_error (retried)
    │   ├── QuotaExceededError      429 exceeded_current_quota_error (not retried)
    │   ├── ServerError             5xx (retried)
    │   └── ResponseTooLargeError   the body passed max_response_bytes or its JSON value cap
    ├── APIConnectionError          the request did not get an answer (retried)
    │   └── APITimeoutError
    ├── RowError                    one row could not be extracted (raised by ``extract``)
    │   ├── EmptyInputError         None / NaN / empty text; no request was sent
    │   ├── MediaError              an image could not be read
    │   ├── ContextOverflowError    the prompt cannot fit the model's context window
    │   ├── ValidationFailedError   answers stayed invalid after every reask
    │   ├── TruncatedError          the answer hit max_completion_tokens twice
    │   └── ToolLoopError           tool calls past the round limit, not offered, or too many
    └── RunStopped                  the run stopped early; ``.partial`` holds the DataFrame so far
        └── BudgetExceeded          max_cost / max_tokens would have been crossed

    KeyboardInterrupt
    └── RunInterrupted              Ctrl-C stopped a sync run; ``.partial`` holds the DataFrame

``RunInterrupted`` is deliberately *not* an ``Exception`` (nor a ``KimiExtractError``), so
``except Exception:`` in user code never swallows a Ctrl-C.

No exception ever carries the API key: messages are built from status, Kimi error type, message
and request id only, request headers are never included, and every text a server sent is redacted
of the key where it enters the library (``http.secret.Secret.redact``), since some servers echo
the key back: whole, any 8 consecutive characters of it, an elided "sk-abc...xyz" form, and the
same decoded (upper-cased, spaced out, ``\\u``-escaped, percent-encoded, base64). A key shorter
than 8 characters is redacted only as a whole token.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: The optional extras (``[project.optional-dependencies]`` in pyproject.toml) and the package
#: each one adds, for ``install_hint`` (tests/promises/test_newcomer.py keeps it equal to
#: pyproject).
EXTRAS = {
    "dask": "dask[distributed]",
    "images": "Pillow",
    "otel": "opentelemetry-api",
    "parquet": "pyarrow",
    "pdf": "pypdfium2",
    "plot": "matplotlib",
    "postgres": "psycopg[binary,pool]",
}


def install_hint(extra: str) -> str:
    """How to install an optional extra, e.g. for ``"pdf"``: the checkout form and the package.

    kimi-extract is not on PyPI, so ``pip install 'kimi-extract[pdf]'`` would fail: the hint
    installs the extra from a checkout (the README's ``pip install -e .``), or the package alone.
    Every error and docstring that tells a user to install something uses this one text.
    """
    return (
        f"pip install -e '.[{extra}]' in your kimi_extract checkout "
        f"(or pip install '{EXTRAS[extra]}')"
    )


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to ``name`` (difflib), or ``""``."""
    if not isinstance(name, str):
        return ""
    by_lower = {choice.lower(): choice for choice in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


class KimiExtractError(Exception):
    """Base class of every kimi_extract error."""


class ConfigurationError(KimiExtractError, ValueError):
    """The extractor or run is configured in a way that cannot work; fix the named setting."""


class MissingAPIKeyError(ConfigurationError):
    """No API key was given and none was found in the environment."""


class SchemaError(ConfigurationError, TypeError):
    """The output model uses a type Kimi's strict JSON schema mode cannot express."""


class InputError(ConfigurationError):
    """The input data does not match the run's arguments (columns, template fields, types)."""


class EvaluationError(InputError):
    """``evaluate`` was given gold or predictions that do not fit the model.

    The message names the row (its index label or ``on=`` key) and the field path: a column or a
    key the model lacks, a key on two rows, a value of the wrong type.
    """


class StoreError(ConfigurationError):
    """The result store cannot be used (corrupt, not a kimi_extract store, unwritable, full).

    Raised before the first request when the file is checked; a store that fails during a run
    stops it with ``RunStopped`` whose ``cause`` is this error. The message names the path and
    the fix.
    """


class APIError(KimiExtractError):
    """The API answered with an error status.

    Attributes: ``status`` (HTTP status), ``error_type`` (Kimi's ``error.type``), ``code``,
    ``request_id`` (from the response headers, when present), ``retry_after`` (seconds the server
    asked us to wait, or None).
    """

    retryable = False

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error_type: str | None = None,
        code: str | None = None,
        request_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type
        self.code = code
        self.request_id = request_id
        self.retry_after = retry_after

    def __str__(self) -> str:
        parts = []
        if self.status is not None:
            parts.append(str(self.status))
        if self.error_type:
            parts.append(self.error_type)
        head = " ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        if self.request_id:
            text += f" (request id {self.request_id})"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_api_error,
            (
                type(self),
                self.message,
                self.status,
                self.error_type,
                self.code,
                self.request_id,
                self.retry_after,
            ),
        )


def _rebuild_api_error(cls: type[APIError], *args: Any) -> APIError:
    message, status, error_type, code, request_id, retry_after = args
    return cls(
        message,
        status=status,
        error_type=error_type,
        code=code,
        request_id=request_id,
        retry_after=retry_after,
    )


class BadRequestError(APIError):
    """400: the request was rejected (invalid parameters, schema, or content filter)."""


class AuthenticationError(APIError):
    """401: the API key is missing or wrong."""


class PermissionDeniedError(APIError):
    """403: the key has no access to this resource."""


class NotFoundError(APIError):
    """404: unknown model or path."""


class RateLimitError(APIError):
    """429 rate_limit_reached_error or engine_overloaded_error; retried with backoff."""

    retryable = True


class QuotaExceededError(APIError):
    """429 exceeded_current_quota_error: the account balance is exhausted; never retried."""


class ServerError(APIError):
    """5xx (and 408/409): a server-side fault; retried with backoff."""

    retryable = True


class ResponseTooLargeError(APIError):
    """The response body passed ``max_response_bytes`` (counted after decompression), or held
    more JSON values outside its strings than ``http.wire.MAX_RESPONSE_VALUES`` (refused before
    it is parsed, so its size in Python objects is bounded too).

    The attempt is abandoned as soon as the cap is crossed; not retried (a server that sends an
    oversized answer once is likely to again, and each attempt may be billed).
    """


class APIConnectionError(KimiExtractError):
    """The request got no answer (connection refused or reset, stream cut); retried.

    ``connect_failure`` says what failed when the request never reached a server ("connection
    refused", "DNS lookup failed", "connect timed out"); None after connecting. A run in which
    no attempt has ever connected stops early (see ``http.transport``).
    """

    retryable = True
    connect_failure: str | None = None


class APITimeoutError(APIConnectionError):
    """The request timed out (connect, read or write); retried."""


class RowError(KimiExtractError):
    """One row could not be extracted. ``extract`` raises it; ``run`` records it in ``kx_error``."""


class EmptyInputError(RowError):
    """The row's text is None, NaN or empty, so no request was sent."""


class MediaError(RowError):
    """An image or video of the row could not be read or encoded."""


class ContextOverflowError(RowError):
    """The prompt cannot fit the model's context window; no request was sent."""


class ValidationFailedError(RowError):
    """The model's answers stayed invalid after every reask. ``.errors`` holds the last errors."""

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.errors = errors or []


class TruncatedError(RowError):
    """The answer was cut at max_completion_tokens even after the budget was doubled."""


class ToolLoopError(RowError):
    """The model kept answering with tool calls past ``max_tool_rounds``, called a tool the
    request did not offer, or made more calls in one answer than the run accepts (the last two
    end the row at once, with no follow-up request)."""


class RunStopped(KimiExtractError):
    """The run stopped early (authentication, quota, unknown model, repeated 400s, Ctrl-C).

    ``partial`` is the output DataFrame with every row: finished rows hold their values, the rest
    hold ``kx_error``. ``cause`` is the error that stopped the run. For ``run_to``,
    ``partial_file`` is the file holding the rows written so far (the target is left untouched),
    and ``partial`` holds only the rows no file could take (a full disk), else None.
    """

    partial_file: str | None = None

    def __init__(
        self,
        message: str,
        *,
        partial: pd.DataFrame | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.cause = cause


class BudgetExceeded(RunStopped):
    """The run stopped scheduling rows because ``max_cost`` / ``max_tokens`` would be crossed.

    Rows not sent hold ``kx_error == "budget"``; rerun with a higher budget to resume (finished
    rows come from the result store).
    """


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sync ``run``: ``.partial`` holds the frame.

    The message says where the finished rows are: how many this run committed to the result
    store (and its path), or that there is no store and a rerun sends every row again. A
    ``KeyboardInterrupt`` only (not an ``Exception``): ``except Exception:`` does not catch it,
    and code that catches ``KeyboardInterrupt`` keeps working. ``partial`` is the output
    DataFrame with every row (unfinished ones say so in ``kx_error``), ``cause`` the interrupt;
    for ``run_to``, ``partial_file`` holds the rows written so far (the target is untouched).
    """

    partial_file: str | None = None

    def __init__(
        self,
        message: str = "interrupted",
        *,
        partial: pd.DataFrame | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.cause = cause
