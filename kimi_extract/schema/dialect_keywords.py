"""walle's keyword validators, one method per keyword (``_KEYWORD_CHECKS`` in ``dialect``).

Each checks one keyword of one node, in walle's order and words (MoonshotAI/walle
``keyword_validators.go``); ``dialect._Walle`` runs them in sorted keyword order.
"""

from __future__ import annotations

from typing import Any

from ..kimi import RESERVED_PROPERTY_NAMES, SchemaLimits
from .dialect_base import _COMMON, _ROOT_ONLY, Path, _is_number, _Pass
from .gojson import go_value

_ENUM_PARTNERS = frozenset({"string", "integer", "number", "boolean"})


class _Keywords(_Pass):
    """The keyword checks of a validation run."""

    limits: SchemaLimits
    #: the node being checked lies under a property or $defs name with both braces
    braced: bool

    def unreachable(self, path: Path, keyword: str) -> None:
        """walle re-reads the node at ``path`` before checking ``keyword`` (enum, required,
        $ref, anyOf), splitting a path part with braces as ``anyOf{index}``: under a braced
        name the lookup fails, "invalid path"."""
        if path and self.braced:
            raise self.fail((*path, keyword), f"invalid path: {'.'.join(path)}")

    def check_type(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if isinstance(value, str):
            return
        if isinstance(value, list):
            if self.ultra and len(set(map(str, value))) != len(value):
                raise self.fail((*path, "type"), "duplicate types in type array")
            return
        raise self.fail(path, "type must be string or array of strings")

    def check_properties(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "properties")
        if not isinstance(value, dict):
            raise self.fail(where, "properties must be an object")
        for name, sub in value.items():
            if self.ultra and name == "":
                raise self.fail(where, "property name cannot be empty")
            if name in RESERVED_PROPERTY_NAMES:
                raise self.fail(
                    where, f"property name '{name}' is reserved for JSON Schema keywords"
                )
            if not isinstance(sub, dict):
                raise self.fail(where, f"property schema for '{name}' must be an object")

    def check_required(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "required")
        if not isinstance(value, list):
            raise self.fail(where, "required must be an array")
        if not value:
            return
        for name in value:
            if not isinstance(name, str):
                raise self.fail(where, "items in required array must be strings")
            if self.ultra and name == "":
                raise self.fail(where, "property names in required array cannot be empty")
        if self.ultra:
            seen: set[str] = set()
            for name in value:
                if name in seen:
                    raise self.fail(where, f"duplicate items in required array: {name}")
                seen.add(name)
        self.unreachable(path, "required")
        props = node.get("properties")
        if self.ultra:
            kind = node.get("type")
            if kind != "object" and kind != ["object"]:
                raise self.fail(where, "required keyword must be used with object")
            if not isinstance(props, dict):
                raise self.fail(where, "required specified but 'properties' keyword is missing")
        declared = props if isinstance(props, dict) else {}
        for name in value:
            if name not in declared:
                raise self.fail(where, f"required property '{name}' is not defined in properties")

    def check_enum(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "enum")
        if not isinstance(value, list):
            raise self.fail(where, "enum must be an array")
        if not value:
            raise self.fail(where, "enum array cannot be empty")
        if len(value) > self.limits.max_enum_items:
            raise self.fail(
                where, f"enum array cannot have more than {self.limits.max_enum_items} items"
            )
        self.unreachable(path, "enum")
        if "type" not in node:
            raise self.fail(path, "type is not defined")
        kind = node["type"]
        if isinstance(kind, str):
            types = [kind]
        elif isinstance(kind, list):
            if not all(isinstance(item, str) for item in kind):
                raise self.fail(path, "type array must be an array of strings")
            types = list(kind)
        else:
            raise self.fail(path, "invalid type value")
        if len(types) > 2 or (len(types) == 2 and "null" not in types):
            raise self.fail(
                path,
                "when type is array and enum is specified, currently only 2 types are "
                "supported, one must be null, and the other can be string/integer/number/boolean",
            )
        if len(types) == 2:
            other = next(t for t in types if t != "null") if types != ["null", "null"] else "null"
            if other not in _ENUM_PARTNERS:
                raise self.fail(path, f"invalid type combination with enum: {other} + null")
        for item in value:
            if not any(self.type_match(item, kind, where) for kind in types):
                raise self.fail(
                    where,
                    f"enum value ({go_value(item)}) does not match any type in [{' '.join(types)}]",
                )
        counted = {"string", "number", "integer"}
        if counted & set(types) and len(value) > self.limits.enum_string_check_threshold:
            total = sum(
                len(item.encode()) if isinstance(item, str) else len(go_value(item))
                for item in value
                if isinstance(item, str) or _is_number(item)
            )
            if total > self.limits.max_enum_string_length:
                raise self.fail(
                    where,
                    f"total string length of enum values ({total}) exceeds maximum limit of "
                    f"{self.limits.max_enum_string_length} characters when enum has more than "
                    f"{self.limits.enum_string_check_threshold} values",
                )

    def type_match(self, value: Any, kind: str, where: Path) -> bool:
        if kind == "string":
            return isinstance(value, str)
        if kind == "number":
            if not _is_number(value):
                raise self.fail(where, "not a valid number")
            return True
        if kind == "integer":
            if not _is_number(value) or not float(value).is_integer():
                raise self.fail(where, "not a valid integer")
            return True
        if kind == "boolean":
            return isinstance(value, bool)
        if kind == "null":
            return value is None
        if kind == "array":
            return isinstance(value, list)
        if kind == "object":
            return isinstance(value, dict)
        raise self.fail(where, "invalid type")

    def check_items(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if not isinstance(value, dict):
            raise self.fail((*path, "items"), "items must be an object")

    def check_ref(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "$ref")
        if not isinstance(value, str):
            raise self.fail(where, "$ref must be a string")
        if value == "#":
            self.refs[value] = None
            return
        if not value.startswith("#/$defs/"):
            raise self.fail(where, "references must start with #/$defs/")
        if value == "#/$defs/":
            raise self.fail(where, "definition name cannot be empty")
        if "$defs" not in self.root:
            raise self.fail(where, f"$defs not found for reference: {value}")
        self.unreachable(path, "$ref")
        if self.ultra:
            for key in sorted(node):
                if key != "$ref" and not (not path and key in _ROOT_ONLY) and key not in _COMMON:
                    raise self.fail(
                        path, f"keyword '{key}' is not allowed at the same level as $ref"
                    )
        self.refs[value] = None

    def check_description(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if not isinstance(value, str):
            raise self.fail((*path, "description"), "description must be a string")

    def check_any_of(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "anyOf")
        if not isinstance(value, list):
            raise self.fail(where, "anyOf must be an array")
        if not value or len(value) > self.limits.max_any_of_items:
            raise self.fail(where, f"anyOf must have 1-{self.limits.max_any_of_items} items")
        if not all(isinstance(branch, dict) for branch in value):
            raise self.fail(where, "schema in anyOf must be an object")
        self.unreachable(path, "anyOf")
        if self.ultra:
            for key in sorted(node):
                if key != "anyOf" and not (not path and key in _ROOT_ONLY) and key not in _COMMON:
                    raise self.fail(
                        path, f"keyword '{key}' is not allowed at the same level as anyOf"
                    )

    def check_additional(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if not isinstance(value, bool | dict):
            raise self.fail(
                (*path, "additionalProperties"),
                "additionalProperties must be a boolean or an object",
            )

    def check_defs(self, node: dict[str, Any], value: Any, path: Path) -> None:
        where = (*path, "$defs")
        if not isinstance(value, dict):
            raise self.fail(where, "$defs must be an object")
        for name in sorted(value):
            if name == "":
                raise self.fail(where, "$defs property name cannot be empty")
            if "/" in name:
                raise self.fail(where, f"$defs property name '{name}' cannot contain '/' character")
            if not isinstance(value[name], dict):
                raise self.fail(where, f"$defs schema must be object: {name}")
            stack: list[tuple[dict[str, Any], Path]] = [(value[name], (*where, name))]
            while stack:
                current, at = stack.pop()
                for key, sub in current.items():
                    if "/" in key:
                        raise self.fail(
                            at[:-1], f"$defs property name '{key}' cannot contain '/' character"
                        )
                    if isinstance(sub, dict):
                        stack.append((sub, (*at, key)))
                    elif isinstance(sub, list):
                        stack.extend(
                            (item, (*at, f"{key}[{i}]"))
                            for i, item in enumerate(sub)
                            if isinstance(item, dict)
                        )

    def check_id(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if value is not None and not isinstance(value, str):
            raise self.fail((*path, "$id"), "$id must be a string")

    def check_pattern(self, node: dict[str, Any], value: Any, path: Path) -> None:
        if value is not None and not isinstance(value, str):
            raise self.fail((*path, "pattern"), "pattern must be a string")
