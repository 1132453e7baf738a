"""Input normalization: text specs, templates, images, bad rows."""

from __future__ import annotations

import base64
from pathlib import Path

import pandas as pd
import pytest

from kimi_extract.exceptions import EmptyInputError, InputError, MediaError
from kimi_extract.media.formats import sniff_image_mime
from kimi_extract.run.inputs import (
    image_url,
    image_urls_of,
    prepare,
    template_fields,
)

PNG_1x1 = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def rows_of(prepared):
    return list(prepared.rows)


def test_text_column_keeps_index_and_order():
    df = pd.DataFrame({"review": ["a", "b", "c"]}, index=[10, 5, 7])
    rows = rows_of(prepare(df, text="review"))
    assert [r.label for r in rows] == [10, 5, 7]
    assert [r.content for r in rows] == ["a", "b", "c"]
    assert [r.position for r in rows] == [0, 1, 2]


def test_several_text_columns_are_labelled():
    df = pd.DataFrame({"title": ["T"], "body": ["B"], "other": [1]})
    (row,) = rows_of(prepare(df, text=["title", "body"]))
    assert row.content == "title: T\nbody: B"


def test_template_renders_and_missing_field_is_empty():
    df = pd.DataFrame({"title": ["T", None], "body": ["B", "only body"]})
    rows = rows_of(prepare(df, template="Title: {title}\n{body}"))
    assert rows[0].content == "Title: T\nB"
    assert rows[1].content == "Title: \nonly body"


@pytest.mark.parametrize("value", [None, float("nan"), "", "   ", pd.NA])
def test_empty_text_is_a_row_error(value):
    df = pd.DataFrame({"t": ["ok", value]}, dtype=object)
    rows = rows_of(prepare(df, text="t"))
    assert rows[0].error is None
    assert isinstance(rows[1].error, EmptyInputError)
    assert rows[1].content is None


def test_unknown_column_and_template_field_raise_before_rows():
    df = pd.DataFrame({"a": ["x"]})
    with pytest.raises(InputError, match="'nope'"):
        prepare(df, text="nope")
    with pytest.raises(InputError, match="missing"):
        prepare(df, template="{a} {missing}")
    with pytest.raises(InputError, match="images column"):
        prepare(df, text="a", images="photo")


def test_template_fields_parsing():
    assert template_fields("{a} and {b} and {a}") == ["a", "b"]
    with pytest.raises(InputError):
        template_fields("{} positional")


def test_list_of_str_series_and_dicts():
    rows = rows_of(prepare(["x", "y"]))
    assert [r.content for r in rows] == ["x", "y"]
    series = pd.Series(["p", "q"], index=["a", "b"], name="txt")
    prepared = prepare(series)
    assert list(prepared.frame.columns) == ["txt"]
    assert [r.label for r in prepared.rows] == ["a", "b"]
    rows = rows_of(prepare([{"t": "one", "n": 1}, {"t": "two", "n": 2}], text="t"))
    assert [r.content for r in rows] == ["one", "two"]


def test_mixed_or_unsupported_data_raises():
    with pytest.raises(InputError):
        prepare(["x", {"a": 1}])
    with pytest.raises(InputError):
        prepare("just one string")
    with pytest.raises(InputError):
        prepare(42)


def test_image_path_bytes_dataurl_http_and_list(tmp_path: Path):
    path = tmp_path / "pic.png"
    path.write_bytes(PNG_1x1)
    url = image_url(str(path))
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == PNG_1x1
    assert image_url(path) == url
    assert image_url(PNG_1x1) == url
    assert image_url(url) == url
    assert image_url("https://example.com/a.jpg") == "https://example.com/a.jpg"
    assert image_urls_of([str(path), "http://x/y.png"]) == [url, "http://x/y.png"]
    assert image_urls_of(None) == [] and image_urls_of(float("nan")) == []


def test_image_errors(tmp_path: Path):
    with pytest.raises(MediaError, match="not found"):
        image_url(str(tmp_path / "missing.png"))
    with pytest.raises(MediaError):
        image_url(b"not an image")
    bad = tmp_path / "notes.txt"
    bad.write_text("hello")
    with pytest.raises(MediaError):
        image_url(bad)
    with pytest.raises(MediaError):
        image_url(12)


def test_image_rows_become_content_parts_and_missing_file_is_row_error(tmp_path: Path):
    path = tmp_path / "pic.png"
    path.write_bytes(PNG_1x1)
    df = pd.DataFrame({"note": ["n1", "n2"], "photo": [str(path), str(tmp_path / "gone.png")]})
    rows = rows_of(prepare(df, text="note", images="photo"))
    assert rows[0].content[0]["type"] == "image_url"
    assert rows[0].content[-1] == {"type": "text", "text": "n1"}
    assert isinstance(rows[1].error, MediaError)


def test_sniff_mime():
    assert sniff_image_mime(PNG_1x1) == "image/png"
    assert sniff_image_mime(b"\xff\xd8\xff\xe0rest") == "image/jpeg"
    assert sniff_image_mime(b"GIF89a....") == "image/gif"
    assert sniff_image_mime(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert sniff_image_mime(b"%PDF") is None
