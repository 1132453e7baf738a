"""Optimal assignment of list items: which predicted item is which gold item.

Each (gold list, predicted list) pair has a weight matrix (gold items x predicted items); an
assignment pairs each gold item with at most one predicted item and back, maximising the total
weight. Lists are short in extraction (a few line items), so most are solved many at a time:

- lists whose larger side has at most ``PERMUTATION_LIMIT`` items (6): every permutation of
  the padded square matrix is scored at once with numpy, for every list of that shape together
  (720 permutations of 6; 120 of 5);
- longer lists: the Hungarian method, per list: ``scipy.optimize.linear_sum_assignment`` when
  scipy is installed, else ``hungarian`` below (O(n^2 m), numpy inside the loop).

Both give an optimal total; ties go to the first optimum found (the same lists always give the
same pairs).
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np

#: Up to this many items a side, lists are solved by scoring every permutation at once.
PERMUTATION_LIMIT = 6
#: Cells of the (lists x permutations x items) array scored at once (memory: 8 bytes each).
_CHUNK_CELLS = 4_000_000


@cache
def _permutations(size: int) -> np.ndarray:
    return np.asarray(list(itertools.permutations(range(size))), dtype=np.intp).reshape(-1, size)


def hungarian(weights: np.ndarray) -> np.ndarray:
    """For each row of ``weights`` (n x m), the column it is paired with (-1: none), maximising
    the total weight of the pairs (a maximum-weight assignment of min(n, m) pairs)."""
    weights = np.asarray(weights, dtype=np.float64)
    n, m = weights.shape
    if n == 0 or m == 0:
        return np.full(n, -1, dtype=np.intp)
    if n > m:
        columns = hungarian(weights.T)
        rows = np.full(n, -1, dtype=np.intp)
        rows[columns[columns >= 0]] = np.flatnonzero(columns >= 0)
        return rows
    cost = -weights
    # Potentials u (rows), v (columns); owner[j]: the row (1-based) holding column j (0: none).
    # Column 0 is the algorithm's virtual start column (the e-maxx formulation).
    u = np.zeros(n + 1)
    v = np.zeros(m + 1)
    owner = np.zeros(m + 1, dtype=np.intp)
    way = np.zeros(m + 1, dtype=np.intp)
    for row in range(1, n + 1):
        owner[0] = row
        column = 0
        slack = np.full(m + 1, np.inf)
        used = np.zeros(m + 1, dtype=bool)
        while True:
            used[column] = True
            here = owner[column]
            free = ~used[1:]
            reduced = cost[here - 1] - u[here] - v[1:]
            better = free & (reduced < slack[1:])
            slack[1:][better] = reduced[better]
            way[1:][better] = column
            candidates = np.where(free, slack[1:], np.inf)
            nearest = int(np.argmin(candidates)) + 1
            delta = candidates[nearest - 1]
            u[owner[used]] += delta
            v[used] -= delta
            slack[~used] -= delta
            column = nearest
            if owner[column] == 0:
                break
        while column:
            previous = way[column]
            owner[column] = owner[previous]
            column = previous
    pairs = np.full(n, -1, dtype=np.intp)
    held = np.flatnonzero(owner[1:]) + 1
    pairs[owner[held] - 1] = held - 1
    return pairs


def _solve_one(weights: np.ndarray) -> np.ndarray:
    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError:
        return hungarian(weights)
    rows, columns = linear_sum_assignment(weights, maximize=True)
    pairs = np.full(weights.shape[0], -1, dtype=np.intp)
    pairs[rows] = columns
    return pairs


def assign_many(
    weights: np.ndarray, offsets: np.ndarray, gold_sizes: np.ndarray, pred_sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Solve many lists at once.

    ``weights`` is flat: list k's matrix (``gold_sizes[k]`` x ``pred_sizes[k]``, row-major)
    starts at ``offsets[k]``. Returns (list, position in ``weights``) of every pair made, in
    list order; pairs of weight 0 are dropped (a weight of 0 means "never the same item").
    """
    lists_out: list[np.ndarray] = []
    cells_out: list[np.ndarray] = []
    shapes = np.stack([gold_sizes, pred_sizes], axis=1)
    solvable = (gold_sizes > 0) & (pred_sizes > 0)
    if not solvable.any():
        empty = np.zeros(0, dtype=np.intp)
        return empty, empty
    unique_shapes, inverse = np.unique(shapes[solvable], axis=0, return_inverse=True)
    solvable_lists = np.flatnonzero(solvable)
    for number, (n, m) in enumerate(unique_shapes):
        lists = solvable_lists[inverse.reshape(-1) == number]
        n, m = int(n), int(m)
        cells = offsets[lists][:, None] + np.arange(n * m)[None, :]
        block = weights[cells].reshape(len(lists), n, m)
        if n == 1 or m == 1:
            best = block.reshape(len(lists), n * m).argmax(axis=1)
            gold_at, pred_at = (
                (np.zeros_like(best), best) if n == 1 else (best, np.zeros_like(best))
            )
            picks = [(gold_at, pred_at)]
        elif max(n, m) <= PERMUTATION_LIMIT:
            picks = [_by_permutations(block, n, m)]
        else:
            picks = []
            for k in range(len(lists)):
                columns = _solve_one(block[k])
                rows = np.flatnonzero(columns >= 0)
                picks.append((rows, columns[rows]))
            flat_lists = np.repeat(np.arange(len(lists)), [len(r) for r, _ in picks])
            gold_at = np.concatenate([r for r, _ in picks])
            pred_at = np.concatenate([c for _, c in picks])
            lists_out.append(lists[flat_lists])
            cells_out.append(offsets[lists[flat_lists]] + gold_at * m + pred_at)
            continue
        gold_at, pred_at = picks[0]
        if gold_at.ndim == 1:  # one pair per list
            lists_out.append(lists)
            cells_out.append(offsets[lists] + gold_at * m + pred_at)
        else:  # (lists, pairs) arrays
            pairs = gold_at.shape[1]
            lists_out.append(np.repeat(lists, pairs))
            cells_out.append((offsets[lists][:, None] + gold_at * m + pred_at).reshape(-1))
    list_of_pair = np.concatenate(lists_out)
    cell_of_pair = np.concatenate(cells_out)
    keep = weights[cell_of_pair] > 0
    order = np.lexsort((cell_of_pair[keep], list_of_pair[keep]))
    return list_of_pair[keep][order], cell_of_pair[keep][order]


def _by_permutations(block: np.ndarray, n: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Best assignment of every (n x m) matrix of ``block`` by scoring all permutations."""
    size = max(n, m)
    square = np.zeros((len(block), size, size))
    square[:, :n, :m] = block
    permutations = _permutations(size)
    chosen = np.empty(len(block), dtype=np.intp)
    step = max(1, _CHUNK_CELLS // (len(permutations) * size))
    rows = np.arange(size)
    for start in range(0, len(block), step):
        part = square[start : start + step]
        totals = part[:, rows, permutations].sum(axis=2)  # (lists, permutations)
        chosen[start : start + step] = totals.argmax(axis=1)
    columns = permutations[chosen]  # (lists, size): column of each padded row
    # keep real rows paired with real columns
    gold_at = np.broadcast_to(rows, columns.shape)
    real = (gold_at < n) & (columns < m)
    pairs = int(real[0].sum())
    return gold_at[real].reshape(-1, pairs), columns[real].reshape(-1, pairs)
