"""Media cells: every image and video form, what travels in the request, and what fails per row."""

from __future__ import annotations

import base64
import http.server
import io
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from jsonschema import Draft202012Validator
from PIL import Image

from kimi_extract import tokens
from kimi_extract.exceptions import ConfigurationError, InputError, MediaError, install_hint
from kimi_extract.media.formats import exif_orientation, image_size, sniff_video_mime
from kimi_extract.media.parts import (
    DEFAULT_MAX_IMAGE_PIXELS,
    MediaOptions,
    image_url,
    media_options,
    media_parts,
    video_url,
)
from kimi_extract.run.inputs import prepare
from kimi_extract.simulator.validation import component_schema

from ..conftest import chat_requests

CONTENT_PART = Draft202012Validator(component_schema("ContentPart"))

# Minimal containers: enough header bytes for the magic-byte sniffing.
MP4 = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2" + b"\x00" * 4000
MOV = b"\x00\x00\x00\x14ftypqt  \x00\x00\x02\x00qt  " + b"\x00" * 3000
WEBM = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\x82\x84webm" + b"\x00" * 2000


def encode(image: Image.Image, fmt: str, **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def picture(size: tuple[int, int] = (60, 40), color: Any = (200, 30, 30), mode: str = "RGB"):
    return Image.new(mode, size, color)


def decode(url: str) -> tuple[str, bytes]:
    header, _, payload = url.partition(",")
    return header[5:].split(";")[0], base64.b64decode(payload)


def opened(url: str) -> Image.Image:
    return Image.open(io.BytesIO(decode(url)[1]))


def sent_parts(sim) -> list[list[dict[str, Any]]]:
    """The user message's content parts of every chat request, in arrival order."""
    return [h.body["messages"][-1]["content"] for h in chat_requests(sim)]


def assert_valid_parts(parts: list[dict[str, Any]]) -> None:
    for part in parts:
        errors = list(CONTENT_PART.iter_errors(part))
        assert not errors, (part["type"], errors[0].message)


# -- every form, through the simulator ---------------------------------------------------------


def test_every_image_form_travels_as_a_valid_image_part(sim, make_extractor, tmp_path):
    png = encode(picture(), "PNG")
    path = tmp_path / "p.png"
    path.write_bytes(png)
    jpeg = encode(picture((30, 20)), "JPEG")
    cells: list[Any] = [
        str(path),
        path,
        png,
        picture((28, 56)),
        np.zeros((10, 20, 3), dtype=np.uint8),
        "data:image/jpeg;base64," + base64.b64encode(jpeg).decode(),
        "https://example.com/cat.png",
        [str(path), "https://example.com/dog.jpg"],
    ]
    frame = pd.DataFrame({"note": [f"row {i}" for i in range(len(cells))], "img": cells})
    out = make_extractor().run(frame, text="note", images="img")
    assert out["kx_error"].isna().all()
    by_text = {parts[-1]["text"]: parts for parts in sent_parts(sim)}
    for parts in by_text.values():
        assert_valid_parts(parts)
        assert parts[-1]["type"] == "text" and parts[0]["type"] == "image_url"
    urls = {text: [p["image_url"]["url"] for p in parts[:-1]] for text, parts in by_text.items()}
    # Small web-format images travel byte for byte.
    assert decode(urls["row 0"][0]) == ("image/png", png)
    assert urls["row 1"] == urls["row 0"] and urls["row 2"] == urls["row 0"]
    assert opened(urls["row 3"][0]).size == (28, 56)
    assert opened(urls["row 4"][0]).size == (20, 10)
    assert urls["row 5"] == ["data:image/jpeg;base64," + base64.b64encode(jpeg).decode()]
    assert urls["row 6"] == ["https://example.com/cat.png"]
    assert urls["row 7"] == [urls["row 0"][0], "https://example.com/dog.jpg"]
    # The simulator billed the in-memory image by its pixel size (read from the sent header).
    prompt = {
        h.body["messages"][-1]["content"][-1]["text"]: h.usage["prompt_tokens"]
        for h in chat_requests(sim)
    }
    assert prompt["row 6"] - prompt["row 3"] == tokens.image_tokens(None, None) - (
        tokens.image_tokens(28, 56)
    )


def test_small_web_formats_pass_unchanged_and_keep_their_mime():
    image = picture((50, 30))
    for fmt, mime in (
        ("PNG", "image/png"),
        ("JPEG", "image/jpeg"),
        ("WEBP", "image/webp"),
        ("GIF", "image/gif"),
    ):
        data = encode(image, fmt)
        assert decode(image_url(data)) == (mime, data)
        assert image_size(data) == (50, 30)


def test_exif_orientation_is_applied(tmp_path):
    upright = Image.new("RGB", (40, 60), (220, 20, 20))
    upright.paste((20, 20, 220), (0, 30, 40, 60))  # top red, bottom blue
    exif = Image.Exif()
    exif[0x0112] = 6  # stored turned 90 degrees; viewers rotate it back clockwise
    stored = encode(upright.transpose(Image.Transpose.ROTATE_90), "JPEG", exif=exif.tobytes())
    assert exif_orientation(stored) == 6 and image_size(stored) == (60, 40)
    sent = opened(image_url(stored))
    assert sent.size == (40, 60)
    top, bottom = sent.getpixel((20, 5)), sent.getpixel((20, 55))
    assert top[0] > 150 > top[2] and bottom[2] > 150 > bottom[0]
    assert sent.getexif().get(0x0112) in (None, 1)
    # PNG (eXIf chunk) and WebP (EXIF chunk) orientations are read without Pillow too.
    for fmt in ("PNG", "WEBP"):
        data = encode(upright.transpose(Image.Transpose.ROTATE_90), fmt, exif=exif.tobytes())
        assert exif_orientation(data) == 6
        assert opened(image_url(data)).size == (40, 60)


def test_large_images_are_downscaled_to_max_image_pixels():
    big = Image.new("RGB", (3000, 2000), (10, 120, 200))
    for fmt, mime in (("PNG", "image/png"), ("JPEG", "image/jpeg")):
        sent_mime, data = decode(image_url(encode(big, fmt)))
        width, height = Image.open(io.BytesIO(data)).size
        assert sent_mime == mime
        assert width * height <= DEFAULT_MAX_IMAGE_PIXELS and width * height > 0.98 * (
            DEFAULT_MAX_IMAGE_PIXELS
        )
        assert abs(width / height - 1.5) < 0.01
    with media_options(max_image_pixels=100_000):
        assert opened(image_url(encode(big, "PNG"))).size == (387, 258)
    with media_options(max_image_pixels=None):
        assert opened(image_url(encode(big, "JPEG"))).size == (3000, 2000)
    with pytest.raises(ConfigurationError, match="max_image_pixels"):
        MediaOptions(max_image_pixels=100)


def test_other_formats_are_converted(tmp_path):
    bmp = tmp_path / "photo.bmp"
    picture((64, 48)).save(bmp)
    mime, data = decode(image_url(bmp))
    assert mime == "image/jpeg" and Image.open(io.BytesIO(data)).size == (64, 48)
    tiff = encode(picture((32, 32), (0, 200, 0, 128), mode="RGBA"), "TIFF")
    mime, data = decode(image_url(tiff))
    assert mime == "image/png" and Image.open(io.BytesIO(data)).mode == "RGBA"
    # A gif over the limit is downscaled to a png (its first frame).
    with media_options(max_image_pixels=1000):
        mime, data = decode(image_url(encode(picture((100, 100)).convert("P"), "GIF")))
    assert mime == "image/png" and Image.open(io.BytesIO(data)).size == (31, 31)


def test_numpy_and_pil_inputs():
    gray = np.full((8, 16, 1), 128, dtype=np.uint8)
    assert opened(image_url(gray)).size == (16, 8)
    assert opened(image_url(np.ones((4, 4), dtype=bool))).size == (4, 4)
    with pytest.raises(MediaError, match="uint8"):
        image_url(np.zeros((4, 4), dtype=np.float32))
    with pytest.raises(MediaError, match="shape"):
        image_url(np.zeros((4, 4, 2), dtype=np.uint8))
    rgba = picture((10, 10), (1, 2, 3, 4), mode="RGBA")
    assert decode(image_url(rgba))[0] == "image/png"
    # An object array (a list cell read back from parquet) is a list of images.
    cell = np.array(["https://x/a.png", "https://x/b.png"], dtype=object)
    assert [p["image_url"]["url"] for p in media_parts(cell)] == list(cell)


def test_corrupt_media_is_that_rows_error_only(sim, make_extractor, tmp_path):
    good = encode(picture(), "PNG")
    truncated = good[: len(good) // 2]
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    frame = pd.DataFrame(
        {
            "note": ["ok", "truncated", "garbage", "not found", "wrong type"],
            "img": [good, truncated, str(tmp_path / "broken.jpg"), str(tmp_path / "no.png"), 12],
        }
    )
    out = make_extractor().run(frame, text="note", images="img")
    assert out["kx_error"].isna().tolist() == [True, False, False, False, False]
    assert "MediaError" in out.loc[1, "kx_error"] and "not found" in out.loc[3, "kx_error"]
    assert [parts[-1]["text"] for parts in sent_parts(sim)] == ["ok"]
    assert out.loc[1:, "kx_prompt_tokens"].sum() == 0


def test_without_pillow_web_images_still_work_and_others_say_how_to_install(monkeypatch):
    small = encode(picture((40, 40)), "PNG")
    big = encode(Image.new("RGB", (1100, 1000)), "PNG")
    bmp = encode(picture(), "BMP")
    monkeypatch.setitem(sys.modules, "PIL", None)  # `from PIL import Image` now raises
    assert decode(image_url(small)) == ("image/png", small)
    with pytest.raises(MediaError, match=re.escape(install_hint("images"))) as info:
        image_url(big)
    assert "downscaling" in str(info.value)
    with pytest.raises(MediaError, match=r"converting other formats needs Pillow"):
        image_url(bmp)


# -- videos --------------------------------------------------------------------------------------


def test_video_forms_become_video_parts(sim, make_extractor, tmp_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(MP4)
    image = encode(picture(), "PNG")
    frame = pd.DataFrame(
        {
            "note": ["path", "bytes", "data url", "url", "mixed"],
            "media": [
                str(clip),
                MOV,
                "data:video/webm;base64," + base64.b64encode(WEBM).decode(),
                "https://example.com/talk.webm?x=1",
                [image, clip],
            ],
        }
    )
    out = make_extractor().run(frame, text="note", images="media")
    assert out["kx_error"].isna().all()
    by_text = {parts[-1]["text"]: parts for parts in sent_parts(sim)}
    for parts in by_text.values():
        assert_valid_parts(parts)
    mime = {
        t: decode(p[0]["video_url"]["url"])[0]
        for t, p in by_text.items()
        if t in ("path", "bytes", "data url")
    }
    assert mime == {"path": "video/mp4", "bytes": "video/mov", "data url": "video/webm"}
    assert by_text["url"][0] == {
        "type": "video_url",
        "video_url": {"url": "https://example.com/talk.webm?x=1"},
    }
    assert [p["type"] for p in by_text["mixed"]] == ["image_url", "video_url", "text"]
    # The simulator bills a video by its decoded size.
    usage = {
        h.body["messages"][-1]["content"][-1]["text"]: h.usage["prompt_tokens"]
        for h in chat_requests(sim)
    }
    assert usage["url"] > usage["path"]  # an unknown remote video counts as the default size


def test_videos_column_and_size_limit(tmp_path):
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(MP4)
    frame = pd.DataFrame({"note": ["a", "b", "c"], "clip": [str(clip), None, "https://x/v"]})
    rows = list(prepare(frame, text="note", videos="clip").rows)
    assert rows[0].content[0]["type"] == "video_url"
    assert rows[1].content == "b"
    assert rows[2].content[0] == {"type": "video_url", "video_url": {"url": "https://x/v"}}
    with pytest.raises(InputError, match="videos column"):
        prepare(frame, text="note", videos="nope")
    small = MediaOptions(max_video_bytes=1000)
    rows = list(prepare(frame, text="note", videos="clip", media=small).rows)
    assert isinstance(rows[0].error, MediaError) and "limit" in str(rows[0].error)
    with pytest.raises(MediaError, match="limit"):
        video_url("data:video/mp4;base64," + base64.b64encode(MP4).decode(), small)
    with pytest.raises(MediaError, match="not a supported video"):
        video_url(b"plain bytes")


def test_sniff_video_mime():
    assert sniff_video_mime(MP4) == "video/mp4"
    assert sniff_video_mime(MOV) == "video/mov"
    assert sniff_video_mime(WEBM) == "video/webm"
    assert sniff_video_mime(b"\x00\x00\x00\x14ftyp3gp5") == "video/3gpp"
    assert sniff_video_mime(b"RIFF\x00\x00\x00\x00AVI LIST") == "video/avi"
    assert sniff_video_mime(b"FLV\x01\x05") == "video/x-flv"
    assert sniff_video_mime(bytes.fromhex("3026b2758e66cf11a6d9")) == "video/wmv"
    assert sniff_video_mime(b"\x00\x00\x01\xba\x44") == "video/mpeg"
    assert sniff_video_mime(b"\x1a\x45\xdf\xa3\x9f\x42\x82\x88matroska") is None
    assert sniff_video_mime(b"\x89PNG\r\n\x1a\n") is None


# -- fetch_urls ---------------------------------------------------------------------------------


class _Files(http.server.BaseHTTPRequestHandler):
    files: dict[str, tuple[str, bytes]] = {}

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.path == "/slow.png":
            time.sleep(1.0)
        if self.path not in self.files and self.path != "/slow.png":
            self.send_error(404)
            return
        content_type, body = self.files.get(self.path, ("image/png", b""))
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client stopped reading at its size limit

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def file_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_urls_downloads_and_inlines(sim, make_extractor, file_server):
    big = encode(Image.new("RGB", (2000, 1000), (5, 5, 5)), "PNG")
    _Files.files = {
        "/big.png": ("image/png", big),
        "/clip": ("video/mp4", MP4),
        "/small.gif": ("image/gif", encode(picture(), "GIF")),
    }
    urls = [f"{file_server}/big.png", f"{file_server}/clip", f"{file_server}/small.gif"]
    frame = pd.DataFrame({"note": ["big", "clip", "gif"], "img": urls})
    with media_options(fetch_urls=True, allow_private_urls=True):  # the server is on loopback
        out = make_extractor().run(frame, text="note", images="img")
    assert out["kx_error"].isna().all()
    by_text = {parts[-1]["text"]: parts for parts in sent_parts(sim)}
    for parts in by_text.values():
        assert_valid_parts(parts)
    width, height = opened(by_text["big"][0]["image_url"]["url"]).size
    assert width * height <= DEFAULT_MAX_IMAGE_PIXELS and width == 2 * height
    assert by_text["clip"][0]["video_url"]["url"].startswith("data:video/mp4;base64,")
    assert decode(by_text["gif"][0]["image_url"]["url"])[0] == "image/gif"
    # Without fetch_urls the URL itself is sent.
    assert image_url(urls[0]) == urls[0]


def test_fetch_urls_limits_timeouts_and_http_errors(file_server):
    _Files.files = {"/big.png": ("image/png", encode(picture((300, 300)), "PNG"))}
    fetching = MediaOptions(fetch_urls=True, allow_private_urls=True)
    with pytest.raises(MediaError, match="limit"):
        image_url(f"{file_server}/big.png", replace(fetching, max_fetch_bytes=100))
    with pytest.raises(MediaError, match="timed out"):
        image_url(f"{file_server}/slow.png", replace(fetching, fetch_timeout=0.2))
    with pytest.raises(MediaError, match="HTTP 404"):
        image_url(f"{file_server}/missing.png", fetching)


# -- Extractor options ----------------------------------------------------------------------------


def test_extractor_max_image_pixels_and_fetch_urls(sim, make_extractor, file_server):
    big = encode(Image.new("RGB", (1200, 900), (40, 80, 120)), "PNG")
    _Files.files = {"/big.png": ("image/png", big)}
    frame = pd.DataFrame({"note": ["bytes", "url"], "img": [big, f"{file_server}/big.png"]})

    ex = make_extractor(max_image_pixels=40_000)
    assert ex.config.media == MediaOptions(max_image_pixels=40_000, fetch_urls=False)
    ex.run(frame, text="note", images="img")
    by_text = {parts[-1]["text"]: parts for parts in sent_parts(sim)}
    width, height = opened(by_text["bytes"][0]["image_url"]["url"]).size
    assert width * height <= 40_000 and abs(width / height - 4 / 3) < 0.02
    assert by_text["url"][0]["image_url"]["url"] == f"{file_server}/big.png"  # passed through

    sim.reset()
    make_extractor(fetch_urls=True, allow_private_urls=True, max_image_pixels=None).run(
        frame, text="note", images="img"
    )
    by_text = {parts[-1]["text"]: parts for parts in sent_parts(sim)}
    assert decode(by_text["url"][0]["image_url"]["url"]) == ("image/png", big)  # fetched, as is
    assert decode(by_text["bytes"][0]["image_url"]["url"]) == ("image/png", big)

    # A media_options block overrides the extractor's settings for runs started inside it.
    sim.reset()
    with media_options(max_image_pixels=10_000):
        ex.run(frame.iloc[:1], text="note", images="img")
    (parts,) = sent_parts(sim)
    width, height = opened(parts[0]["image_url"]["url"]).size
    assert width * height <= 10_000
    with pytest.raises(ConfigurationError, match="max_image_pixels"):
        make_extractor(max_image_pixels=10)


def test_extract_one_row_with_images_uses_the_extractor_options(sim, make_extractor):
    big = encode(Image.new("RGB", (800, 800)), "JPEG")
    make_extractor(max_image_pixels=20_000).extract("describe", images=[big, big])
    (parts,) = sent_parts(sim)
    assert [p["type"] for p in parts] == ["image_url", "image_url", "text"]
    assert_valid_parts(parts)
    assert all(opened(p["image_url"]["url"]).size == (141, 141) for p in parts[:2])


def test_converted_rotated_and_downscaled_images_in_the_request(sim, make_extractor, tmp_path):
    bmp = tmp_path / "scan.bmp"
    picture((64, 48)).save(bmp)
    exif = Image.Exif()
    exif[0x0112] = 8
    rotated = encode(picture((60, 40)), "JPEG", exif=exif.tobytes())
    tiff = encode(picture((30, 30), (0, 200, 0, 128), mode="RGBA"), "TIFF")
    big = encode(Image.new("RGB", (2400, 1600)), "JPEG")
    frame = pd.DataFrame({"note": ["bmp", "exif", "tiff", "big"], "img": [bmp, rotated, tiff, big]})
    out = make_extractor().run(frame, text="note", images="img")
    assert out["kx_error"].isna().all()
    by_text = {parts[-1]["text"]: parts for parts in sent_parts(sim)}
    for parts in by_text.values():
        assert_valid_parts(parts)
    sent = {t: decode(p[0]["image_url"]["url"]) for t, p in by_text.items()}
    assert {t: mime for t, (mime, _) in sent.items()} == {
        "bmp": "image/jpeg",
        "exif": "image/jpeg",
        "tiff": "image/png",
        "big": "image/jpeg",
    }
    sizes = {t: Image.open(io.BytesIO(data)).size for t, (_, data) in sent.items()}
    assert sizes["bmp"] == (64, 48) and sizes["exif"] == (40, 60) and sizes["tiff"] == (30, 30)
    assert sizes["big"][0] * sizes["big"][1] <= DEFAULT_MAX_IMAGE_PIXELS
    # The simulator bills the downscaled size, not the original 2400 x 1600.
    usage = {
        h.body["messages"][-1]["content"][-1]["text"]: h.usage["prompt_tokens"]
        for h in chat_requests(sim)
    }
    assert usage["big"] - usage["bmp"] == tokens.image_tokens(*sizes["big"]) - (
        tokens.image_tokens(64, 48)
    )


def test_without_pillow_a_run_fails_only_the_rows_that_need_it(sim, make_extractor, monkeypatch):
    small = encode(picture((40, 40)), "PNG")
    bmp = encode(picture(), "BMP")
    monkeypatch.setitem(sys.modules, "PIL", None)
    frame = pd.DataFrame({"note": ["png", "bmp", "text"], "img": [small, bmp, None]})
    out = make_extractor().run(frame, text="note", images="img")
    assert out["kx_error"].isna().tolist() == [True, False, True]
    assert install_hint("images") in out.loc[1, "kx_error"]
    assert sorted(text_of(h) for h in chat_requests(sim)) == ["png", "text"]


def text_of(exchange: Any) -> str:
    content = exchange.body["messages"][-1]["content"]
    return content if isinstance(content, str) else content[-1]["text"]


async def test_media_encoding_does_not_block_the_event_loop(sim, make_extractor, monkeypatch):
    import asyncio

    import kimi_extract.run.inputs as inputs_module

    real_parts = inputs_module.media_parts
    window: list[float] = []

    def slow_encode(value: Any, *args: Any, **kwargs: Any) -> Any:
        if value == "slow.png":
            window.append(time.monotonic())
            time.sleep(0.5)  # a big decode or a slow download
            window.append(time.monotonic())
            value = encode(picture(), "PNG")
        return real_parts(value, *args, **kwargs)

    monkeypatch.setattr(inputs_module, "media_parts", slow_encode)
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    png = encode(picture(), "PNG")
    frame = pd.DataFrame({"photo": [png] * 3 + ["slow.png"] + [png] * 3})
    tick_task = asyncio.create_task(ticker())
    try:
        out = await make_extractor(concurrency=2).arun(frame, images="photo")
    finally:
        tick_task.cancel()
    assert out["kx_error"].isna().all()
    start, end = window
    # The loop kept running while the row was being encoded in a worker thread.
    assert sum(1 for t in ticks if start < t < end) >= 3
