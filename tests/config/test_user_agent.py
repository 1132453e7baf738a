"""``user_agent=``: your application's name in the ``User-Agent`` of every API request."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kimi_extract as kx
from kimi_extract.config.groups import LIBRARY_USER_AGENT, MAX_USER_AGENT

from ..conftest import Review

PRINTABLE = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=MAX_USER_AGENT)


def sent_agents(sim) -> list[str]:
    return [{k.lower(): v for k, v in e.headers.items()}["user-agent"] for e in sim.history]


@pytest.mark.parametrize("backend", ["aiohttp", "httpx"])
def test_every_request_names_the_application_before_the_library(sim, backend: str) -> None:
    options = dict(base_url=sim.base_url, api_key=sim.api_key, store=False, progress=False)
    ex = kx.Extractor(Review, user_agent="invoice-bot/2.1", http_backend=backend, **options)
    ex.run(["fine", "bad"])
    assert sent_agents(sim) == [f"invoice-bot/2.1 {LIBRARY_USER_AGENT}"] * 2
    kx.Extractor(Review, http_backend=backend, **options).extract("fine")
    assert sent_agents(sim)[2:] == [LIBRARY_USER_AGENT]  # None: the library alone, as before


def test_the_group_and_the_accessor_take_it_too(sim) -> None:
    import pandas as pd

    options = dict(base_url=sim.base_url, api_key=sim.api_key, store=False, progress=False)
    frame = pd.DataFrame({"review": ["fine"]})
    frame.kimi.extract(Review, text="review", connection=kx.Connection(user_agent="a/1"), **options)
    frame.kimi.extract(Review, text="review", user_agent="b/2", **options)
    assert sent_agents(sim) == [f"a/1 {LIBRARY_USER_AGENT}", f"b/2 {LIBRARY_USER_AGENT}"]


@given(agent=PRINTABLE)
def test_any_printable_ascii_name_is_sent_as_given(agent: str) -> None:
    if not agent.strip():
        with pytest.raises(kx.ConfigurationError, match="user_agent"):
            kx.Connection(user_agent=agent)
        return
    header = kx.ExtractorConfig(user_agent=agent).connection.user_agent_header
    assert header == f"{agent.strip()} {LIBRARY_USER_AGENT}"


@given(
    head=PRINTABLE,
    bad=st.characters(blacklist_categories=(), min_codepoint=0).filter(
        lambda c: not " " <= c <= "~"
    ),
    tail=PRINTABLE,
)
def test_a_line_break_or_any_other_character_outside_printable_ascii_is_refused(
    head: str, bad: str, tail: str
) -> None:
    # "\r\n" would end the header and start another one the caller never meant to send.
    with pytest.raises(kx.ConfigurationError, match="user_agent must be printable ASCII"):
        kx.ExtractorConfig(user_agent=head + bad + tail)


@pytest.mark.parametrize("value", [b"bot/1", 1, "x" * (MAX_USER_AGENT + 1), ""])
def test_a_bad_user_agent_is_a_configuration_error_naming_it(value: object) -> None:
    with pytest.raises(kx.ConfigurationError, match="user_agent"):
        kx.Extractor(Review, user_agent=value)
