"""OpenTelemetry for runs: one hook that makes spans and metrics from a run's events.

``kx.Extractor(Model, hooks=[OpenTelemetry()])`` (the ``[otel]`` extra). Only
``opentelemetry-api`` is imported; the application chooses the SDK, its exporters and its
providers, as with any instrumented library. Without providers set, the API's no-op ones make
this hook cost almost nothing.

Spans, one tree per run (``docs/hooks.md`` draws it):

- ``kimi_extract.run``: the run, from ``on_run_start`` to ``on_run_end``, with the report's
  totals;
- ``kimi_extract.row``: one per row, a child of the run's span, with its outcome, its usage
  and one event per retry and per reask;
- ``chat {model}``: one per HTTP attempt (kind CLIENT), a child of its row's span, named and
  attributed by the OpenTelemetry GenAI semantic conventions (``gen_ai.operation.name``,
  ``gen_ai.system``, ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` /
  ``output_tokens``, ``gen_ai.response.id``, ``gen_ai.response.finish_reasons``) and the
  library's own ``kimi_extract.*`` attributes (cached, cache-write and reasoning tokens, cost).

Metrics: ``gen_ai.client.token.usage`` (histogram of input and output tokens per answer),
``gen_ai.client.operation.duration`` (histogram, seconds per attempt), ``kimi_extract.tokens``
(counter, every kind of token by ``kimi_extract.token.type``) and ``kimi_extract.cost``
(counter, USD).

The prompt and the answer go into spans only with ``capture_content=True``
(``gen_ai.input.messages`` / ``gen_ai.output.messages``, JSON text, the key removed as in
every event). The API key is in no span, attribute, event or metric: events never carry it.
"""

from __future__ import annotations

import json
from typing import Any

from .exceptions import ConfigurationError, install_hint
from .hooks import (
    OPERATION,
    SYSTEM,
    Attempt,
    Reask,
    Response,
    Retry,
    RowEnd,
    RowStart,
    RunEnd,
    RunStart,
)
from .records import Usage

try:
    from opentelemetry import metrics, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised without the extra only
    raise ImportError(f"kimi_extract.otel needs opentelemetry-api: {install_hint('otel')}") from exc

__all__ = ["OpenTelemetry"]

#: The instrumentation scope's name (the tracer's and the meter's).
SCOPE = "kimi_extract"
#: Where a row's label is cut in a span attribute.
MAX_LABEL = 200


def _usage_attributes(usage: Usage) -> dict[str, Any]:
    """A usage as span attributes: GenAI's names where they exist, ours for the rest."""
    return {
        "gen_ai.usage.input_tokens": usage.prompt_tokens,
        "gen_ai.usage.output_tokens": usage.completion_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cached_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
        "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
        "kimi_extract.usage.cached_tokens": usage.cached_tokens,
        "kimi_extract.usage.cache_write_tokens": usage.cache_write_tokens,
        "kimi_extract.usage.reasoning_tokens": usage.reasoning_tokens,
        "kimi_extract.usage.cost": usage.cost,
    }


def _label(label: Any) -> str | int | float | bool:
    if isinstance(label, bool | int | float | str):
        return label if not isinstance(label, str) else label[:MAX_LABEL]
    return repr(label)[:MAX_LABEL]


class OpenTelemetry:
    """A hook that traces runs and records token and cost metrics (see the module docstring).

    ``tracer_provider`` / ``meter_provider``: where spans and metrics go (default: the global
    providers, ``trace.set_tracer_provider``). ``capture_content``: put the messages sent and
    the answers into the attempt spans.

    One instance may serve many runs, also at once (spans are keyed by the run's id). Copied to
    a Dask worker, it uses that worker's global providers.
    """

    def __init__(
        self,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
        capture_content: bool = False,
    ) -> None:
        if not isinstance(capture_content, bool):
            raise ConfigurationError(
                f"OpenTelemetry(capture_content=...) must be True or False, got {capture_content!r}"
            )
        self.capture_content = capture_content
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._spans: dict[tuple[Any, ...], Any] = {}
        self._setup()

    def _setup(self) -> None:
        self._tracer = trace.get_tracer(SCOPE, tracer_provider=self._tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=self._meter_provider)
        self._token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Input and output tokens per answer",
        )
        self._duration = meter.create_histogram(
            "gen_ai.client.operation.duration",
            unit="s",
            description="Seconds per HTTP attempt, to its last byte or its failure",
        )
        self._tokens = meter.create_counter(
            "kimi_extract.tokens",
            unit="{token}",
            description="Tokens billed, by kimi_extract.token.type",
        )
        self._cost = meter.create_counter(
            "kimi_extract.cost", unit="USD", description="Cost of the answers, in US dollars"
        )

    def __getstate__(self) -> dict[str, Any]:
        # Providers, tracers and live spans stay in this process; a copy starts afresh.
        return {"capture_content": self.capture_content}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.capture_content = state["capture_content"]
        self._tracer_provider = self._meter_provider = None
        self._spans = {}
        self._setup()

    def __repr__(self) -> str:
        return f"OpenTelemetry(capture_content={self.capture_content})"

    # -- helpers ----------------------------------------------------------------------------

    def _common(self, event: Any) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.system": SYSTEM,
            "gen_ai.provider.name": SYSTEM,
            "gen_ai.request.model": event.model,
        }

    def _start(self, key: tuple[Any, ...], name: str, parent: Any, **options: Any) -> Any:
        context = trace.set_span_in_context(parent) if parent is not None else None
        span = self._tracer.start_span(name, context=context, **options)
        self._spans[key] = span
        return span

    # -- the run ----------------------------------------------------------------------------

    def on_run_start(self, event: RunStart) -> None:
        """Open the run's span."""
        attributes = {
            **self._common(event),
            "kimi_extract.run_id": event.run_id,
            "kimi_extract.concurrency": event.concurrency,
            "gen_ai.request.stream": event.stream,
        }
        if event.rows is not None:
            attributes["kimi_extract.rows"] = event.rows
        self._start((event.run_id,), "kimi_extract.run", None, attributes=attributes)

    def on_run_end(self, event: RunEnd) -> None:
        """Close the run's span with the report's totals; close what an interrupt left open."""
        run = event.run_id
        for key in [k for k in self._spans if k[0] == run and len(k) > 1]:
            span = self._spans.pop(key)
            span.set_status(Status(StatusCode.ERROR, event.error or "the run ended first"))
            span.end()
        span = self._spans.pop((run,), None)
        if span is None:
            return
        report = event.report
        if report is not None:
            span.set_attributes(
                {
                    "kimi_extract.rows": report.rows,
                    "kimi_extract.rows_ok": report.ok,
                    "kimi_extract.rows_failed": report.failed,
                    "kimi_extract.retries": report.retries,
                    "kimi_extract.throttles": report.throttles,
                    "kimi_extract.from_store": report.from_store,
                    "kimi_extract.requests": report.usage.requests,
                    **_usage_attributes(report.usage),
                }
            )
        if event.error is not None:
            span.set_status(Status(StatusCode.ERROR, event.error))
        span.end()

    # -- rows -------------------------------------------------------------------------------

    def on_row_start(self, event: RowStart) -> None:
        """Open a row's span under its run's."""
        attributes = {
            **self._common(event),
            "kimi_extract.run_id": event.run_id,
            "kimi_extract.row": event.row,
            "kimi_extract.label": _label(event.label),
        }
        parent = self._spans.get((event.run_id,))
        self._start((event.run_id, event.row), "kimi_extract.row", parent, attributes=attributes)

    def on_retry(self, event: Retry) -> None:
        """A retry: an event on the row's span."""
        span = self._spans.get((event.run_id, event.row))
        if span is None:
            return
        attributes: dict[str, Any] = {
            "kimi_extract.request": event.request,
            "kimi_extract.attempt": event.attempt,
            "kimi_extract.wait_s": event.wait_s,
            "kimi_extract.rate_limited": event.rate_limited,
            "error.type": event.error_type,
        }
        if event.status is not None:
            attributes["http.response.status_code"] = event.status
        if event.retry_after is not None:
            attributes["kimi_extract.retry_after"] = event.retry_after
        span.add_event("kimi_extract.retry", attributes)

    def on_reask(self, event: Reask) -> None:
        """A reask: an event on the row's span (the errors with ``capture_content``)."""
        span = self._spans.get((event.run_id, event.row))
        if span is None:
            return
        attributes: dict[str, Any] = {
            "kimi_extract.request": event.request,
            "kimi_extract.reask": event.reask,
            "kimi_extract.reask.kind": event.kind,
            "kimi_extract.reask.error_count": event.error_count,
        }
        if event.errors is not None:
            attributes["kimi_extract.reask.errors"] = list(event.errors)
        span.add_event("kimi_extract.reask", attributes)

    def on_row_end(self, event: RowEnd) -> None:
        """Close a row's span with its outcome and usage."""
        span = self._spans.pop((event.run_id, event.row), None)
        if span is None:
            return
        span.set_attributes(
            {
                "kimi_extract.ok": event.ok,
                "kimi_extract.store_hit": event.from_store,
                "kimi_extract.requests": event.requests,
                "kimi_extract.attempts": event.attempts,
                "kimi_extract.reasks": event.reasks,
                "kimi_extract.latency_s": event.latency_s,
                **_usage_attributes(event.usage),
            }
        )
        if event.error is not None:
            span.set_attribute("error.type", event.error.split(":", 1)[0])
            span.set_status(Status(StatusCode.ERROR, event.error))
        span.end()

    # -- attempts ---------------------------------------------------------------------------

    def on_attempt(self, event: Attempt) -> None:
        """Open an attempt's span (GenAI inference span) under its row's."""
        attributes: dict[str, Any] = {
            **self._common(event),
            "gen_ai.request.stream": event.stream,
            "gen_ai.output.type": "json",
            "kimi_extract.row": event.row,
            "kimi_extract.request": event.request,
            "kimi_extract.attempt": event.attempt,
            "kimi_extract.prompt_tokens_estimate": event.prompt_tokens,
        }
        if event.messages is not None:
            attributes["gen_ai.input.messages"] = json.dumps(event.messages, ensure_ascii=False)
        key = (event.run_id, event.row, event.request, event.attempt)
        parent = self._spans.get((event.run_id, event.row))
        self._start(
            key,
            f"{OPERATION} {event.model}",
            parent,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )

    def on_response(self, event: Response) -> None:
        """Close an attempt's span: the answer's id, finish reason and usage, or the error;
        record the metrics."""
        key = (event.run_id, event.row, event.request, event.attempt)
        span = self._spans.pop(key, None)
        common = self._common(event)
        if event.ok:
            usage = event.usage
            self._token_usage.record(usage.prompt_tokens, {**common, "gen_ai.token.type": "input"})
            self._token_usage.record(
                usage.completion_tokens, {**common, "gen_ai.token.type": "output"}
            )
            for kind, count in (
                ("input", usage.prompt_tokens),
                ("output", usage.completion_tokens),
                ("cached", usage.cached_tokens),
                ("cache_write", usage.cache_write_tokens),
                ("reasoning", usage.reasoning_tokens),
            ):
                self._tokens.add(count, {**common, "kimi_extract.token.type": kind})
            self._cost.add(usage.cost, common)
            self._duration.record(event.latency_s, common)
        else:
            self._duration.record(event.latency_s, {**common, "error.type": event.error_type})
        if span is None:
            return
        if event.status is not None:
            span.set_attribute("http.response.status_code", event.status)
        if event.ok:
            attributes: dict[str, Any] = {**_usage_attributes(event.usage)}
            if event.response_id:
                attributes["gen_ai.response.id"] = event.response_id
            if event.finish_reason:
                attributes["gen_ai.response.finish_reasons"] = [event.finish_reason]
            if event.content is not None:
                message = {"role": "assistant", "content": event.content}
                if event.reasoning:
                    message["reasoning_content"] = event.reasoning
                attributes["gen_ai.output.messages"] = json.dumps([message], ensure_ascii=False)
            span.set_attributes(attributes)
        else:
            span.set_attribute("error.type", event.error_type or "error")
            span.set_attribute("kimi_extract.billing_unknown", event.billing_unknown)
            span.set_status(Status(StatusCode.ERROR, event.error))
        span.end()
