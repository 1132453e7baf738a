"""``kimi_extract.otel``: the span tree and attributes of a run against the simulator, the
metrics, content only on request, and the key in no span, attribute, event or metric.

Spans and metrics go to the SDK's in-memory exporter and reader, through providers given to the
hook (the global ones are left alone).
"""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode  # noqa: E402

import kimi_extract as kx  # noqa: E402
from kimi_extract.otel import OpenTelemetry  # noqa: E402
from kimi_extract.simulator import Reply, Simulator  # noqa: E402
from kimi_extract.testing import VirtualClock, use_clock  # noqa: E402

from ..conftest import Review  # noqa: E402

KEY = "sk-otel-0123456789abcdefSECRET"
TEXTS = ["alpha: the lid works", "beta: the handle broke", "gamma: fine"]


def first_user_text(messages: list[dict[str, Any]]) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def responder():
    """Row "beta" gets an invalid answer first (one reask); "gamma" a 500 first (one retry). Every
    answer quotes the key (a server echoing it), so that content capture has it to remove."""
    seen: dict[str, int] = {}

    def answer(request: Any) -> Reply:
        text = first_user_text(request.messages)
        seen[text] = seen.get(text, 0) + 1
        if text.startswith("beta") and seen[text] == 1:
            return Reply(content={"sentiment": "thrilled", "aspects": [f"key {KEY}"]})
        if text.startswith("gamma") and seen[text] == 1:
            return Reply(status=500, error_message=f"upstream said {KEY}")
        return Reply(content={"sentiment": "positive", "aspects": [text.split(":")[0], KEY]})

    return answer


def traced_run(capture_content: bool, stream: bool = False):
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    hook = OpenTelemetry(
        tracer_provider=tracer_provider,
        meter_provider=meter_provider,
        capture_content=capture_content,
    )
    with Simulator(responder=responder(), api_key=KEY) as sim, use_clock(VirtualClock()):
        ex = kx.Extractor(
            Review,
            base_url=sim.base_url,
            api_key=KEY,
            progress=False,
            hooks=[hook],
            stream=stream,
            concurrency=3,
        )
        frame = ex.run([f"{t} ({KEY})" if t.startswith("alpha") else t for t in TEXTS])
        history = list(sim.history)
    assert ex.last_run is not None
    return ex, frame, ex.last_run, exporter.get_finished_spans(), reader.get_metrics_data(), history


def by_name(spans: Any, name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


@pytest.mark.parametrize("stream", [False, True])
def test_the_span_tree_and_attributes_of_a_three_row_run_with_one_reask(stream):
    ex, frame, report, spans, _, history = traced_run(capture_content=False, stream=stream)
    assert frame["kx_error"].isna().all() and report.ok == 3 and report.retries == 1
    model = ex.config.model
    (run,) = by_name(spans, "kimi_extract.run")
    rows = by_name(spans, "kimi_extract.row")
    attempts = by_name(spans, f"chat {model}")
    assert len(spans) == 1 + len(rows) + len(attempts)
    # The tree: run -> 3 rows -> 5 attempts (beta: the answer and its reask; gamma: the 500 and
    # its retry), all in one trace.
    assert run.parent is None
    assert len(rows) == 3 and all(r.parent.span_id == run.context.span_id for r in rows)
    assert {s.context.trace_id for s in spans} == {run.context.trace_id}
    row_of = {r.context.span_id: r.attributes["kimi_extract.row"] for r in rows}
    assert len(attempts) == len(history) == 5
    assert all(a.parent.span_id in row_of for a in attempts)
    per_row = sorted(
        (
            row_of[a.parent.span_id],
            a.attributes["kimi_extract.request"],
            a.attributes["kimi_extract.attempt"],
        )
        for a in attempts
    )
    assert per_row == [(0, 1, 1), (1, 1, 1), (1, 2, 1), (2, 1, 1), (2, 1, 2)]
    # The GenAI attributes of every attempt.
    for attempt in attempts:
        assert attempt.kind is SpanKind.CLIENT
        assert attempt.attributes["gen_ai.operation.name"] == "chat"
        assert attempt.attributes["gen_ai.system"] == "moonshot_ai"
        assert attempt.attributes["gen_ai.request.model"] == model
        assert attempt.attributes["gen_ai.request.stream"] is stream
    answered = [a for a in attempts if a.status.status_code is not StatusCode.ERROR]
    failed = [a for a in attempts if a.status.status_code is StatusCode.ERROR]
    assert len(answered) == 4 and len(failed) == 1
    assert failed[0].attributes["http.response.status_code"] == 500
    assert failed[0].attributes["error.type"] == "ServerError"
    served = [h for h in history if h.status == 200]
    assert sorted(a.attributes["gen_ai.usage.input_tokens"] for a in answered) == sorted(
        h.usage["prompt_tokens"] for h in served
    )
    assert sorted(a.attributes["gen_ai.usage.output_tokens"] for a in answered) == sorted(
        h.usage["completion_tokens"] for h in served
    )
    ids = {a.attributes["gen_ai.response.id"] for a in answered}
    assert len(ids) == 4 and all(ids)
    assert all(a.attributes["gen_ai.response.finish_reasons"] == ("stop",) for a in answered)
    assert math.isclose(
        sum(a.attributes["kimi_extract.usage.cost"] for a in answered), report.usage.cost
    )
    assert sum(a.attributes["kimi_extract.usage.cached_tokens"] for a in answered) == (
        report.usage.cached_tokens
    )
    # Rows: their outcome and events; beta's reask and gamma's retry.
    rows_by = {r.attributes["kimi_extract.row"]: r for r in rows}
    assert [rows_by[i].attributes["kimi_extract.reasks"] for i in range(3)] == [0, 1, 0]
    assert [rows_by[i].attributes["kimi_extract.attempts"] for i in range(3)] == [1, 2, 2]
    assert all(r.attributes["kimi_extract.ok"] for r in rows)
    assert not any(r.attributes["kimi_extract.store_hit"] for r in rows)
    (reask,) = rows_by[1].events
    assert reask.name == "kimi_extract.reask"
    assert reask.attributes["kimi_extract.reask.kind"] == "validation"
    (retry,) = rows_by[2].events
    assert retry.name == "kimi_extract.retry"
    assert retry.attributes["http.response.status_code"] == 500
    assert sum(r.attributes["gen_ai.usage.input_tokens"] for r in rows) == (
        report.usage.prompt_tokens
    )
    # The run: the report's totals.
    assert run.attributes["kimi_extract.rows_ok"] == 3
    assert run.attributes["kimi_extract.requests"] == report.usage.requests == 4
    assert run.attributes["kimi_extract.retries"] == 1
    assert run.attributes["gen_ai.usage.output_tokens"] == report.usage.completion_tokens


def metric_points(metrics_data: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    for resource in metrics_data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def test_metrics_add_up_to_the_run_report():
    _, _, report, _, metrics_data, _ = traced_run(capture_content=False)
    points = metric_points(metrics_data)
    usage = {p.attributes["gen_ai.token.type"]: p.sum for p in points["gen_ai.client.token.usage"]}
    assert usage == {"input": report.usage.prompt_tokens, "output": report.usage.completion_tokens}
    tokens = {
        p.attributes["kimi_extract.token.type"]: p.value for p in points["kimi_extract.tokens"]
    }
    assert tokens["cached"] == report.usage.cached_tokens
    assert tokens["reasoning"] == report.usage.reasoning_tokens
    assert tokens["input"] == report.usage.prompt_tokens
    (cost,) = points["kimi_extract.cost"]
    assert math.isclose(cost.value, report.usage.cost) and cost.value > 0
    durations = points["gen_ai.client.operation.duration"]
    assert sum(p.count for p in durations) == 5  # every attempt, the failed one included
    assert [p.attributes.get("error.type") for p in durations].count("ServerError") == 1


def everything(spans: Any, metrics_data: Any) -> list[str]:
    """Every text of every span (name, status, attributes, events, resource) and metric."""
    texts = []
    for span in spans:
        texts.append(span.to_json())
    for resource in metrics_data.resource_metrics:
        texts.append(resource.to_json() if hasattr(resource, "to_json") else repr(resource))
    return texts


@pytest.mark.parametrize("stream", [False, True])
def test_content_only_on_request_and_the_key_never(stream):
    _, _, _, blind, blind_metrics, _ = traced_run(capture_content=False, stream=stream)
    _, _, _, seeing, seeing_metrics, _ = traced_run(capture_content=True, stream=stream)
    content = ("gen_ai.input.messages", "gen_ai.output.messages", "kimi_extract.reask.errors")
    for span in blind:
        assert not any(name in span.attributes for name in content)
        assert not any(name in e.attributes for e in span.events for name in content)
    assert not any("the handle broke" in text for text in everything(blind, blind_metrics))
    sent = [s.attributes.get("gen_ai.input.messages") for s in seeing]
    answers = [s.attributes.get("gen_ai.output.messages") for s in seeing]
    assert sum(1 for m in sent if m and "the handle broke" in m) == 2  # beta's two requests
    said = [json.loads(a)[0]["content"] for a in answers if a]
    assert len(said) == 4 and sum('"positive"' in text for text in said) == 3
    for text in sent + answers:
        if text:
            json.loads(text)
    reask_errors = [
        e.attributes["kimi_extract.reask.errors"]
        for s in seeing
        for e in s.events
        if e.name == "kimi_extract.reask"
    ]
    assert len(reask_errors) == 1 and "sentiment" in reask_errors[0][0]
    for text in everything(blind, blind_metrics) + everything(seeing, seeing_metrics):
        assert KEY not in text


def test_only_the_api_is_imported_and_a_copy_starts_afresh():
    code = (
        "import sys, kimi_extract.otel; "
        "print(sorted({m.split('.')[1] for m in sys.modules if m.startswith('opentelemetry.')}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "sdk" not in out.stdout and "metrics" in out.stdout and "trace" in out.stdout
    hook = OpenTelemetry(tracer_provider=TracerProvider(), capture_content=True)
    copy = pickle.loads(pickle.dumps(hook))
    assert copy.capture_content is True and copy._tracer_provider is None


def test_without_the_api_the_import_says_how_to_install_it():
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "try:\n    import kimi_extract.otel\nexcept ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "opentelemetry-api" in out.stdout and "pip install -e '.[otel]'" in out.stdout


def test_a_bad_capture_content_is_refused():
    with pytest.raises(kx.ConfigurationError, match="capture_content"):
        OpenTelemetry(capture_content="yes")  # type: ignore[arg-type]


def test_a_row_from_the_store_is_a_row_span_with_no_attempt(tmp_path):
    store = tmp_path / "store.sqlite3"
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hook = OpenTelemetry(tracer_provider=provider, meter_provider=MeterProvider())
    with Simulator(responder=responder(), api_key=KEY) as sim, use_clock(VirtualClock()):
        options = {"base_url": sim.base_url, "api_key": KEY, "progress": False, "store": store}
        kx.Extractor(Review, **options).run(TEXTS[:1])
        ex = kx.Extractor(Review, hooks=[hook], **options)
        ex.run(TEXTS[:2])
    spans = exporter.get_finished_spans()
    rows = {r.attributes["kimi_extract.row"]: r for r in by_name(spans, "kimi_extract.row")}
    assert [rows[i].attributes["kimi_extract.store_hit"] for i in (0, 1)] == [True, False]
    parents = [a.parent.span_id for a in by_name(spans, f"chat {ex.config.model}")]
    assert rows[0].context.span_id not in parents and parents.count(rows[1].context.span_id) == 2
    assert rows[0].attributes["gen_ai.usage.input_tokens"] == 0
    (run,) = by_name(spans, "kimi_extract.run")
    assert run.attributes["kimi_extract.from_store"] == 1


def test_an_interrupted_run_ends_every_span_it_opened():
    """A run cancelled while its requests hang (what Ctrl-C does): the run, row and attempt
    spans are all ended, with an error status saying so."""
    import asyncio

    from kimi_extract.testing import BASE_URL, ScriptedBackend, use_backend

    arrived = asyncio.Event()

    class Hanging(ScriptedBackend):
        async def post(self, url: str, payload: bytes) -> Any:
            arrived.set()
            await asyncio.sleep(3600)

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hook = OpenTelemetry(tracer_provider=provider, meter_provider=MeterProvider())
    ex = kx.Extractor(Review, base_url=BASE_URL, api_key=KEY, progress=False, hooks=[hook])

    async def main() -> None:
        task = asyncio.create_task(ex.arun(["a", "b"]))
        await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with use_backend(Hanging([])):
        asyncio.run(main())
    spans = exporter.get_finished_spans()
    names = sorted(s.name for s in spans)
    assert names.count("kimi_extract.run") == 1 and names.count("kimi_extract.row") == 2
    assert names.count(f"chat {ex.config.model}") >= 1
    assert all(s.status.status_code is StatusCode.ERROR for s in spans)
    assert all(s.status.description == "interrupted" for s in spans)
    assert hook._spans == {}
