"""Media cells -> content parts: images, videos, documents (``parts``, ``documents``).

``kimi_extract.media.parts.media_options`` is the public name here (see docs/api.md). 0.1 had it
at ``kimi_extract.media.media_options``: that path still works for one release and warns.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "media_options":
        import warnings

        from .parts import media_options

        warnings.warn(
            "kimi_extract.media.media_options moved to kimi_extract.media.parts.media_options; "
            "the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return media_options
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
