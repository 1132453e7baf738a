"""Host routing: media requests to the multimodal host, text to the direct host, failover."""

from __future__ import annotations

import io
import socket
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from PIL import Image
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.exceptions import APIConnectionError, BadRequestError, ServerError
from kimi_extract.http import routing
from kimi_extract.http.routing import Router, has_media, is_host_failure
from kimi_extract.simulator import Simulator
from kimi_extract.testing import VirtualClock

from ..conftest import chat_requests

TEXT_BODY = {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]}
IMAGE_BODY = {
    "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a"}}]}
    ]
}
VIDEO_BODY = {
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "video_url", "video_url": {"url": "https://x/v.mp4"}},
                {"type": "text", "text": "what happens?"},
            ],
        }
    ]
}


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (40, 30), (9, 99, 199)).save(out, "PNG")
    return out.getvalue()


def closed_port_url() -> str:
    """A loopback URL where nothing listens: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# -- the router alone ----------------------------------------------------------------------------


def test_media_bodies_go_to_the_multimodal_host_and_text_to_the_direct_host():
    router = Router()
    assert router.text_url == "https://direct.evolink.ai"
    assert router.media_url == "https://api.evolink.ai"
    assert not has_media(TEXT_BODY) and has_media(IMAGE_BODY) and has_media(VIDEO_BODY)
    assert router.base_url_for(TEXT_BODY) == "https://direct.evolink.ai"
    assert router.base_url_for(IMAGE_BODY) == "https://api.evolink.ai"
    assert router.base_url_for(VIDEO_BODY) == "https://api.evolink.ai"
    text_parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}
    assert router.base_url_for(text_parts) == "https://direct.evolink.ai"


def test_explicit_base_url_takes_everything_and_never_fails_over():
    router = Router("http://proxy.local", failover_after=1)
    for _ in range(5):
        router.report("http://proxy.local", APIConnectionError("refused"))
    assert router.base_url_for(TEXT_BODY) == router.base_url_for(IMAGE_BODY) == "http://proxy.local"
    assert router.failovers == 0


def test_failover_after_consecutive_host_failures_and_back_after_the_cooldown():
    clock = VirtualClock(100.0)
    router = Router(text_url="T", media_url="M", failover_after=3, cooldown_s=60, clock=clock)
    router.report("T", ServerError("boom", status=503))
    router.report("T", APIConnectionError("reset"))
    router.report("T", None)  # an answer: the count starts over
    router.report("T", ServerError("boom", status=500))
    router.report("T", ServerError("boom", status=502))
    assert router.base_url_for(TEXT_BODY) == "T" and router.failovers == 0
    router.report("T", APIConnectionError("refused"))
    assert router.failovers == 1 and not router.healthy("T")
    assert router.base_url_for(TEXT_BODY) == "M"  # text fails over to the multimodal host
    assert router.base_url_for(IMAGE_BODY) == "M"
    clock.time += 59
    assert router.base_url_for(TEXT_BODY) == "M"
    clock.time += 2
    assert router.base_url_for(TEXT_BODY) == "T"  # cool-down over: the preferred host again
    router.report("T", APIConnectionError("still down"))  # one more failure sets it aside again
    assert router.base_url_for(TEXT_BODY) == "M" and router.failovers == 2


def test_only_connection_errors_and_5xx_count_as_host_failures():
    assert is_host_failure(APIConnectionError("refused"))
    assert is_host_failure(ServerError("x", status=500))
    assert not is_host_failure(ServerError("timeout", status=408))
    assert not is_host_failure(ServerError("malformed body", status=200))
    assert not is_host_failure(kx.RateLimitError("slow down", status=429))
    assert not is_host_failure(BadRequestError("bad", status=400))
    assert not is_host_failure(None)
    router = Router(text_url="T", media_url="M", failover_after=1)
    router.report("T", kx.RateLimitError("slow down", status=429))
    assert router.base_url_for(TEXT_BODY) == "T"


def test_both_hosts_down_uses_the_one_back_first():
    clock = VirtualClock(100.0)
    router = Router(text_url="T", media_url="M", failover_after=1, cooldown_s=60, clock=clock)
    router.report("M", APIConnectionError("down"))
    clock.time += 10
    router.report("T", APIConnectionError("down"))
    assert router.base_url_for(TEXT_BODY) == "M" and router.base_url_for(IMAGE_BODY) == "M"


# -- through an Extractor, against two local hosts -----------------------------------------------


@pytest.fixture
def hosts(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Simulator, Simulator]]:
    """Two simulators standing in for direct.evolink.ai (text) and api.evolink.ai (media)."""
    monkeypatch.delenv("KIMI_BASE_URL", raising=False)
    with Simulator() as text_host, Simulator() as media_host:
        monkeypatch.setattr(routing, "TEXT_BASE_URL", text_host.base_url)
        monkeypatch.setattr(routing, "MEDIA_BASE_URL", media_host.base_url)
        yield text_host, media_host


class Caption(BaseModel):
    caption: str


def extractor(**options: Any) -> kx.Extractor[Any]:
    options.setdefault("api_key", Simulator().api_key)
    return kx.Extractor(Caption, progress=False, cache_warm=False, max_retry_wait=0.05, **options)


def _mixed_frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "note": ["text 0", "image 1", "text 2", "image 3"],
            "img": [None, png(), None, "https://example.com/cat.png"],
        }
    )


def test_an_extractor_routes_each_request_by_its_content(hosts):
    text_host, media_host = hosts
    out = extractor().run(_mixed_frame(), text="note", images="img")
    assert out["kx_error"].isna().all()
    assert sorted(h.body["messages"][-1]["content"] for h in chat_requests(text_host)) == [
        "text 0",
        "text 2",
    ]
    media_texts = sorted(
        h.body["messages"][-1]["content"][-1]["text"] for h in chat_requests(media_host)
    )
    assert media_texts == ["image 1", "image 3"]


def test_explicit_base_url_and_env_override_routing(hosts, monkeypatch):
    text_host, media_host = hosts
    with Simulator() as proxy:
        out = extractor(base_url=proxy.base_url).run(_mixed_frame(), text="note", images="img")
        assert out["kx_error"].isna().all() and len(chat_requests(proxy)) == 4
        monkeypatch.setenv("KIMI_BASE_URL", proxy.base_url)
        extractor().run(_mixed_frame(), text="note", images="img")
        assert len(chat_requests(proxy)) == 8
    assert chat_requests(text_host) == [] and chat_requests(media_host) == []


def test_a_failing_text_host_fails_over_to_the_multimodal_host(monkeypatch):
    monkeypatch.delenv("KIMI_BASE_URL", raising=False)
    with Simulator(fault_500=1.0) as broken, Simulator() as media_host:
        monkeypatch.setattr(routing, "TEXT_BASE_URL", broken.base_url)
        monkeypatch.setattr(routing, "MEDIA_BASE_URL", media_host.base_url)
        ex = extractor(concurrency=1)
        out = ex.run(["first", "second", "third"])
        assert out["kx_error"].isna().all()
        # The first row tried the text host FAILOVER_AFTER times, then moved; later rows went
        # straight to the other host. No attempt was added by failing over.
        assert len(chat_requests(broken)) == routing.FAILOVER_AFTER
        assert len(chat_requests(media_host)) == 3
        assert ex.last_run is not None and ex.last_run.retries == routing.FAILOVER_AFTER
        assert ex.router.failovers == 1


def test_connection_refused_on_the_media_host_fails_over_to_the_text_host(monkeypatch):
    monkeypatch.delenv("KIMI_BASE_URL", raising=False)
    with Simulator() as text_host:
        monkeypatch.setattr(routing, "TEXT_BASE_URL", text_host.base_url)
        monkeypatch.setattr(routing, "MEDIA_BASE_URL", closed_port_url())
        frame = pd.DataFrame({"note": ["a", "b"], "img": [png(), png()]})
        out = extractor(concurrency=1).run(frame, text="note", images="img")
        assert out["kx_error"].isna().all()
        assert [
            h.body["messages"][-1]["content"][-1]["text"] for h in chat_requests(text_host)
        ] == [
            "a",
            "b",
        ]


def test_without_enough_retries_the_row_fails_but_later_rows_use_the_other_host(monkeypatch):
    monkeypatch.delenv("KIMI_BASE_URL", raising=False)
    with Simulator() as media_host:
        monkeypatch.setattr(routing, "TEXT_BASE_URL", closed_port_url())
        monkeypatch.setattr(routing, "MEDIA_BASE_URL", media_host.base_url)
        ex = extractor(concurrency=1, max_retries=1)
        out = ex.run(["one", "two", "three"])
        # Row 0: two refused attempts, then out of retries. Row 1: the third refusal sets the
        # text host aside and its retry goes to the media host. Row 2: straight there.
        assert out["kx_error"].notna().tolist() == [True, False, False]
        assert "APIConnectionError" in out.loc[0, "kx_error"]
        assert [h.body["messages"][-1]["content"] for h in chat_requests(media_host)] == [
            "two",
            "three",
        ]


def test_an_explicit_failing_host_is_not_failed_over(monkeypatch):
    with Simulator() as other:
        monkeypatch.setattr(routing, "TEXT_BASE_URL", other.base_url)
        monkeypatch.setattr(routing, "MEDIA_BASE_URL", other.base_url)
        out = extractor(base_url=closed_port_url(), max_retries=3).run(["x"])
        assert out["kx_error"].notna().all() and chat_requests(other) == []
