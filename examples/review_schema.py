"""Output model for the quick-start demo: what to pull out of a product review."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Review(BaseModel):
    """One product review, classified."""

    sentiment: Literal["positive", "negative", "neutral"] = Field(
        description="Overall sentiment of the review"
    )
    aspects: list[str] = Field(
        description="Product aspects the reviewer mentions, e.g. battery, screen, price"
    )
    would_recommend: bool = Field(description="Whether the reviewer would recommend the product")
    stars: int | None = Field(
        default=None, ge=1, le=5, description="Star rating implied by the text, if any"
    )
