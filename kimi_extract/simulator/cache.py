"""The implicit prefix cache (``docs/reference/KIMI-NOTES.md``, "Caching";
``docs/reference/kimi-chat-completions-reference.md``, ``prompt_cache_options``, ``ChatUsage``).

Model:

- The prompt is a stream of one unit per prompt token (``prompt.Prompt.units``): tools, the
  response_format schema, then the messages in order (role, content, reasoning_content,
  tool_calls; an image by a hash of its URL). It is cut into fixed blocks of ``block_tokens``
  (default 64); only full blocks are cached. Block ``i`` is keyed by a hash chain over the model
  name and blocks ``0..i``, so a key stands for the whole prefix up to that block and hits need a
  byte-identical prefix.
- **Read**: the longest run of leading blocks that are present and unexpired. It counts as
  ``cached_tokens`` only when longer than ``min_tokens`` (default 256, "a request can hit only if
  the cached prefix is longer than 256 tokens"). With ``refresh_on_read`` (off by default) a
  counted read also resets those blocks' expiry to now + their own TTL; by default an entry lives
  its TTL from the write that made it (the reference calls it the "cache write TTL" and bills writes
  separately), so a run longer than the TTL re-writes the prefix — which is what makes the 1 h
  TTL worth paying for on long runs.
- **Write** (only when the prompt is longer than ``min_tokens``): every full block not already
  present. Writes become readable only when the response that made them completes
  (``commit``), so concurrent first requests all miss, as on a real server. A failed or
  rejected request commits nothing. K3.1 reports the written tokens as ``cache_write_tokens``;
  kimi-k3 writes all the same but reports 0 (the reference: it bills writes as regular input).
- **TTL**: 5 minutes, or 1 hour when the writing request sends ``prompt_cache_options.ttl =
  "1h"``. Entries keep the TTL they were written with.
- Time comes from the injectable ``clock`` (seconds), so tests can expire entries.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from ..exceptions import ConfigurationError
from ..kimi import CACHE_TTL_SECONDS, DEFAULT_CACHE_TTL

# docs/reference/kimi-chat-completions-reference.md, prompt_cache_options.ttl (kimi.py)
TTL_SECONDS = CACHE_TTL_SECONDS


@dataclass
class Lookup:
    """What the cache says about one prompt: tokens read, and the blocks to write on success."""

    cached_tokens: int = 0
    write_tokens: int = 0
    pending: list[bytes] = field(default_factory=list, repr=False)
    ttl_s: float = TTL_SECONDS[DEFAULT_CACHE_TTL]


class PrefixCache:
    """Hash-chained block cache with per-entry expiry; see the module docstring."""

    def __init__(
        self,
        clock: Callable[[], float],
        block_tokens: int = 64,
        min_tokens: int = 256,
        refresh_on_read: bool = False,
    ) -> None:
        if block_tokens < 1:
            raise ConfigurationError("cache_block_tokens must be at least 1")
        self.clock = clock
        self.refresh_on_read = refresh_on_read
        self.block_tokens = block_tokens
        self.min_tokens = min_tokens
        #: block key -> (expiry time, TTL seconds)
        self._entries: dict[bytes, tuple[float, float]] = {}
        self._commits = 0

    def __len__(self) -> int:
        now = self.clock()
        return sum(1 for expiry, _ in self._entries.values() if expiry > now)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()

    def block_keys(self, model: str, units: list[str]) -> list[bytes]:
        """The hash-chain key of every full block of ``units``."""
        size = self.block_tokens
        keys: list[bytes] = []
        previous = model.encode()
        for start in range(0, len(units) - size + 1, size):
            block = "\x1f".join(units[start : start + size]).encode("utf-8", "surrogatepass")
            previous = hashlib.blake2b(previous + block, digest_size=16).digest()
            keys.append(previous)
        return keys

    def lookup(self, model: str, units: list[str], ttl: str = DEFAULT_CACHE_TTL) -> Lookup:
        """Read the longest cached prefix and plan the writes for one prompt."""
        result = Lookup(ttl_s=TTL_SECONDS.get(ttl, TTL_SECONDS[DEFAULT_CACHE_TTL]))
        if len(units) <= self.min_tokens:
            return result
        now = self.clock()
        keys = self.block_keys(model, units)
        entries = self._entries
        hit = 0
        for key in keys:
            entry = entries.get(key)
            if entry is None or entry[0] <= now:
                break
            hit += 1
        if hit * self.block_tokens > self.min_tokens:
            result.cached_tokens = hit * self.block_tokens
            for key in keys[:hit] if self.refresh_on_read else ():
                ttl_s = entries[key][1]
                entries[key] = (now + ttl_s, ttl_s)
        for key in keys[hit:]:
            entry = entries.get(key)
            if entry is None or entry[0] <= now:
                result.pending.append(key)
        result.write_tokens = len(result.pending) * self.block_tokens
        return result

    def commit(self, lookup: Lookup) -> None:
        """Make a completed response's writes readable."""
        if not lookup.pending:
            return
        now = self.clock()
        for key in lookup.pending:
            self._entries[key] = (now + lookup.ttl_s, lookup.ttl_s)
        self._commits += 1
        if self._commits % 1024 == 0:
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
