"""Optimal assignment of list items: which predicted item is which gold item.

Each (gold list, predicted list) pair has a weight matrix (gold items x predicted items); an
assignment pairs each gold item with at most one predicted item and back, maximising the total
weight (weights are >= 0; 0 means "never the same item"). Lists are solved many at a time:

- lists where each item has at most one candidate (every row and column of the matrix holds
  at most one positive weight: the usual case, most items found once or not at all): those
  candidates are the optimal pairs, whatever the list's length;
- other lists whose larger side has at most ``PERMUTATION_LIMIT`` items (6): every permutation of
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
    starts at ``offsets[k]``. Returns (list, position in ``weights``) of every pair made, sorted;
    pairs of weight 0 are dropped (a weight of 0 means "never the same item").
    """
    positive = np.flatnonzero(weights > 0)
    owner = np.searchsorted(offsets, positive, side="right") - 1
    simple = _one_candidate_each(positive, owner, offsets, gold_sizes, pred_sizes)
    lists_out = [owner[simple[owner]]]
    cells_out = [positive[simple[owner]]]
    hard = np.flatnonzero(~simple)
    shapes = np.stack([gold_sizes[hard], pred_sizes[hard]], axis=1)
    unique_shapes, inverse = np.unique(shapes, axis=0, return_inverse=True)
    for number, (n, m) in enumerate(unique_shapes.tolist()):
        lists = hard[inverse.reshape(-1) == number]
        block = weights[offsets[lists][:, None] + np.arange(n * m)[None, :]].reshape(-1, n, m)
        if min(n, m) == 1:  # one pair: the best cell
            best = block.reshape(len(lists), n * m).argmax(axis=1)
            gold_at, pred_at = best[:, None] // m, best[:, None] % m
        elif max(n, m) <= PERMUTATION_LIMIT:
            gold_at, pred_at = _by_permutations(block, n, m)
        else:
            pairs = [_solve_one(matrix) for matrix in block]  # (n,) column per row, -1: none
            gold_at = np.stack([np.arange(n)] * len(lists))
            pred_at = np.stack(pairs)
            if n > m:  # every column is used: keep the rows that got one, m per list
                keep = pred_at >= 0
                gold_at, pred_at = gold_at[keep].reshape(-1, m), pred_at[keep].reshape(-1, m)
        lists_out.append(np.repeat(lists, gold_at.shape[1]))
        cells_out.append((offsets[lists][:, None] + gold_at * m + pred_at).reshape(-1))
    list_of_pair = np.concatenate(lists_out)
    cell_of_pair = np.concatenate(cells_out)
    keep = weights[cell_of_pair] > 0
    order = np.lexsort((cell_of_pair[keep], list_of_pair[keep]))
    return list_of_pair[keep][order], cell_of_pair[keep][order]


def _one_candidate_each(
    positive: np.ndarray,
    owner: np.ndarray,
    offsets: np.ndarray,
    gold_sizes: np.ndarray,
    pred_sizes: np.ndarray,
) -> np.ndarray:
    """Per list: True when no row and no column of its matrix holds two positive weights
    (``positive``: the flat positions of positive weights; ``owner``: their lists)."""
    local = positive - offsets[owner]
    width = np.maximum(pred_sizes[owner], 1)
    row = (np.cumsum(gold_sizes) - gold_sizes)[owner] + local // width
    column = (np.cumsum(pred_sizes) - pred_sizes)[owner] + local % width
    crowded_rows = np.bincount(row, minlength=int(gold_sizes.sum()))[row] > 1
    crowded_columns = np.bincount(column, minlength=int(pred_sizes.sum()))[column] > 1
    crowded = np.bincount(owner[crowded_rows | crowded_columns], minlength=len(offsets))
    return crowded == 0


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
