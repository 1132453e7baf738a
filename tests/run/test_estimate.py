"""``estimate()`` predicts what a run bills: within 25 % of the simulator's billing (tokens by
bucket and cost) on short rows, long shared instructions and documents (``run/estimate.py``)."""

from __future__ import annotations

import random
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from kimi_extract.run.estimate import CACHE_BLOCK_TOKENS, answer_tokens, cache_usage

from ..conftest import Review

WORDS = (
    "the kettle boils fast but its lid rattles and the handle gets hot while delivery was late "
    "price quality screen battery invoice total vendor paid shipping refund warranty"
).split()


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


class Invoice(BaseModel):
    vendor: str
    total: float
    currency: Literal["EUR", "USD", "GBP"]
    issued: str = Field(description="the issue date")
    items: list[str]
    paid: bool
    lines: int


def workload(name: str) -> tuple[type[BaseModel], dict[str, Any], list[str]]:
    rng = random.Random(name)
    if name == "short rows":
        return Review, {}, [sentence(rng, rng.randint(6, 20)) for _ in range(60)]
    if name == "long shared instructions":
        instructions = " ".join(sentence(rng, 12) for _ in range(150))
        rows = [sentence(rng, rng.randint(10, 30)) for _ in range(40)]
        return Review, {"instructions": instructions, "reasoning_effort": "high"}, rows
    documents = [
        " ".join(sentence(rng, 15) for _ in range(rng.randint(80, 250))) for _ in range(12)
    ]
    return Invoice, {}, documents


def near(estimated: float, billed: float) -> bool:
    return abs(estimated - billed) <= 0.25 * billed


@pytest.mark.parametrize("name", ["short rows", "long shared instructions", "documents"])
def test_the_estimate_is_within_a_quarter_of_what_the_run_bills(make_extractor, name):
    output, options, rows = workload(name)
    ex = make_extractor(output, store=False, **options)
    estimate = ex.estimate(rows)
    ex.run(rows)
    billed = ex.last_run.usage
    assert estimate.requests == billed.requests == len(rows)
    assert estimate.prompt_tokens == billed.prompt_tokens  # the same token rules
    assert near(estimate.completion_tokens, billed.completion_tokens), (estimate, billed)
    assert near(estimate.cache_write_tokens, billed.cache_write_tokens), (estimate, billed)
    assert near(estimate.cached_tokens, billed.cached_tokens), (estimate, billed)
    total = estimate.prompt_tokens + estimate.completion_tokens
    assert near(total, billed.prompt_tokens + billed.completion_tokens)
    assert near(estimate.cost, billed.cost), (estimate.cost, billed.cost)


def test_every_request_writes_its_own_blocks_and_reads_the_shared_ones():
    # Shared prefix 1,000 tokens (15 blocks with the user marker); rows of 1,200 and 1,500.
    cached, written = cache_usage([1_200, 1_500, 1_500], 1_000, separate_cache_writes=True)
    assert cached == 2 * 15 * CACHE_BLOCK_TOKENS
    assert written == (18 + (23 - 15) + (23 - 15)) * CACHE_BLOCK_TOKENS
    assert cache_usage([1_200, 1_500], 1_000, separate_cache_writes=False)[1] == 0
    # A shared prefix of 256 tokens or fewer is not read (its block is not written twice
    # either); prompts of 256 tokens or fewer write nothing.
    assert cache_usage([300, 300], 100, separate_cache_writes=True) == (0, (4 + 3) * 64)
    assert cache_usage([200, 250], 100, separate_cache_writes=True) == (0, 0)


def test_the_answer_estimate_grows_with_the_schema():
    small = answer_tokens(Review.model_json_schema())
    large = answer_tokens(Invoice.model_json_schema())
    assert 10 < small < large < 200
