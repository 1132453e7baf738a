"""How a settings group is written, and the checks every group shares.

A group is a small frozen dataclass (httpx's ``Timeout`` / ``Limits``, pydantic-ai's
``UsageLimits``): each field has a default and, on the line below it, a docstring saying what it
does, its unit and its range; ``__post_init__`` checks every field and raises a
``ConfigurationError`` naming the one that is wrong, so a group that exists is a valid one, and
``dataclasses.replace`` checks again. ``field_docs`` reads those docstrings (the settings page,
docs/configuration.md, is generated from them: ``kimi_extract.config.docs``).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import warnings
from pathlib import Path

from ..exceptions import ConfigurationError
from ..settings_docs import field_docs

__all__ = [
    "check_bool",
    "check_count",
    "check_optional_positive",
    "check_positive",
    "check_seconds",
    "field_docs",
    "warn_deprecated",
]


def check_bool(name: str, value: object) -> None:
    """An on/off setting: exactly True or False."""
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {value!r}")


def check_positive(name: str, value: object) -> None:
    """A whole number >= 1 (a bool is not one)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigurationError(f"{name} must be a positive integer, got {value!r}")


def check_optional_positive(name: str, value: object) -> None:
    """None (no limit) or a whole number >= 1."""
    if value is not None:
        check_positive(name, value)


def check_count(name: str, value: object) -> None:
    """A whole number >= 0 (a number of retries or rounds)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{name} must be an integer >= 0, got {value!r}")


def check_seconds(name: str, value: object, *, allow_zero: bool = False) -> None:
    """A duration: a finite number of seconds, > 0 (>= 0 with ``allow_zero``)."""
    ok = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(
            f"{name} must be a finite number of seconds {bound}, got {value!r}"
        )


#: Frames in these files are the library's own (and ``dataclasses.replace``): a deprecation
#: warning points past them, at the caller's line.
_OWN_FILES = (
    str(Path(__file__).parents[1]) + os.sep,
    str(Path(__file__).resolve().parents[1]) + os.sep,
    dataclasses.__file__,
)


def warn_deprecated(message: str) -> None:
    """A ``DeprecationWarning`` attributed to the first caller outside kimi_extract (Python shows
    one from ``__main__`` by default, so a script's own line is named)."""
    level = 2  # stacklevel 2 names the frame that called this function
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_FILES):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, DeprecationWarning, stacklevel=level)
