"""Deprecated: ``kimi_extract.explode.explode`` moved to ``kimi_extract.table.explode.explode``.

The 0.1 path still works for one release, with a ``DeprecationWarning`` naming the new one.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "explode":
        import warnings

        from .table.explode import explode

        warnings.warn(
            "kimi_extract.explode.explode moved to kimi_extract.table.explode.explode; "
            "the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return explode
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
