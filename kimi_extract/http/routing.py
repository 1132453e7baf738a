"""Host routing: multimodal requests to one host, text to the other, and failover between them.

The API reference (docs/reference/kimi-chat-completions-reference.md, the BaseURL note) names
two hosts: ``direct.evolink.ai`` "has better support for text models and long-lived connections";
``api.evolink.ai`` "is the primary endpoint for multimodal services and serves as a fallback
address for text models". So:

- an explicit ``base_url`` (the ``Extractor`` argument, else env ``KIMI_BASE_URL``) takes every
  request, and there is no failover;
- otherwise a request whose messages carry an ``image_url`` or ``video_url`` part goes to
  ``MEDIA_BASE_URL`` (``https://api.evolink.ai``), a text-only one to ``TEXT_BASE_URL``
  (``https://direct.evolink.ai``).

Failover. The transport reports every HTTP attempt's outcome. A *host failure* is a connection
error or timeout (``APIConnectionError``) or a 5xx status; any other answer (200, 4xx, 429) shows
the host is up and clears its count. After ``failover_after`` consecutive host failures (default
3: a first attempt and two retries) the host is set aside for ``cooldown_s`` seconds (default 60)
and attempts go to the other host, including the remaining retries of requests already in flight.
Failover moves attempts, it never adds any: a request still makes at most ``max_retries + 1``
attempts. When the cool-down ends, the preferred host gets traffic again; if it fails again it is
set aside again at once. If both hosts are set aside, attempts go to the one whose cool-down ends
first. ``Router.failovers`` counts how often a host was set aside.

Tests point the two hosts at local simulators by monkeypatching ``TEXT_BASE_URL`` and
``MEDIA_BASE_URL`` (read when a ``Router`` is made) or passing ``text_url`` / ``media_url``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from ..exceptions import APIConnectionError, APIError, ConfigurationError
from ..kimi import DEFAULT_BASE_URL, MEDIA_PART_TYPES, MULTIMODAL_BASE_URL
from .clock import Clock, default_clock

logger = logging.getLogger("kimi_extract")

TEXT_BASE_URL = DEFAULT_BASE_URL
MEDIA_BASE_URL = MULTIMODAL_BASE_URL
#: Consecutive host failures (connection errors, timeouts, 5xx) before a host is set aside.
FAILOVER_AFTER = 3
#: Seconds a failing host is set aside before it gets traffic again.
COOLDOWN_S = 60.0


def has_media(body: Mapping[str, Any]) -> bool:
    """True when any message of a chat-completions body has an image or video content part."""
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list) and any(
            isinstance(part, Mapping) and part.get("type") in MEDIA_PART_TYPES for part in content
        ):
            return True
    return False


def is_host_failure(error: BaseException | None) -> bool:
    """A connection error, a timeout or a 5xx status: the host itself is in trouble."""
    if isinstance(error, APIConnectionError):
        return True
    status = getattr(error, "status", None)
    return isinstance(error, APIError) and isinstance(status, int) and status >= 500


class Router:
    """Picks the base URL of each HTTP attempt (see the module docstring).

    ``base_url``: explicit host for every request (None: route by content). ``text_url`` /
    ``media_url``: the two hosts (default: ``TEXT_BASE_URL`` / ``MEDIA_BASE_URL``).
    ``failover_after``: consecutive host failures before failover. ``cooldown_s``: seconds a
    failed host is set aside. ``clock``: a ``clock.Clock`` (default: the default clock at each
    reading, see ``clock.use_clock``).
    """

    def __init__(
        self,
        base_url: str | None = None,
        *,
        text_url: str | None = None,
        media_url: str | None = None,
        failover_after: int = FAILOVER_AFTER,
        cooldown_s: float = COOLDOWN_S,
        clock: Clock | None = None,
    ) -> None:
        if failover_after < 1:
            raise ConfigurationError(f"failover_after must be >= 1, got {failover_after!r}")
        self.explicit = base_url or None
        self.text_url = text_url or TEXT_BASE_URL
        self.media_url = media_url or MEDIA_BASE_URL
        self.failover_after = failover_after
        self.cooldown_s = cooldown_s
        self.clock = clock
        self.failovers = 0
        self._failures: dict[str, int] = {}
        self._aside_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # Picklable (Dask ships extractors to workers): health state travels, the lock does not.
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        if self.explicit:
            return f"Router(base_url={self.explicit!r})"
        return f"Router(text={self.text_url!r}, media={self.media_url!r})"

    def preferred(self, body: Mapping[str, Any]) -> str:
        """The host a body goes to while both hosts are healthy."""
        if self.explicit:
            return self.explicit
        return self.media_url if has_media(body) else self.text_url

    def base_url_for(self, body: Mapping[str, Any]) -> str:
        """The base URL for the next attempt of ``body``."""
        if self.explicit:
            return self.explicit
        first = self.preferred(body)
        other = self.text_url if first == self.media_url else self.media_url
        with self._lock:
            now = self._now()
            first_until = self._aside_until.get(first, 0.0)
            if first_until <= now:
                return first
            other_until = self._aside_until.get(other, 0.0)
            return other if other_until < first_until else first

    def report(self, base_url: str, error: BaseException | None) -> None:
        """Record one attempt's outcome at ``base_url`` (``error`` None: an answer came back)."""
        if self.explicit:
            return
        if not is_host_failure(error):
            with self._lock:
                self._failures.pop(base_url, None)
            return
        with self._lock:
            count = self._failures.get(base_url, 0) + 1
            self._failures[base_url] = count
            if count < self.failover_after:
                return
            now = self._now()
            if self._aside_until.get(base_url, 0.0) > now:
                return  # already set aside (attempts that were in flight finishing)
            self._aside_until[base_url] = now + self.cooldown_s
            self.failovers += 1
        other = self.text_url if base_url == self.media_url else self.media_url
        logger.warning(
            "kimi_extract: %s failed %d times in a row (%s); sending requests to %s for %.0f s",
            base_url,
            count,
            type(error).__name__,
            other,
            self.cooldown_s,
        )

    def healthy(self, base_url: str) -> bool:
        """False while ``base_url`` is set aside after repeated failures."""
        with self._lock:
            return self._aside_until.get(base_url, 0.0) <= self._now()

    def _now(self) -> float:
        return (self.clock or default_clock()).now()
