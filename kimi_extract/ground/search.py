"""Where a string occurs in the folded text: exact occurrences in order around an anchor, and
the windows where a fuzzy match may lie (pure).

- ``occurrences``: every start of a needle, from the first on, or by distance from an anchor (a
  backward step counting more); with plain searches (each stretch of the text read once) or
  by checking the candidates the bigram index gives (``SourceText.candidates``), in the same
  order;
- ``windows``: a q-gram filter over the bigram index, for the fuzzy stage (``match``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from .source import SourceText, bigram_keys

#: Windows the fuzzy stage looks at, at most.
CANDIDATES = 48
#: Folded texts up to this length are searched whole by the fuzzy stage (no index).
INDEX_FROM = 20_000
#: Occurrences of a needle's bigrams that vote for its fuzzy windows, at most (the rarest
#: bigrams first).
MAX_VOTES = 100_000


def occurrences(
    haystack: str,
    needle: str,
    anchor: int | None,
    backward: int,
    count: Callable[[int], None] | None = None,
    candidates: np.ndarray | None = None,
) -> Iterator[int]:
    """Start indices of ``needle``: from the first on without an anchor, else by distance from
    ``anchor`` (a backward step counts ``backward`` times). ``count`` is told the characters
    read. Without ``candidates``, each stretch of the text is searched once; with them (where
    the needle may start, ascending: ``SourceText.candidates``), only those are checked, in the
    same order."""
    count = count if count is not None else (lambda chars: None)
    if candidates is not None:
        return _checked_in_order(haystack, needle, anchor, backward, count, candidates)
    return _searched(haystack, needle, anchor, backward, count)


def _checked(
    haystack: str, needle: str, starts: list[int], count: Callable[[int], None]
) -> Iterator[int]:
    for start in starts:
        count(len(needle))
        if haystack.startswith(needle, start):
            yield start


def _checked_in_order(
    haystack: str,
    needle: str,
    anchor: int | None,
    backward: int,
    count: Callable[[int], None],
    candidates: np.ndarray,
) -> Iterator[int]:
    if anchor is None:
        yield from _checked(haystack, needle, candidates.tolist(), count)
        return
    split = int(np.searchsorted(candidates, anchor))
    ahead = _checked(haystack, needle, candidates[split:].tolist(), count)
    behind = _checked(haystack, needle, candidates[:split][::-1].tolist(), count)
    forward, back = next(ahead, None), next(behind, None)
    while forward is not None or back is not None:
        if back is None or (forward is not None and forward - anchor <= backward * (anchor - back)):
            assert forward is not None
            yield forward
            forward = next(ahead, None)
        else:
            yield back
            back = next(behind, None)


def _searched(
    haystack: str, needle: str, anchor: int | None, backward: int, count: Callable[[int], None]
) -> Iterator[int]:
    size = len(needle)
    if anchor is None:
        found = haystack.find(needle)
        count(len(haystack) if found == -1 else found + size)
        while found != -1:
            yield found
            start = found + 1
            found = haystack.find(needle, start)
            count(len(haystack) - start if found == -1 else found + size - start)
        return
    forward = haystack.find(needle, anchor)
    count(len(haystack) - anchor if forward == -1 else forward + size - anchor)
    # backward searches look in [searched, bound): ``searched`` only moves down, so no stretch
    # is searched twice
    bound = anchor + size - 1
    searched = bound
    while True:
        if forward != -1:
            lowest = max(0, anchor - (forward - anchor) // backward)
            back = -1
            if lowest < searched:
                back = haystack.rfind(needle, lowest, min(bound, searched + size - 1))
                count(min(bound, searched + size - 1) - (lowest if back == -1 else back))
                searched = lowest if back == -1 else back
            if back != -1 and backward * (anchor - back) < forward - anchor:
                yield back
                bound = back + size - 1
                searched = back
                continue
            if back != -1:
                searched = back + 1  # found but farther than the forward one: look again later
            yield forward
            start = forward + 1
            forward = haystack.find(needle, start)
            count(len(haystack) - start if forward == -1 else forward + size - start)
            continue
        back = haystack.rfind(needle, 0, bound) if bound > 0 else -1
        count(bound if back == -1 else bound - back)
        if back == -1:
            return
        yield back
        bound = back + size - 1


def windows(source: SourceText, needle: str) -> list[tuple[int, int]]:
    """Folded-text windows where many of ``needle``'s bigrams line up (a q-gram filter).

    Each occurrence of a bigram of the needle votes for the diagonal (text position minus its
    position in the needle) it lies on; diagonals are counted in cells of half the needle's
    length, and the ``CANDIDATES`` best pairs of adjacent cells become windows. Bigrams more
    frequent than 2 % of the text are left out (unless fewer than two others remain).
    """
    folded = source.normalized.text
    size = len(needle)
    if len(folded) <= INDEX_FROM:
        return [(0, len(folded))]
    keys, positions = source.index()
    wanted = bigram_keys(needle)
    low = np.searchsorted(keys, wanted, side="left")
    high = np.searchsorted(keys, wanted, side="right")
    counts = high - low
    present = np.flatnonzero(counts)
    if len(present) == 0:
        return []
    keep = present[counts[present] <= max(1_000, len(folded) // 50)]
    if len(keep) < 2:
        keep = present[np.argsort(counts[present], kind="stable")[:2]]
    # the rarest bigrams first, at most MAX_VOTES occurrences in all (two bigrams at least)
    keep = keep[np.argsort(counts[keep], kind="stable")]
    total = np.cumsum(counts[keep])
    keep = keep[: max(2, int(np.searchsorted(total, MAX_VOTES, side="right")))]
    source.work.scan(int(counts[keep].sum()))
    # every occurrence of the kept bigrams, gathered at once: element i of bigram j's share
    # is ``positions[low[j] + i]``, and its diagonal that position minus j
    sizes = counts[keep]
    shift = np.repeat(low[keep] - (np.cumsum(sizes) - sizes), sizes)
    diagonals = positions[np.arange(len(shift)) + shift].astype(np.int64)
    diagonals -= np.repeat(keep, sizes)
    diagonals = diagonals[diagonals >= 0]
    if len(diagonals) == 0:
        return []
    bucket = max(4, size // 2)
    if len(diagonals) > len(folded) // bucket:
        # more votes than cells: counted per cell without sorting (the same cells and counts)
        dense = np.bincount(diagonals // bucket)
        cells = np.flatnonzero(dense)
        votes = dense[cells]
    else:
        cells, votes = np.unique(diagonals // bucket, return_counts=True)
    # votes of each cell and the next one (cells without a vote count 0)
    following = np.searchsorted(cells, cells + 1)
    has_next = following < len(cells)
    nxt = np.zeros_like(votes)
    nxt[has_next] = votes[following[has_next]]
    nxt[has_next] *= cells[following[has_next]] == cells[has_next] + 1
    pairs = votes + nxt
    need = max(2, math.ceil(0.3 * len(keep)))
    count = min(CANDIDATES, len(pairs))
    best = np.argpartition(-pairs, count - 1)[:count]
    found = []
    for at in sorted(best.tolist(), key=lambda c: -int(pairs[c])):
        if pairs[at] < need:
            break
        first = int(cells[at]) * bucket
        found.append((max(0, first - 2), min(len(folded), first + 2 * bucket + size + 2)))
    return found
