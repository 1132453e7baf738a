"""Retry-after parsing, error mapping and the retry policy (pure parts; HTTP in test_retries)."""

from __future__ import annotations

import email.utils
import time

import httpx
import pytest

from kimi_extract.exceptions import (
    AuthenticationError,
    BadRequestError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    RateLimitError,
    ServerError,
)
from kimi_extract.transport import Secret, chat_url, error_from_response, retry_after_seconds


def headers(**values: str) -> httpx.Headers:
    return httpx.Headers({k.replace("_", "-"): v for k, v in values.items()})


def test_retry_after_ms_wins():
    assert retry_after_seconds(headers(retry_after_ms="1500", retry_after="9"), None) == 1.5


def test_retry_after_seconds_and_http_date():
    assert retry_after_seconds(headers(retry_after="2"), None) == 2.0
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 28 <= retry_after_seconds(headers(retry_after=future), None) <= 31
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert retry_after_seconds(headers(retry_after=past), None) == 0.0


def test_retry_after_from_kimi_message():
    message = (
        "Your account org-x request reached organization max RPM: 3, please try again after "
        "1 seconds"
    )
    assert retry_after_seconds(headers(), message) == 1.0
    assert retry_after_seconds(headers(), "try again after 250 ms") == 0.25
    assert retry_after_seconds(headers(), "slow down") is None


def response(
    status: int, error_type: str | None, message: str = "m", **hdrs: str
) -> httpx.Response:
    body = {"error": {"message": message, "type": error_type, "code": None}}
    return httpx.Response(status, json=body, headers=headers(**hdrs))


@pytest.mark.parametrize(
    ("status", "error_type", "cls", "retryable"),
    [
        (400, "invalid_request_error", BadRequestError, False),
        (401, "invalid_authentication_error", AuthenticationError, False),
        (403, "permission_denied_error", PermissionDeniedError, False),
        (404, "resource_not_found_error", NotFoundError, False),
        (429, "rate_limit_reached_error", RateLimitError, True),
        (429, "engine_overloaded_error", RateLimitError, True),
        (429, "exceeded_current_quota_error", QuotaExceededError, False),
        (500, "server_error", ServerError, True),
        (503, None, ServerError, True),
        (408, None, ServerError, True),
        (409, None, ServerError, True),
    ],
)
def test_error_mapping(status, error_type, cls, retryable):
    resp = response(status, error_type, x_request_id="req-1")
    exc = error_from_response(resp.status_code, resp.headers, resp.content)
    assert type(exc) is cls
    assert exc.retryable is retryable
    assert exc.status == status and exc.error_type == error_type
    assert "req-1" in str(exc)


def test_error_body_not_json():
    resp = httpx.Response(502, content=b"<html>bad gateway</html>")
    exc = error_from_response(resp.status_code, resp.headers, resp.content)
    assert isinstance(exc, ServerError) and "bad gateway" in str(exc)


def test_429_reads_wait_from_message_without_header():
    resp = response(
        429, "rate_limit_reached_error", "max concurrency: 1, please try again after 3 seconds"
    )
    assert error_from_response(resp.status_code, resp.headers, resp.content).retry_after == 3.0


def test_chat_url_and_secret():
    assert chat_url("https://direct.evolink.ai") == "https://direct.evolink.ai/v1/chat/completions"
    assert chat_url("http://h:1/v1/") == "http://h:1/v1/chat/completions"
    secret = Secret("sk-very-secret-value")
    assert "sk-very" not in repr(secret) and "sk-very" not in str(secret)
    assert secret.get() == "sk-very-secret-value"
