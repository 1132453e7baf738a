"""The key never survives redaction in any form a server may echo it (``http/secret.py``), and a
short key does not break answers that merely contain its characters."""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

import kimi_extract as kx
from kimi_extract.http.secret import REDACTED, Secret

from ..hostile import HostileServer, completion, encoded_echoes, http, key_leaks

KEY_CHARS = string.ascii_letters + string.digits + "-_"
#: Keys of any key characters, and keys of hex digits and "u" (whose characters also spell
#: escapes, so an echo and the text around it can read as one another).
keys = st.text(KEY_CHARS, min_size=8, max_size=64) | st.text(
    "0123456789abcdefABCDEFnu", min_size=8, max_size=24
)
#: Text around an echo: prose, JSON punctuation, other key-like words, non-ASCII, and the
#: beginnings of escapes (an echo may complete one).
surroundings = st.lists(
    st.sampled_from(
        [
            *'abc XYZ 019 -_{}[]":,.%\\/=+\n\t',
            "é",
            "中",
            "\u200b",
            "\\u",
            "\\u0",
            "\\u00",
            "%3",
            "%0",
        ]
    ),
    max_size=20,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    key=keys,
    before=surroundings,
    after=surroundings,
    which=st.integers(0, 100),
    in_json=st.booleans(),
)
def test_no_encoded_echo_of_the_key_survives_redaction(key, before, after, which, in_json):
    """Any echo, also written as a JSON string (escaped once more, decoded by a later parse):
    nothing of the key is left, read as is or decoded, and the JSON stays valid."""
    secret = Secret(key)
    echoes = [key, *encoded_echoes(key)]
    text = before + echoes[which % len(echoes)] + after
    assert key_leaks(text, key), "the echo itself must be a leak (a test of the test)"
    if in_json:
        text = json.dumps({"value": text}, ensure_ascii=bool(which % 2))
    assert secret.suspect(text)
    clean = secret.redact(text)
    assert key_leaks(clean, key) == []
    if in_json:
        assert key_leaks(json.loads(clean)["value"], key) == []


@st.composite
def mixed_echoes(draw: st.DrawFn, key: str) -> str:
    """The key with each character written its own way (as is, in either case, ``\\u``-escaped
    or percent-encoded, hex digits in either case) and any gap after it (none, spaces, a
    zero-width space or soft hyphen, a JSON newline or tab escape)."""
    out = []
    for char in key:
        form = draw(
            st.sampled_from(["raw", "upper", "lower", "escape", "ESCAPE", "percent", "pct"])
        )
        if form in ("upper", "lower"):
            char = getattr(char, form)()
        elif form in ("escape", "ESCAPE"):
            char = f"\\u{ord(char):04x}" if form == "escape" else f"\\u{ord(char):04X}"
        elif form in ("percent", "pct"):
            char = f"%{ord(char):02X}" if form == "percent" else f"%{ord(char):02x}"
        gap = draw(st.sampled_from(["", "", " ", "  ", "\u200b", "\u00ad", "\\n", "\\t"]))
        out.append(char + gap)
    return "".join(out)


#: A key and an echo of it mixing encodings.
keys_and_echoes = keys.flatmap(lambda key: st.tuples(st.just(key), mixed_echoes(key)))


@settings(max_examples=200, deadline=None)
@given(
    case=keys_and_echoes,
    before=surroundings,
    after=surroundings,
    whole=st.sampled_from(["as is", "upper", "lower"]),
    in_json=st.booleans(),
)
# An escape-like text just before the echo ("%0" + "0...", "%" + "00...") must not hide it: the
# echo starts inside what a left-to-right decoding reads as one escape.
@example(case=("00000000", "0000000\\u0030"), before="%", after="", whole="as is", in_json=False)
@example(case=("00000000", "0000000\\u0030"), before="%0", after="", whole="as is", in_json=False)
@example(case=("00000000", "0000000%30"), before="%", after="", whole="as is", in_json=False)
# Upper-cased after encoding: "\\U0061" is still an escape, "\\N" still a gap.
@example(case=("abcdefgh", "\\u0061bcdefgh"), before="", after="", whole="upper", in_json=False)
@example(case=("abcdefgh", "abc\\ndefgh"), before="", after="", whole="upper", in_json=False)
def test_an_echo_mixing_every_encoding_is_redacted(case, before, after, whole, in_json):
    """Also when the whole text is upper- or lower-cased after encoding (``\\U0030``, a
    ``\\N`` gap), and written as a JSON string (escaped once more, decoded by a later parse)."""
    key, echo = case
    text = before + echo + after
    if whole != "as is":
        text = getattr(text, whole)()
    assert key_leaks(text, key)
    if in_json:
        text = json.dumps({"value": text})
    clean = Secret(key).redact(text)
    assert key_leaks(clean, key) == []
    if in_json:
        assert key_leaks(json.loads(clean)["value"], key) == []


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("zzz41bcdefgyy", "%41bcdefg"),  # 2 characters of the run only undecoded
        ("z0041bcdeq", "x\\u0041bcde"),  # 4: the hex digits of \u0041
        ("u0041bcdq", "\\u0041bcd"),  # 5: from its "u"
    ],
)
def test_a_run_starting_inside_an_escape_passes_the_cheap_check(key, text):
    """The run shows its first characters only undecoded, and what follows them decoded holds
    no block of the key at offsets 0, 4, 8...: the cheap check must still let redaction see it."""
    secret = Secret(key)
    assert key_leaks(text, key) and secret.suspect(text)
    assert key_leaks(secret.redact(text), key) == []


@st.composite
def runs_starting_inside_an_escape(draw: st.DrawFn) -> tuple[str, str]:
    """A key and a text whose run of 8 of its characters shows its first 1-5 only undecoded,
    as the end of an escape (``%`` + ``4``, ``\\u0`` + ``041``, ``\\`` + ``u0041``), the rest
    written any way (``mixed_echoes``)."""
    key = draw(st.text("0123456789abcdefABCDEFuvwxyz-", min_size=8, max_size=20))
    start = draw(st.integers(0, len(key) - 8))
    run = key[start : start + 8]
    shown = draw(st.integers(1, 5))
    head = run[:shown]
    if shown <= 2 and all(c in string.hexdigits for c in head) and draw(st.booleans()):
        opening = "%" + "0" * (2 - shown)
    elif shown <= 4 and all(c in string.hexdigits for c in head):
        opening = "\\u" + "0" * (4 - shown)
    elif shown == 5 and head[0] == "u" and all(c in string.hexdigits for c in head[1:]):
        opening = "\\"
    else:
        assume(False)
    return key, opening + head + draw(mixed_echoes(run[shown:]))


@settings(max_examples=300, deadline=None)
@given(case=runs_starting_inside_an_escape(), before=surroundings)
def test_any_run_starting_inside_an_escape_is_redacted(case, before):
    key, echo = case
    text = before + echo
    secret = Secret(key)
    assert key_leaks(text, key) and secret.suspect(text)
    assert key_leaks(secret.redact(text), key) == []


@settings(max_examples=200, deadline=None)
@given(key=keys, text=st.text(max_size=60))
def test_text_without_the_key_is_left_alone(key, text):
    secret = Secret(key)
    if not key_leaks(text, key) and not secret.suspect(text):
        assert secret.redact(text) == text
    if secret.redact(text) != text:  # the cheap check never misses what redaction removes
        assert secret.suspect(text)


@settings(max_examples=100, deadline=None)
@given(key=keys, field=st.sampled_from(["value", "note"]), escaped=st.integers(0, 64))
def test_a_key_escaped_inside_a_json_answer_is_redacted_and_the_json_stays_valid(
    key, field, escaped
):
    """A JSON parser decodes ``\\uXXXX`` after redaction: the decoded value holds no key either."""
    body = "".join(f"\\u{ord(c):04x}" if i < escaped else c for i, c in enumerate(key))
    answer = f'{{"{field}": "id {body} ok"}}'
    clean = Secret(key).redact(answer)
    decoded = json.loads(clean)[field]
    assert key_leaks(decoded, key) == [] and key_leaks(clean, key) == []


def test_the_encoded_forms_of_a_known_key():
    key = "sk-hypo-Zq9Wm3Lx7Rt2Vb8Nc4Hk6Jd1Fs5Gp0Ya"
    secret = Secret(key)
    for echo in encoded_echoes(key):
        assert REDACTED in secret.redact(f"echo: {echo}."), echo
    assert secret.redact("Bearer%20" + key) == "Bearer%20" + REDACTED
    assert secret.redact(key.upper()) == REDACTED


# -- short keys ----------------------------------------------------------------------------------


class Note(BaseModel):
    value: str


ANSWER = "ok: a kiwi bakery keeps k-means notes about abcd1234 and x"


@pytest.mark.parametrize("key", ["k", "abcd", "sk-local", "s" + "k" * 59])
def test_a_key_of_any_length_is_redacted_as_a_whole_token(key):
    secret = Secret(key)
    echoed = secret.redact(f"Incorrect API key provided: {key}. Check it")
    assert echoed == f"Incorrect API key provided: {REDACTED}. Check it"
    assert secret.redact(ANSWER) == ANSWER  # no whole-token key inside: left alone


@pytest.mark.parametrize("key", ["k", "abcd"])
def test_a_short_key_is_not_redacted_inside_words(key):
    secret = Secret(key)
    text = f"{key}{key}x x{key} {key}-y {key}_z"
    assert secret.redact(text) == text
    assert secret.redact(f"[{key}]") == f"[{REDACTED}]"


@pytest.mark.parametrize("key", ["sk-local", "s" + "k" * 59])
def test_a_key_of_eight_or_more_characters_is_redacted_inside_words_too(key):
    assert Secret(key).redact(f"x{key}y") == f"x{REDACTED}y"


#: Characters that are neither key characters nor gaps nor escape or elision marks.
SEPARATORS = st.sampled_from([",", "/", ":", ";", "=", "(", ")", "!"])


@settings(max_examples=300, deadline=None)
@given(
    key=st.text(KEY_CHARS, min_size=1, max_size=7),
    words=st.lists(
        st.tuples(st.text(KEY_CHARS, max_size=3), st.text(KEY_CHARS, max_size=3), SEPARATORS),
        max_size=6,
    ),
)
def test_a_short_key_is_redacted_exactly_where_it_stands_as_a_token(key, words):
    """A key of 1-7 characters inside a longer word (a key character just before or after it)
    is left alone; standing between separators it is redacted, and nothing else changes."""
    text, expected = "", ""
    for before, after, separator in words:
        word = before + key + after  # key characters only: a token only when it is the key
        text += word + separator
        expected += (REDACTED if word == key else word) + separator
    assert Secret(key).redact(text) == expected


@settings(max_examples=300, deadline=None)
@given(
    key=st.text(KEY_CHARS, min_size=8, max_size=12),
    cuts=st.lists(st.tuples(st.integers(0, 11), st.integers(1, 7), SEPARATORS), max_size=8),
)
def test_pieces_shorter_than_eight_characters_of_a_key_are_kept(key, cuts):
    """An answer holding pieces of a key of 8 or more characters, each shorter than 8 and
    standing apart (not spaced out into a longer run), is left as it is."""
    text = "".join(key[start : start + size] + separator for start, size, separator in cuts)
    assert Secret(key).redact(text) == text


@pytest.mark.parametrize("key", ["k", "abcd", "sk-local", "s" + "k" * 59])
def test_answers_containing_a_short_keys_characters_validate(key):
    """Against a local server with ``api_key="k"`` every answer holds a "k": it must pass as is,
    while the key echoed in an error is still redacted."""

    def respond(request):
        if b"second" in request.body:
            return http(400, {"error": {"type": "invalid_request_error", "message": f"bad {key}"}})
        return http(200, completion(json.dumps({"value": ANSWER})))

    with HostileServer(respond) as server:
        frame = kx.Extractor(
            Note, base_url=server.base_url, api_key=key, progress=False, max_retries=0
        ).run(["first", "second"])
    assert frame.loc[0, "value"] == ANSWER and frame.loc[0, "kx_error"] is None
    assert frame.loc[1, "kx_error"].endswith(f"bad {REDACTED}")
