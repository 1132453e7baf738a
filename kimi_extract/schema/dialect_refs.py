"""walle's reference pass: every ``$ref`` resolved, expanded in context, able to end.

MoonshotAI/walle ``validator.go`` (``PostValidateRefs``, ``TraverseAndCheckRefs``,
``ExpandRef``, ``CheckRefContext``, ``CheckRefTermination``) and ``CalculateDefDepths``
(``_DefDepths``: each ``$defs`` entry's ``properties`` depth, which a ``$ref`` site adds to its
own). walle writes these recursively; here they run on explicit stacks (``_run``), so a schema
thousands of levels deep is judged without ``RecursionError``.
"""

from __future__ import annotations

from typing import Any

from .dialect_base import _COMMON, Path, _Pass, _Problem, _Recursion, _run


class _References(_Pass):
    """The reference pass of a validation run."""

    def resolve(self, ref: str, path: Path = ()) -> dict[str, Any]:
        if ref == "#":
            return self.root
        if not ref.startswith("#/$defs/"):
            raise self.fail((*path, "$ref"), "only local references are supported")
        current: Any = self.root
        for part in ref[2:].split("/"):
            current = current.get(part) if isinstance(current, dict) else None
            if not isinstance(current, dict):
                raise self.fail(path, f"invalid $ref path: {ref}")
        return current

    def check_refs(self) -> None:
        for ref in self.refs:
            self.resolve(ref)
        try:
            needs_end = not self.terminates(self.root, set(), ())
        except _Problem:
            needs_end = True
        self.check_ref_sites(needs_end)

    def check_ref_sites(self, needs_end: bool) -> None:
        """Every ``$ref`` site, in document order (pre-order, on an explicit stack): its target
        in context, and, while no ancestor ends the recursion, that the target can end."""
        stack: list[tuple[dict[str, Any], bool, Path]] = [(self.root, needs_end, ())]
        while stack:
            node, needs_end, path = stack.pop()
            if "$ref" in node:
                expanded = self.expand(node, path)
                self.ref_context(node, expanded, path)
                if needs_end and not self.terminates(expanded, set(), path):
                    raise self.fail(
                        path, "detected infinite recursion without termination condition"
                    )
            children: list[tuple[dict[str, Any], bool, Path]] = []
            for key, value in node.items():
                if key == "$defs":
                    continue
                if isinstance(value, dict):
                    if key == "properties" and node.get("required") == []:
                        needs_end = False
                    elif key == "additionalProperties":
                        needs_end = False
                    children.append((value, needs_end, (*path, key)))
                elif isinstance(value, list) and key == "anyOf":
                    for index, branch in enumerate(value):
                        if isinstance(branch, dict):
                            children.append((branch, needs_end, (*path, f"anyOf{{{index}}}")))
            stack.extend(reversed(children))

    def expand(self, node: dict[str, Any], path: Path) -> dict[str, Any]:
        """The ``$ref``'s target; a chain of bare ``$ref`` defs is followed to its end."""
        ref = node["$ref"]
        if not isinstance(ref, str):
            raise self.fail((*path, "$ref"), "$ref must be a string")
        seen = {ref}
        current = dict(self.resolve(ref))
        kept: dict[str, Any] = {}
        layer, previous = ref, ""
        while isinstance(current.get("$ref"), str) or "$ref" in current:
            if any(key != "$ref" and key not in _COMMON for key in current):
                break
            following = current["$ref"]
            if not isinstance(following, str):
                raise self.fail((*path, "$ref"), "$ref must be a string")
            if following in seen:
                break
            seen.add(following)
            target = self.resolve(following)
            for key in current:
                if key not in _COMMON:
                    continue
                if key in kept:
                    if self.ultra:
                        outer = previous or layer
                        where = tuple(outer[2:].split("/")) if outer.startswith("#/") else path
                        raise self.fail(
                            where,
                            f'conflicting keywords found after $ref expansion: keyword "{key}" '
                            'appears at multiple levels in a chained "$ref"; keep it in only one '
                            "place",
                        )
                    continue
                kept[key] = current[key]
            previous, layer = layer, following
            current = dict(target)
        return {**current, **kept}

    def ref_context(self, parent: dict[str, Any], target: dict[str, Any], path: Path) -> None:
        outer = set(parent) - {"$ref"}
        clash = self.conflicts(outer, target)
        if clash:
            raise self.fail(
                path,
                f"conflicting keywords found after $ref expansion: keywords ({', '.join(clash)}) "
                'are defined both alongside "$ref" and in the referenced schema; remove the '
                "duplicates",
            )
        if ("type" in parent and "anyOf" in target) or ("type" in target and "anyOf" in parent):
            raise self.fail(
                path,
                "invalid schema after $ref expansion: (when using anyOf, type should be defined "
                "in anyOf items instead of the parent schema)",
            )
        branches = target.get("anyOf")
        if isinstance(branches, list):
            for branch in branches:
                if isinstance(branch, dict):
                    clash = self.conflicts(outer - {"anyOf"}, branch)
                    if clash:
                        raise self.fail(
                            path,
                            f"conflicting keywords found in anyOf after ref expansion: keywords "
                            f'({", ".join(clash)}) are defined alongside "$ref" and inside anyOf '
                            "in the referenced schema; define them in only one place",
                        )
        last = path[-1] if path else ""
        if (
            last in ("additionalProperties", "items")
            or last.startswith("anyOf")
            or (len(path) >= 2 and path[-2] == "properties")
            or len(path) <= 1
        ):
            return
        raise self.fail(path, "$ref is not allowed in this schema.")

    def terminates(self, node: dict[str, Any], seen: set[str], path: Path) -> bool:
        """Whether a value of ``node`` can be finite (walle's termination rule for refs)."""
        return _run(self._terminates(node, seen, path))

    def _terminates(self, node: dict[str, Any], seen: set[str], path: Path) -> _Recursion[bool]:
        """``terminates`` as a generator: each ``yield`` is a nested call (see ``_run``).

        ``path`` stays the ``$ref`` site's (nested calls do not extend it, so a chain thousands
        of levels deep holds no path per level); the messages below cannot be reached once the
        first pass has checked every property, branch and reference.
        """
        kind = node.get("type")
        checked = ""
        if isinstance(kind, str):
            if kind not in ("object", "array"):
                return True
            checked = kind
        elif isinstance(kind, list):
            for item in kind:
                if isinstance(item, str) and item not in ("object", "array"):
                    return True
                checked = str(item)
        if checked == "array":
            items = node.get("items")
            if not items:
                return True
            if isinstance(items, dict) and (yield self._terminates(items, seen, path)):
                return True
        if checked == "object":
            required = node.get("required")
            props = node.get("properties")
            if not required or not isinstance(props, dict) or not props:
                return True
            wanted = (
                set(r for r in required if isinstance(r, str))
                if isinstance(required, list)
                else set()
            )
            for name, sub in props.items():
                if not isinstance(sub, dict):
                    raise self.fail((*path, name), "property schema must be an object")
                if name in wanted and (yield self._terminates(sub, seen, path)):
                    return True
        branches = node.get("anyOf")
        if isinstance(branches, list):
            if not branches:
                return True
            reached: set[str] = set()
            for branch in branches:
                if not isinstance(branch, dict):
                    raise self.fail((*path, "anyOf"), "schema in anyOf must be an object")
                mine = set(seen)
                if (yield self._terminates(branch, mine, path)):
                    seen |= mine
                    return True
                reached |= mine
            seen |= reached
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in seen:
                return False
            seen.add(ref)
            try:
                target = self.resolve(ref, path)
            except _Problem:
                raise self.fail(path, f"invalid $ref path: {ref}") from None
            return (yield self._terminates(target, seen, path))
        return not node


class _DefDepths:
    """walle's precomputed depth (nested ``properties`` levels) of each ``$defs`` entry.

    walle keys them by JSON-pointer-like text (``#/$defs/A``, ``#/$defs/A/properties/b``) that a
    ``$ref`` site looks up. Here a pointer is interned part by part as a number, so a chain
    thousands of levels deep costs no text per level. Results that did not depend on the refs
    already on the path are memoized, so a schema of many shared definitions stays linear.
    """

    def __init__(self, walle: _References) -> None:
        self.walle = walle
        self.ids: dict[tuple[int, str], int] = {}
        self.table: dict[int, int] = {}
        self.memo: dict[int, int] = {}

    def compute(self) -> _DefDepths:
        defs = self.walle.root.get("$defs")
        if isinstance(defs, dict):
            for name, sub in defs.items():
                if isinstance(sub, dict):
                    _run(self.measure(sub, self.pointer(f"#/$defs/{name}"), set()))
        return self

    def depth_of(self, ref: str) -> int:
        """The depth walle looks up for a ``$ref`` site (0 when it computed none)."""
        key = 0
        for part in ref.split("/"):
            found = self.ids.get((key, part))
            if found is None:
                return 0
            key = found
        return self.table.get(key, 0)

    def pointer(self, text: str, parent: int = 0) -> int:
        """The number of ``text`` (parts separated by ``/``) appended to ``parent``."""
        key = parent
        for part in text.split("/"):
            found = self.ids.get((key, part))
            if found is None:
                found = self.ids[(key, part)] = len(self.ids) + 1
            key = found
        return key

    def measure(
        self, node: dict[str, Any], where: int, seen: set[str]
    ) -> _Recursion[tuple[int, bool]]:
        """(depth, whether a ref was cut short because it was already on the path), as a
        generator for ``_run``."""
        if not node:
            return 0, False
        if where in self.memo:
            self.table[where] = self.memo[where]
            return self.memo[where], False
        self.table[where] = 0
        best, cut = 0, False
        ref = node.get("$ref")
        if isinstance(ref, str):
            if ref in seen:
                cut = True
            else:
                seen.add(ref)
                try:
                    target = self.walle.resolve(ref)
                except _Problem:
                    target = None
                if target is not None:
                    best, sub_cut = yield self.measure(target, self.pointer(ref), seen)
                    cut |= sub_cut
        props = node.get("properties")
        if isinstance(props, dict):
            level = 1
            for name, sub in props.items():
                if isinstance(sub, dict):
                    at = self.pointer(f"properties/{name}", where)
                    inner, sub_cut = yield self.measure(sub, at, set(seen))
                    level, cut = max(level, 1 + inner), cut | sub_cut
            best = max(best, level)
        branches = node.get("anyOf")
        if isinstance(branches, list):
            for index, branch in enumerate(branches):
                if isinstance(branch, dict):
                    at = self.pointer(f"anyOf/{index}", where)
                    inner, sub_cut = yield self.measure(branch, at, set(seen))
                    best, cut = max(best, inner), cut | sub_cut
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            at = self.pointer("additionalProperties", where)
            inner, sub_cut = yield self.measure(extra, at, set(seen))
            best, cut = max(best, inner), cut | sub_cut
        self.table[where] = best
        if not cut:
            self.memo[where] = best
        return best, cut
