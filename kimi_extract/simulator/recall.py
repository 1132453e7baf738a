"""Long documents in the quality model: an answer key that says where each value is written.

The simulator cannot read, so a long document's right answer is given as an answer key whose
values are **located**: a list item carries ``"@at": "<its text in the document>"`` (one or
more lines), an object may carry ``"@at": {"field": "<the text the field is read from>"}`` for
its scalar fields and ``"@decoys": {"field": [[value, "<text>"], ...]}``: look-alikes a
careless reader takes for it (a page subtotal for the total). Such a key is too long to travel
with every chunk, so it is registered with the simulator (``Simulator(answer_keys=[...])``;
``KeyIndex``); a json_schema request whose user text holds no ``kx-answer-key:`` line is
answered from the registered key whose located texts it contains most (an inline key may be
located too). Requests that match no key are answered as before.

``read`` gives the answer a model reading the request's text makes, before the value mistakes
of ``quality.corrupt``:

- a located value is known only when its text is in the request (whitespace runs count as one
  space; lines of the form ``--- page N ---`` and blank lines are skipped): a scalar whose text
  is absent is ``UNSEEN`` (null where the schema allows it, an empty text for a text that
  cannot be null, else made up), or, with
  probability ``Recall.decoy``, a look-alike whose text is present;
- a list item whose whole text is present is **visible**; one whose text is cut by the start
  or the end of the request (its first lines end the text, its last lines start a block of it:
  the text after the request's header or a page, or a line of it is cut in the middle) is
  **cut**: it is answered with the fields whose values can be
  read in its visible part, the others ``UNSEEN`` (a row the model sees half of);
- the **first answer** to a text lists each visible or cut item with probability
  ``Recall.found``, in document order, and stops after ``Recall.max_items`` items of one list
  (a model that stops early on a long list); a **follow-up** answer in the same conversation
  (the request holds earlier JSON answers, as ``run_documents(passes=N)`` sends) lists only
  items no earlier answer listed (an earlier item with half of its field values equal counts),
  each with probability ``Recall.later``, also at most ``max_items``, and repeats the earlier
  answer's other fields;
- the draws are seeded by the request and by how many identical requests came before it
  (``sample``): the same conversation gets the same answer, but sending an identical request
  again draws anew, as a model sampling at temperature 1 (what Kimi fixes) would.

An item in the text two chunks share is visible to both: both list it (the repeat a merge must
remove). Everything is deterministic given the requests and their order.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigurationError

#: The key's marks: where an item or a field is written, and its look-alikes.
AT = "@at"
DECOYS = "@decoys"
_SPACES = re.compile(r"\s+")
_PAGE_LABEL = re.compile(r"^--- page \d+ ---$")
#: The shortest piece of a cut line that counts as the item being cut there.
MIN_CUT_CHARS = 4


class _Unseen:
    """A value the reader cannot see: null where the schema allows it, else made up."""

    def __repr__(self) -> str:
        return "UNSEEN"


UNSEEN: Any = _Unseen()


@dataclass(frozen=True)
class Recall:
    """How much of a long list one answer finds (module docstring); rates in 0..1."""

    found: float = 1.0
    later: float = 1.0
    max_items: int | None = None
    decoy: float = 0.0

    def __post_init__(self) -> None:
        for name in ("found", "later", "decoy"):
            rate = getattr(self, name)
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
                raise ConfigurationError(f"Recall.{name} must be a rate in [0, 1], got {rate!r}")
        most = self.max_items
        if most is not None and (isinstance(most, bool) or not isinstance(most, int) or most < 1):
            raise ConfigurationError(f"Recall.max_items must be None or >= 1, got {most!r}")

    def scaled(self, factor: float) -> Recall:
        """Misses (``1 - found``, ``1 - later``) and decoys times ``factor`` (capped)."""
        return Recall(
            found=max(0.0, 1 - min(1.0, (1 - self.found) * factor)),
            later=max(0.0, 1 - min(1.0, (1 - self.later) * factor)),
            max_items=self.max_items,
            decoy=min(1.0, self.decoy * factor),
        )


def _norm(line: str) -> str:
    return _SPACES.sub(" ", line).strip()


def _lines(text: str, starts: list[bool] | None = None) -> list[str]:
    """The text's content lines, normalized (blank lines and page labels skipped); ``starts``
    gets, per line, whether it starts a block (the text's first line, or after a blank line or
    a page label)."""
    out = []
    block = True
    for line in text.split("\n"):
        line = _norm(line)
        if not line or _PAGE_LABEL.match(line):
            block = True
            continue
        out.append(line)
        if starts is not None:
            starts.append(block)
        block = False
    return out


def located(key: Any) -> bool:
    """Whether an answer key marks where any of its values are written."""
    if isinstance(key, Mapping):
        return AT in key or any(located(v) for v in key.values())
    if isinstance(key, list):
        return any(located(v) for v in key)
    return False


def _anchors(key: Any) -> Iterator[str]:
    """Every located text of a key."""
    if isinstance(key, Mapping):
        at = key.get(AT)
        if isinstance(at, str):
            yield at
        elif isinstance(at, Mapping):
            yield from (t for t in at.values() if isinstance(t, str))
        for name, value in key.items():
            if name not in (AT, DECOYS):
                yield from _anchors(value)
    elif isinstance(key, list):
        for value in key:
            yield from _anchors(value)


class KeyIndex:
    """The answer keys registered with a simulator, found by the lines of their located texts."""

    def __init__(self, keys: Sequence[Any]) -> None:
        self.keys = list(keys)
        self._by_line: dict[str, set[int]] = {}
        for number, key in enumerate(self.keys):
            if not isinstance(key, Mapping):
                raise ConfigurationError(
                    f"answer_keys[{number}] must be a JSON object, got {type(key).__name__}"
                )
            for text in _anchors(key):
                for line in _lines(text)[:1]:
                    self._by_line.setdefault(line, set()).add(number)

    def __len__(self) -> int:
        return len(self.keys)

    def match(self, text: str) -> Any:
        """The key whose located texts ``text`` holds most (their first lines), or None."""
        hits: dict[int, int] = {}
        for line in _lines(text):
            for number in self._by_line.get(line, ()):
                hits[number] = hits.get(number, 0) + 1
        if not hits:
            return None
        return self.keys[max(hits, key=lambda n: (hits[n], -n))]


class _Text:
    """The request's text as a reader sees it: its lines, and where an item's text is."""

    def __init__(self, text: str) -> None:
        self.starts: list[bool] = []
        self.lines = _lines(text, self.starts)
        self.joined = "\n".join(self.lines)
        self.positions: dict[str, list[int]] = {}
        for index, line in enumerate(self.lines):
            self.positions.setdefault(line, []).append(index)

    def holds(self, text: str) -> bool:
        wanted = _lines(text)
        if not wanted:
            return False
        for start in self.positions.get(wanted[0], ()):
            if self.lines[start : start + len(wanted)] == wanted:
                return True
        return False

    def visible_part(self, text: str) -> str | None:
        """The whole text when present, the part a cut shows, or None."""
        wanted = _lines(text)
        if not wanted:
            return None
        if self.holds(text):
            return "\n".join(wanted)
        lines = self.lines
        if not lines:
            return None
        # its first lines end the request (the last one perhaps cut in the middle)
        for count in range(len(wanted), 0, -1):
            head = wanted[:count]
            tail = lines[-count:]
            if tail[:-1] == head[:-1] and _cut_start(head[-1], tail[-1]):
                return "\n".join(tail)
        # its last lines start a block of the request (a page, or the text after its header)
        for first in (i for i in range(min(len(lines), 8)) if self.starts[i]):
            for count in range(len(wanted), 0, -1):
                rest = wanted[-count:]
                seen = lines[first : first + count]
                if len(seen) == count and seen[1:] == rest[1:] and _cut_end(rest[0], seen[0]):
                    return "\n".join(seen)
        return None


def _cut_start(line: str, seen: str) -> bool:
    """``seen`` is ``line`` or its start (cut in the middle)."""
    return seen == line or (len(seen) >= MIN_CUT_CHARS and line.startswith(seen))


def _cut_end(line: str, seen: str) -> bool:
    """``seen`` is ``line`` or its end."""
    return seen == line or (len(seen) >= MIN_CUT_CHARS and line.endswith(seen))


def _readable(value: Any, part: str) -> bool:
    """Whether ``value`` can be read in ``part`` (as written, or as a number is printed)."""
    if value is None or isinstance(value, dict | list):
        return False
    folded = _norm(part).casefold()
    if isinstance(value, int | float) and not isinstance(value, bool):
        forms = {f"{value:,.2f}", f"{value:.2f}", f"{value:,}", str(value)}
        if float(value).is_integer():
            forms.add(str(int(value)))
        # a number as a whole token: "4" is not read in "SKU-024"
        return any(
            re.search(rf"(?<![\w.,]){re.escape(form)}(?![\w]|[.,]\d)", folded) for form in forms
        )
    return _norm(str(value)).casefold() in folded


def _similar(item: Mapping[str, Any], other: Any) -> bool:
    """An earlier answer's item counts as this one when half its field values are equal."""
    if not isinstance(other, Mapping):
        return False
    fields = [k for k in item if k not in (AT, DECOYS)]
    if not fields:
        return False
    same = sum(1 for k in fields if _key(item.get(k)) == _key(other.get(k)))
    return 2 * same >= len(fields)


def _key(value: Any) -> Any:
    if isinstance(value, str):
        return _norm(value).casefold()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(float(value), 6)
    return value


def previous_answers(messages: Sequence[Any]) -> list[Any]:
    """The JSON objects the assistant answered earlier in the conversation, in order."""
    out = []
    for message in messages:
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, str):
            continue
        try:
            value = json.loads(content)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def read(key: Any, text: str, recall: Recall, rng: random.Random, previous: Sequence[Any]) -> Any:
    """The answer (plain values, no ``@`` marks) a model reading ``text`` gives from a located
    key (module docstring); ``previous``: the conversation's earlier answers."""
    return _Reader(_Text(text), recall, rng, list(previous)).node(key, [*previous])


class _Reader:
    def __init__(
        self, text: _Text, recall: Recall, rng: random.Random, previous: list[Any]
    ) -> None:
        self.text = text
        self.recall = recall
        self.rng = rng
        self.follow_up = bool(previous)

    def node(self, key: Any, earlier: list[Any]) -> Any:
        if isinstance(key, Mapping):
            return self.mapping(key, earlier)
        if isinstance(key, list):
            if any(isinstance(item, Mapping) and AT in item for item in key):
                return self.items(key, earlier)
            return [self.node(item, []) for item in key]
        return key

    def mapping(self, key: Mapping[str, Any], earlier: list[Any]) -> dict[str, Any]:
        at: Mapping[str, Any] = key[AT] if isinstance(key.get(AT), Mapping) else {}
        decoys: Mapping[str, Any] = key[DECOYS] if isinstance(key.get(DECOYS), Mapping) else {}
        out: dict[str, Any] = {}
        for name, value in key.items():
            if name in (AT, DECOYS):
                continue
            before = [e.get(name) for e in earlier if isinstance(e, Mapping)]
            if isinstance(value, Mapping | list):
                out[name] = self.node(value, [b for b in before if b is not None])
            elif self.follow_up and before and name in earlier[-1]:
                out[name] = before[-1]  # a follow-up repeats the other fields
            elif isinstance(at.get(name), str):
                out[name] = self.scalar(value, at[name], decoys.get(name))
            else:
                out[name] = value
        return out

    def scalar(self, value: Any, where: str, decoys: Any) -> Any:
        if self.text.holds(where):
            return value
        shown = [d[0] for d in decoys or () if self._shows(d)]
        if shown and self.rng.random() < self.recall.decoy:
            return shown[-1]
        return UNSEEN

    def _shows(self, decoy: Any) -> bool:
        return isinstance(decoy, list | tuple) and len(decoy) == 2 and self.text.holds(decoy[1])

    def items(self, key: list[Any], earlier: list[Any]) -> list[Any]:
        given = [i for answer in earlier if isinstance(answer, list) for i in answer]
        rate = self.recall.later if self.follow_up else self.recall.found
        out: list[Any] = []
        for item in key:
            if not isinstance(item, Mapping):
                continue
            part = self.text.visible_part(str(item.get(AT, "")))
            if part is None:
                continue
            if self.follow_up and any(_similar(item, other) for other in given):
                continue
            if self.rng.random() >= rate:
                continue
            if self.recall.max_items is not None and len(out) >= self.recall.max_items:
                break
            whole = self.text.holds(str(item.get(AT, "")))
            out.append(
                {
                    name: self.node(value, []) if whole or _readable(value, part) else UNSEEN
                    for name, value in item.items()
                    if name not in (AT, DECOYS)
                }
            )
        return out
