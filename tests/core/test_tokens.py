"""The approximate tokenizer (kimi_extract.tokens): its documented rules, and that its one-class
regex for letter runs cuts text exactly as the rule's plain form (a lookahead per letter) does."""

from __future__ import annotations

import random
import re

from kimi_extract import tokens

#: The rule as written in the module docstring, character by character.
REFERENCE = re.compile(rf"[{tokens._CJK}]|(?:(?![{tokens._CJK}])[^\W\d_])+|\d{{1,3}}|\S")


def test_documented_examples() -> None:
    assert tokens.count_text_tokens("extraction") == 2
    assert tokens.count_text_tokens("the") == 1
    assert tokens.count_text_tokens("日本語") == 3
    assert tokens.count_text_tokens("1234567") == 3
    assert tokens.count_text_tokens("a, b!  ") == 4
    assert tokens.count_text_tokens("東京abc") == 3


def test_letter_runs_cut_as_the_reference_rule_on_every_bmp_character() -> None:
    for code in range(0x10000):
        char = chr(code)
        for text in (char, f"ab{char}cd", f"{char}{char}9x"):
            assert tokens._TOKEN_RE.findall(text) == REFERENCE.findall(text), hex(code)


def test_mixed_scripts_cut_as_the_reference_rule() -> None:
    rng = random.Random(7)
    pool = "aé zZ9_٣²½Ⅻ-—,。日本語カタカナ한국어\u3400\uf900\u00a0\t\n!🙂ß\u0301\u200dАя١"
    for _ in range(5000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 40)))
        assert tokens._TOKEN_RE.findall(text) == REFERENCE.findall(text), repr(text)
