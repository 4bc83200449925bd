"""Every field of every document users write, fed a wrong value: the cases of test_document_sweep.py.

The walk reads the models themselves (as `gpucert schema` exports them), so a field added tomorrow is swept too.
"""

from __future__ import annotations

import copy
import enum
import itertools
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

Key = tuple[str | int, ...]
WRONG_KEY = "notAKey"


@dataclass(frozen=True)
class Case:
    """`value` written at `key` of `document` (after `setup`: a union member chosen by its tag)."""

    document: str
    key: Key
    value: Any
    what: str  # wrong type, wrong choice, negative, zero, nan, huge, unknown key
    setup: tuple[tuple[Key, Any], ...] = ()

    @property
    def dotted(self) -> str:
        out = ""
        for part in self.key:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
        return out

    def written(self, base: dict[str, Any]) -> dict[str, Any]:
        doc = copy.deepcopy(base)
        for key, value in self.setup:
            _put(doc, key, copy.deepcopy(value))
        _put(doc, self.key, copy.deepcopy(self.value))
        return doc

    def id(self) -> str:
        return f"{self.document}:{self.dotted}={self.what}"


def _put(doc: Any, key: Key, value: Any) -> None:
    cur = doc
    for part, nxt in itertools.pairwise(key):
        fresh: Any = [] if isinstance(nxt, int) else {}
        if isinstance(part, int):
            while len(cur) <= part:
                cur.append(copy.deepcopy(fresh))
            if not isinstance(cur[part], type(fresh)):
                cur[part] = fresh
        elif not isinstance(cur.get(part), type(fresh)):
            cur[part] = fresh
        cur = cur[part]
    last = key[-1]
    if isinstance(last, int):
        while len(cur) <= last:
            cur.append(None)
    cur[last] = value


def unwrap(tp: Any) -> tuple[Any, list[Any]]:
    """The type inside Annotated[...] and X | None, with the Annotated constraints met on the way."""
    meta: list[Any] = []
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            meta += list(getattr(tp, "__metadata__", ()))
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp, meta
            tp = args[0]
        else:
            return tp, meta


def _lower(meta: list[Any]) -> float | None:
    for m in meta:
        for attr in ("gt", "ge"):
            if getattr(m, attr, None) is not None:
                return float(getattr(m, attr))
    return None


def _wrong_values(tp: Any, meta: list[Any]) -> list[tuple[str, Any]]:
    """The wrong values a field of type `tp` is fed."""
    origin = typing.get_origin(tp)
    if tp in (int, float):
        cases: list[tuple[str, Any]] = [
            ("text", "many"),
            ("list", [1]),
            ("yes/no", True),
            ("percent", "2%"),
            ("exponent-text", "1e3"),
            ("nan", float("nan")),
            ("huge", 10**30 if tp is int else 1e308),
            ("negative", -1),
            ("zero", 0),
        ]
        return cases + ([("fraction", 2.5)] if tp is int else [])
    if tp is str:
        return [("mapping", {"a": 1}), ("list", ["a"]), ("number", 5)]
    if tp is bool:
        return [("text", "maybe"), ("number", 3)]
    if origin is typing.Literal or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        return [("choice", "no-such-choice"), ("list", [1])]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [("number", 60), ("text", "text"), ("list", [1])]
    if origin is list:
        return [("text", "text"), ("mapping", {"a": 1})]
    if origin is dict:
        return [("number", 60), ("text", "text"), ("list", [1])]
    return [("list", [[1]])]


def _tag(model: type[BaseModel]) -> str | None:
    kind = model.model_fields.get("kind")
    if kind is None:
        return None
    args = typing.get_args(unwrap(kind.annotation)[0])
    return args[0] if len(args) == 1 else None


def walk(
    document: str, model: type[BaseModel], base: Any, key: Key = (), setup: tuple[tuple[Key, Any], ...] = ()
) -> Iterator[Case]:
    """Every wrong value for every field of `model` (its document `base`, which may be {} where absent)."""
    yield Case(document, (*key, WRONG_KEY), 1, "unknown key", setup)
    for name, field in model.model_fields.items():
        k = (*key, field.alias or name)
        tp, meta = unwrap(field.annotation)
        meta += list(field.metadata)
        for what, value in _wrong_values(tp, meta):
            yield Case(document, k, value, what, setup)
        sub = base.get(k[-1]) if isinstance(base, dict) else None
        yield from _inner(document, tp, sub, k, setup)


def _inner(document: str, tp: Any, base: Any, key: Key, setup: tuple[tuple[Key, Any], ...]) -> Iterator[Case]:
    origin = typing.get_origin(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        yield from walk(document, tp, base if isinstance(base, dict) else {}, key, setup)
    elif origin is list:
        first = base[0] if isinstance(base, list) and base else None
        yield from _item(document, typing.get_args(tp)[0], first, (*key, 0), setup)
    elif origin is dict:
        name = next(iter(base), "name") if isinstance(base, dict) and base else "name"
        sub = base.get(name) if isinstance(base, dict) else None
        yield from _item(document, typing.get_args(tp)[1], sub, (*key, name), setup)
    elif origin in (typing.Union, types.UnionType):
        for member in typing.get_args(tp):
            m, _ = unwrap(member)
            if not (isinstance(m, type) and issubclass(m, BaseModel)):
                continue
            tag = _tag(m)
            own = isinstance(base, dict) and base.get("kind") == tag
            chosen = base if own else {"kind": tag}
            more = setup if own or tag is None else (*setup, (key, chosen))
            yield from walk(document, m, chosen, key, more)


def _item(document: str, tp: Any, base: Any, key: Key, setup: tuple[tuple[Key, Any], ...]) -> Iterator[Case]:
    """An item of a list or a value of a mapping: wrong values for a plain one, then what is inside it."""
    item, meta = unwrap(tp)
    plain = not (isinstance(item, type) and issubclass(item, BaseModel))
    if plain and typing.get_origin(item) not in (typing.Union, types.UnionType):
        for what, value in _wrong_values(item, meta):
            yield Case(document, key, value, what, setup)
    yield from _inner(document, item, base, key, setup)


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))
