"""Output model for the quick-start demo: what to pull out of a product review.

The docstring and field descriptions are the annotation guide the model reads: they travel in the
schema, which is the same for every row, so Kimi's prompt cache serves them after the first
request (a shared prefix counts only past 256 tokens; this guide is long enough).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Review(BaseModel):
    """One customer review of a consumer electronics product, classified for the product team.

    Read the whole review before answering. Judge the reviewer's overall experience with the
    product, not the shipping, the seller or the price alone. Mixed reviews are classified by
    their conclusion: "great screen but the battery died in a week, returning it" is negative.
    Sarcasm counts as what it means, not what it says. Use only what the text states or clearly
    implies; never guess facts the reviewer did not give. Keep every string short, lowercase and
    in English, even when the review is written in another language.
    """

    sentiment: Literal["positive", "negative", "neutral"] = Field(
        description=(
            "Overall sentiment of the review: positive when the reviewer is satisfied overall, "
            "negative when dissatisfied or returning the product, neutral when the review is "
            "factual, undecided, or balances praise and complaints without a conclusion"
        )
    )
    aspects: list[str] = Field(
        description=(
            "Product aspects the reviewer mentions, praised or criticised, as short lowercase "
            "nouns such as battery, screen, price, sound, build quality, setup, app, support; one "
            "entry per aspect, in the order they first appear, without duplicates; [] if none"
        )
    )
    would_recommend: bool = Field(
        description=(
            "Whether the reviewer would recommend the product to others: true when they say so "
            "or are clearly satisfied, false when they warn others, return it, or are unhappy"
        )
    )
    stars: int | None = Field(
        default=None,
        ge=1,
        le=5,
        description=(
            'Star rating from 1 to 5 when the text states one ("4/5", "five stars") or '
            "implies it unambiguously; null when it does not"
        ),
    )
