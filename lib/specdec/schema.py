"""What the study's typed data files share: a strict, frozen pydantic base and error messages
that name the field (``claims[3].derive.rule: ...``).

Pydantic v2 for the same reasons as :mod:`specdec.profiles` (vLLM's own configs are pydantic
models, so it is installed wherever vLLM is): frozen models, forbidden unknown keys, no silent
coercion, discriminated unions and the location of every bad field. The functions below turn
a location into a field path against any root model; :mod:`specdec.claims.ledger` uses them.
(:mod:`specdec.profiles` keeps its own copy for now, rooted at ``Profile``.)
"""
from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Annotated, Any, Literal, Mapping, TypeVar

from pydantic import BaseModel, ConfigDict, Strict, ValidationError
from typing_extensions import is_typeddict


class StrictModel(BaseModel):
    # strict: no "3" -> 3 or "yes" -> True; an int is still accepted (and stored) as a float.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


_T = TypeVar("_T")
#: A YAML list, stored as a tuple (strict mode alone would refuse a list); items stay strict.
Seq = Annotated[tuple[_T, ...], Strict(False)]


def _unwrap(tp: Any) -> Any:
    """Annotated[X, ...] -> X; X | None -> X (a union of several types is kept)."""
    while typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _unwrap(members[0])
    return tp


def _tagged_member(tp: Any, tag: Any) -> Any:
    """The member of discriminated union ``tp`` whose Literal tag is ``tag``, else None."""
    if typing.get_origin(tp) not in (typing.Union, types.UnionType):
        return None
    for member in typing.get_args(tp):
        if isinstance(member, type) and issubclass(member, BaseModel):
            for f in member.model_fields.values():
                if typing.get_origin(f.annotation) is Literal and tag in typing.get_args(f.annotation):
                    return member
    return None


def _child(tp: Any, key: Any) -> Any:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        f = tp.model_fields.get(key)
        return f.annotation if f else None
    if is_typeddict(tp):
        return typing.get_type_hints(tp).get(key)
    if typing.get_origin(tp) in (tuple, list):
        return typing.get_args(tp)[0]
    if typing.get_origin(tp) in (dict, Mapping, typing.Mapping):
        return typing.get_args(tp)[1]
    return None


def _locate(loc: tuple, root: type[BaseModel]) -> tuple[str, Any]:
    """A pydantic error location as a field path (``claims[3].derive.rule``), with the type
    that holds its last key. Discriminated unions put the tag into the location; it is no
    field, so it is left out. A union member's name (``float``, ``literal['any']``) that
    pydantic adds after a field is left out too."""
    tp: Any = root
    parent: Any = None
    path = ""
    for part in loc:
        tp = _unwrap(tp)
        member = None if isinstance(part, int) else _tagged_member(tp, part)
        if member is not None:
            tp = member
            continue
        if part == "[key]":  # pydantic's marker for an error in a mapping's key
            path += " (the key)"
            continue
        if tp is None or (typing.get_origin(tp) in (typing.Union, types.UnionType)
                          and not isinstance(part, int)):
            break  # inside a plain union: pydantic names the member it tried, not a field
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        parent, tp = tp, _child(tp, part)
    return path, _unwrap(parent)


def _keys(tp: Any) -> list[str]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return sorted(tp.model_fields)
    if is_typeddict(tp):
        return sorted(tp.__required_keys__ | tp.__optional_keys__)
    return []


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def error_message(err: Mapping[str, Any], root: type[BaseModel]) -> str:
    """One pydantic error as ``field.path: what is wrong``."""
    path, parent = _locate(tuple(err["loc"]), root)
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        field = str(ctx.get("discriminator", "")).strip("'")
        path = f"{path}.{field}" if path else field
        if kind == "union_tag_not_found":
            return f"{path}: required key is missing"
        expected = [t.strip().strip("'") for t in str(ctx["expected_tags"]).split(",")]
        close = difflib.get_close_matches(str(ctx["tag"]), expected, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{path}: {ctx['tag']!r} is not one of {', '.join(map(repr, expected))}{hint}"
    if kind == "extra_forbidden":
        allowed = ", ".join(_keys(parent)) or "none"
        return f"{path}: unknown key (allowed here: {allowed})"
    if kind == "missing":
        return f"{path}: required key is missing"
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        close = difflib.get_close_matches(str(err["input"]), expected, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{path}: {_short(err['input'])} is not one of {ctx.get('expected')}{hint}"
    if kind == "too_short":  # pydantic names the stored type (a tuple), not the YAML list
        return f"{path}: a list of at least {ctx.get('min_length', 1)} item(s) is required " \
               f"(got {_short(err['input'])})"
    if kind == "value_error":
        # Our validators' messages say what is wrong; at the top level they name the field.
        message = str(ctx.get("error", err["msg"]))
        return f"{path}: {message}" if path else message
    return f"{path or '(top level)'}: {err['msg']} (got {_short(err['input'])})"


def error_lines(error: ValidationError, root: type[BaseModel]) -> list[str]:
    """Every error of a validation against ``root``, one field path and message each; errors
    of one field (one per union member tried) are reported once."""
    lines: list[str] = []
    seen: set[str] = set()
    for err in error.errors():
        line = error_message(err, root)
        field = line.split(": ", 1)[0]
        if field not in seen:
            seen.add(field)
            lines.append(line)
    return lines
