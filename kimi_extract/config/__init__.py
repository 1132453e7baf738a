"""The settings: ``ExtractorConfig`` and its groups, below the run so the run takes them directly.

- ``config.core``: ``ExtractorConfig``, the flat keywords routed into groups, old names.
- ``config.groups``: ``Limits``, ``Connection``, ``Budget``, ``PromptCache``,
  ``GroundingOptions`` (and ``media.parts.MediaOptions``), each a frozen dataclass that checks
  itself, with a docstring under every field.
- ``config.endpoint``: ``base_url`` and ``api_key``, checked and read from the environment.
- ``config.fields``: the shared checks and the field-docstring reader.
- ``config.docs``: docs/configuration.md, generated from those docstrings.
"""

from __future__ import annotations

from ..kimi import MAX_CONCURRENCY
from ..media.parts import MediaOptions
from .core import (
    DEPRECATED_NAMES,
    GROUP_OF,
    GROUPS,
    ExtractorConfig,
    check_budget_fits,
    check_option_names,
    option_names,
    setting_default,
)
from .endpoint import (
    API_KEY_ENV_VARS,
    BASE_URL_ENV_VAR,
    check_base_url,
    resolve_endpoint,
    simulator_endpoint,
)
from .groups import Budget, Connection, GroundingOptions, Limits, PromptCache

__all__ = [
    "API_KEY_ENV_VARS",
    "BASE_URL_ENV_VAR",
    "DEPRECATED_NAMES",
    "GROUPS",
    "GROUP_OF",
    "MAX_CONCURRENCY",
    "Budget",
    "Connection",
    "ExtractorConfig",
    "GroundingOptions",
    "Limits",
    "MediaOptions",
    "PromptCache",
    "check_base_url",
    "check_budget_fits",
    "check_option_names",
    "option_names",
    "resolve_endpoint",
    "setting_default",
    "simulator_endpoint",
]
