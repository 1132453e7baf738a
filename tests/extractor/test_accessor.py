"""The ``kimi`` pandas accessor: ``df.kimi`` / ``series.kimi`` behave like ``Extractor.run``."""

from __future__ import annotations

import pandas as pd
import pytest

import kimi_extract as kx

from ..conftest import Review, chat_requests, ok_exchanges, usage_sum

REVIEWS = [
    "Battery lasts two days and the screen is bright.",
    "Broke after a week, support never answered.",
    "It is fine. Nothing special about the speakers.",
]


@pytest.fixture
def reviews() -> pd.DataFrame:
    return pd.DataFrame(
        {"review": REVIEWS, "stars": [5, 1, 3]}, index=pd.Index(["a", "b", "c"], name="rid")
    )


def options(sim: kx.Simulator) -> dict[str, object]:
    return {"base_url": sim.base_url, "api_key": sim.api_key, "progress": False}


def without_latency(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns="kx_latency_s")


def test_registered_by_importing_the_package() -> None:
    assert isinstance(pd.DataFrame({"a": ["x"]}).kimi, kx.accessor.KimiFrameAccessor)
    assert isinstance(pd.Series(["x"]).kimi, kx.accessor.KimiSeriesAccessor)


def test_extract_is_extractor_run(sim, reviews):
    out = reviews.kimi.extract(Review, text="review", instructions="Classify.", **options(sim))
    direct = kx.Extractor(Review, instructions="Classify.", **options(sim)).run(
        reviews, text="review"
    )
    pd.testing.assert_frame_equal(without_latency(out), without_latency(direct))
    assert out.index.equals(reviews.index) and out["kx_error"].isna().all()
    assert list(out.columns[:2]) == ["review", "stars"]
    # The Extractor options reached the requests: the instructions are the system prompt.
    system = chat_requests(sim)[0].body["messages"][0]["content"]
    assert system.startswith("Classify.")
    # Both runs were billed alike, and each row once.
    assert len(ok_exchanges(sim)) == 2 * out["kx_attempts"].sum() == 2 * len(reviews)
    assert 2 * out["kx_prompt_tokens"].sum() == usage_sum(sim, "prompt")


def test_extractor_and_run_options_are_split(sim, reviews):
    out = reviews.kimi.extract(
        Review, template="{review} ({stars} stars)", column_prefix="out_", **options(sim)
    )
    assert {"out_sentiment", "out_aspects"} <= set(out.columns)
    users = [h.body["messages"][-1]["content"] for h in chat_requests(sim)]
    expected = [f"{r} ({s} stars)" for r, s in zip(REVIEWS, [5, 1, 3], strict=True)]
    assert sorted(users) == sorted(expected)


def test_a_ready_extractor_keeps_its_report(sim, reviews):
    extractor = kx.Extractor(Review, **options(sim))
    out = reviews.kimi.extract(extractor, text="review")
    assert extractor.last_run is not None and extractor.last_run.ok == len(out) == 3
    with pytest.raises(TypeError, match=r"\['concurrency'\] given with a ready Extractor"):
        reviews.kimi.extract(extractor, text="review", concurrency=2)


def test_unknown_options_are_named(reviews):
    with pytest.raises(TypeError, match=r"unknown option\(s\) 'temperature'"):
        reviews.kimi.extract(Review, text="review", temperature=0.2)
    with pytest.raises(kx.InputError, match="'nope' not found|nope"):
        reviews.kimi.extract(Review, text="nope", api_key="sk-test", progress=False)


def test_validates_the_frame_when_made():
    frame = pd.DataFrame([["x", "y"]], columns=["review", "review"])
    with pytest.raises(kx.InputError, match=r"unique column names; duplicated: \['review'\]"):
        frame.kimi  # noqa: B018


def test_never_writes_attrs(sim, reviews):
    reviews.attrs["source"] = "shop"
    out = reviews.kimi.extract(Review, text="review", **options(sim))
    reviews.kimi.estimate(Review, text="review")
    assert reviews.attrs == {"source": "shop"}
    assert set(out.attrs) <= {"source"}


def test_estimate_sends_nothing(sim, reviews):
    estimate = reviews.kimi.estimate(Review, text="review", instructions="Classify.")
    assert sim.history == []
    assert estimate == kx.Extractor(Review, instructions="Classify.").estimate(
        reviews, text="review"
    )
    assert estimate.rows == estimate.requests == 3


def test_series_extract(sim):
    series = pd.Series(REVIEWS, name="review", index=[10, 11, 12])
    out = series.kimi.extract(Review, **options(sim))
    assert list(out.columns[:3]) == ["review", "sentiment", "aspects"]
    assert out.index.equals(series.index) and out["kx_error"].isna().all()
    assert sorted(h.body["messages"][-1]["content"] for h in chat_requests(sim)) == sorted(REVIEWS)
    assert series.kimi.estimate(Review).requests == 3
    with pytest.raises(kx.InputError, match=r"series.kimi takes no \['text'\]"):
        series.kimi.extract(Review, text="review")


async def test_async_twins_match(sim, reviews):
    out = await reviews.kimi.aextract(Review, text="review", **options(sim))
    again = await reviews["review"].kimi.aextract(Review, **options(sim))
    assert out["kx_error"].isna().all() and again["kx_error"].isna().all()
    pd.testing.assert_series_equal(out["sentiment"], again["sentiment"])


def test_videos_column_is_sent_as_video_parts(sim, tmp_path):
    """``videos=`` (advertised by the accessor) reaches ``Extractor.run`` as video_url parts."""
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2" + b"\x00" * 4000)
    frame = pd.DataFrame({"note": ["a clip"], "clip": [str(clip)]})
    out = frame.kimi.extract(Review, text="note", videos="clip", **options(sim))
    assert out["kx_error"].isna().all()
    parts = chat_requests(sim)[0].body["messages"][-1]["content"]
    assert [p["type"] for p in parts] == ["video_url", "text"]
    assert parts[0]["video_url"]["url"].startswith("data:video/mp4;base64,")
    with pytest.raises(kx.ConfigurationError, match="videos must be a column name"):
        frame.kimi.extract(Review, text="note", videos=["clip"], **options(sim))


def test_a_misspelt_option_gets_a_suggestion(reviews):
    with pytest.raises(TypeError, match=r"'instruction' \(did you mean 'instructions'\?\)"):
        reviews.kimi.extract(Review, text="review", instruction="Classify.")
    with pytest.raises(TypeError, match=r"'txt' \(did you mean 'text'\?\)"):
        reviews.kimi.estimate(Review, txt="review")
    with pytest.raises(TypeError, match=r"'concurency' \(did you mean 'concurrency'\?\)"):
        reviews["review"].kimi.extract(Review, concurency=2)
