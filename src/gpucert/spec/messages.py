"""What a key of a user document takes, in words, and pydantic's errors said as the fix.

pydantic says what failed in its own terms ("Input should be a valid dictionary or instance of DriftSpec"); a user
wrote YAML and needs to hear what the key takes and how to write it ("a mapping with the key confidence, e.g.
`drift: {confidence: 0.999}`"). Everything here is read from the models themselves (types, bounds, choices,
defaults, `examples`), so a field added tomorrow is described without a line written for it. Pure.
"""

from __future__ import annotations

import enum
import math
import types
import typing
from typing import Any

import annotated_types
import yaml
from pydantic import BaseModel, Tag
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, PydanticUndefined

from gpucert.spec.durations import Said

__all__ = [
    "bounds",
    "describe",
    "example",
    "field_at",
    "homes",
    "members_with",
    "shown",
    "translate",
    "upper",
    "what_is",
]

Loc = tuple[str | int, ...]


def _strip(tp: Any) -> tuple[Any, list[Any]]:
    """The type inside Annotated[...] and X | None, and every constraint met on the way."""
    meta: list[Any] = []
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            meta += _flat(tp.__metadata__)
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp, meta
            tp = args[0]
        else:
            return tp, meta


def _flat(meta: typing.Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for m in meta:
        out += _flat(m.metadata) if isinstance(m, FieldInfo) else [m]
    return out


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    return {(f.alias or name): f for name, f in model.model_fields.items()}


def _tagged(tp: Any) -> dict[str, type[BaseModel]]:
    """The members of a union of documents told apart by `kind`, by their tag ({} for any other type)."""
    out: dict[str, type[BaseModel]] = {}
    for member in typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else ():
        m, _ = _strip(member)
        kind = _fields(m).get("kind") if _is_model(m) else None
        tags = typing.get_args(_strip(kind.annotation)[0]) if kind is not None else ()
        out.update({t: m for t in tags if isinstance(t, str)})
    return out


def _by_tag(tp: Any, tag: str) -> Any:
    """The member of a union told apart by a pydantic `Tag` (a callable discriminator) named `tag`, or None."""
    for member in typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else ():
        if any(isinstance(m, Tag) and m.tag == tag for m in getattr(member, "__metadata__", ())):
            return member
    return None


def field_at(model: type[BaseModel], loc: Loc) -> tuple[Any, list[Any], FieldInfo | None]:
    """The type at pydantic's location `loc` of `model` (union tags and all), its constraints, and the field that
    declares it; (None, [], None) where the location leads nowhere a model declares."""
    tp: Any = model
    meta: list[Any] = []
    field: FieldInfo | None = None
    for part in loc:
        tp, _ = _strip(tp)
        origin = typing.get_origin(tp)
        if _is_model(tp) and isinstance(part, str) and part in _fields(tp):
            field = _fields(tp)[part]
            tp, meta = field.annotation, _flat(field.metadata)
        elif origin is list and isinstance(part, int):
            tp, meta, field = typing.get_args(tp)[0], [], None
        elif origin is dict and isinstance(part, str):
            tp, meta, field = typing.get_args(tp)[1], [], None
        elif isinstance(part, str) and part in _tagged(tp):
            tp = _tagged(tp)[part]
        elif isinstance(part, str) and _by_tag(tp, part) is not None:
            tp = _by_tag(tp, part)
        else:
            return None, [], None
    inner, more = _strip(tp)
    return inner, meta + more, field


def members_with(model: type[BaseModel], loc: Loc, key: str) -> list[str]:
    """The tags of the union members at `loc` (parent of an unknown `key`) that do take `key`: `gang` is a key of
    the kubernetes target, not of the simulated one."""
    tp: Any = model
    for end in range(len(loc), -1, -1):  # the union sits above its tag in pydantic's location
        tp, _, _ = field_at(model, loc[:end])
        if _tagged(tp):
            break
    return sorted(tag for tag, m in _tagged(tp).items() if key in _fields(m))


def homes(model: type[BaseModel], key: str) -> list[str]:
    """Where else in a document of `model` the key `key` belongs, as dotted paths of the mappings that take it
    (`gang` belongs under `target`): a key written in the wrong section is told where it goes."""
    found: list[str] = []
    _homes(model, key, "", found, set())
    return found


def _homes(tp: Any, key: str, at: str, found: list[str], seen: set[Any]) -> None:
    tp, _ = _strip(tp)
    origin = typing.get_origin(tp)
    if _is_model(tp):
        if tp in seen:
            return
        seen = seen | {tp}
        fields = _fields(tp)
        if key in fields and at:
            found.append(at)
        for name, f in fields.items():
            _homes(f.annotation, key, f"{at}.{name}" if at else name, found, seen)
    elif origin is list:
        _homes(typing.get_args(tp)[0], key, f"{at}[]", found, seen)
    elif origin is dict:
        _homes(typing.get_args(tp)[1], key, f"{at}.<name>", found, seen)
    elif origin in (typing.Union, types.UnionType):
        for member in typing.get_args(tp):
            _homes(member, key, at, found, seen)


def bounds(meta: list[Any]) -> str:
    """The range the constraints allow, in words ("" when none): "from 1 to 64", "of at least 1", "above 0 and
    below 1"."""
    ge = next((m.ge for m in meta if isinstance(m, annotated_types.Ge)), None)
    gt = next((m.gt for m in meta if isinstance(m, annotated_types.Gt)), None)
    le = next((m.le for m in meta if isinstance(m, annotated_types.Le)), None)
    lt = next((m.lt for m in meta if isinstance(m, annotated_types.Lt)), None)
    high = f"{_n(le)}" if le is not None else (f"below {_n(lt)}" if lt is not None else None)
    if ge is not None:
        return f"from {_n(ge)} to {high}" if high else f"of at least {_n(ge)}"
    if gt is not None:
        return f"above {_n(gt)}" + (f" and {'at most ' if le is not None else ''}{high}" if high else "")
    return "" if high is None else (f"of at most {high}" if le is not None else high)


def upper(meta: list[Any]) -> float | None:
    """The highest value the constraints allow (None when unbounded above)."""
    for m in meta:
        for attr in ("le", "lt"):
            if isinstance(getattr(m, attr, None), int | float):
                return float(getattr(m, attr))
    return None


def _n(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe(tp: Any, meta: list[Any] | None = None) -> str:
    """What a key of type `tp` takes, in words."""
    tp, more = _strip(tp)
    meta = [*(meta or []), *more]
    origin = typing.get_origin(tp)
    if tp in (bool, int, float, str):
        return _scalar(tp, meta)
    if origin is typing.Literal:
        return _choices([str(v) for v in typing.get_args(tp)])
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _choices([str(m.value) for m in tp])
    if _is_model(tp):
        keys = ", ".join(_fields(tp))
        return f"a mapping with the key{'s' if len(_fields(tp)) > 1 else ''} {keys}"
    if origin is list:
        return f"a list{_length(meta, 'item')}, each item {describe(typing.get_args(tp)[0])}"
    if origin is dict:
        length = _length(meta, "item").removeprefix(" of ")
        return (
            f"a mapping of names to values{f' ({length})' if length else ''}, each {describe(typing.get_args(tp)[1])}"
        )
    if _tagged(tp):
        return f"a mapping whose `kind` is {_choices(sorted(_tagged(tp)))}"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(describe(a) for a in typing.get_args(tp) if a is not type(None))
    return "a value of the form `gpucert schema` describes"


def _scalar(tp: type, meta: list[Any]) -> str:
    if tp is bool:
        return "true or false"
    if tp is str:
        said = next((m.words for m in meta if isinstance(m, Said)), None)
        return said or "text" + _length(meta, "character")
    limits = bounds(meta)
    return f"{'a whole number' if tp is int else 'a number'}{' ' + limits if limits else ''}"


def _length(meta: list[Any], unit: str) -> str:
    """ " of at least 1 item", " of 1 to 63 characters": the length the constraints allow ("" when any)."""
    low = next((m.min_length for m in meta if isinstance(m, annotated_types.MinLen)), 0)
    high = next((m.max_length for m in meta if isinstance(m, annotated_types.MaxLen)), None)
    if high is not None:
        return f" of at most {high} {unit}s" + ("" if not low else ", not empty" if low == 1 else f", at least {low}")
    return f" of at least {low} {unit}{'s' if low > 1 else ''}" if low else ""


def _choices(values: list[str]) -> str:
    return values[0] if len(values) == 1 else f"one of {', '.join(values)}"


def example(key: str | int, tp: Any, field: FieldInfo | None) -> str | None:
    """A line the user can copy: the field's own `examples`, else a mapping's defaults; None when neither."""
    value: Any = None
    if field is not None and field.examples:
        value = field.examples[0]
    else:
        tp, _ = _strip(tp)
        if _is_model(tp):
            defaults = {k: f.default for k, f in _fields(tp).items() if f.default not in (PydanticUndefined, None)}
            value = {k: v.value if isinstance(v, enum.Enum) else v for k, v in defaults.items()}
            if not value or not all(isinstance(v, int | float | str | bool) for v in value.values()):
                return None
    if value is None:
        return None
    line = yaml.safe_dump({key: value}, default_flow_style=True, sort_keys=False, width=200).strip()
    return f"e.g. `{line.removeprefix('{').removesuffix('}')}`"


def what_is(value: Any) -> str:
    """What YAML made of `value`, in a user's words."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return "a yes/no value"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return "a value"  # pragma: no cover - YAML makes nothing else but dates


def shown(value: Any) -> str:
    """`value` as the user wrote it, cut to one short line."""
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float) and not math.isfinite(value):
        text = str(value)
    elif isinstance(value, str):
        text = repr(value)
    else:
        text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()
    return text if len(text) <= 60 else text[:57] + "..."


_OUT_OF_RANGE = ("greater_than", "greater_than_equal", "less_than", "less_than_equal", "multiple_of")


def translate(model: type[BaseModel], err: ErrorDetails, key: str | int) -> str:
    """pydantic's error `err` (a type or constraint that failed) as what was wrong and how to write it."""
    tp, meta, field = field_at(model, tuple(p for p in err["loc"] if isinstance(p, str | int)))
    kind, value = err["type"], err.get("input")
    takes = describe(tp, meta) if tp is not None else None
    if kind in _OUT_OF_RANGE or kind == "finite_number":
        problem = f"{shown(value)} is {'not a finite number' if kind == 'finite_number' else 'out of range'}"
    elif kind in ("literal_error", "enum"):
        problem = f"{shown(value)} is not one of the choices"
    elif kind in ("string_too_short", "too_short", "string_too_long", "too_long"):
        problem = f"{shown(value)} is too {'short' if 'short' in kind else 'long'}" if value else "it is empty"
    elif kind == "string_pattern_mismatch":
        pattern = (err.get("ctx") or {}).get("pattern", "")
        problem = f"{shown(value)} is not of the form this key takes: it should match pattern {pattern!r}"
    elif takes is not None:
        problem = f"{shown(value)} is {what_is(value)}"
    else:
        problem = f"{shown(value)} is not accepted here"
    if takes is None:
        return f"{problem}; write the value `gpucert schema` describes for this key"
    copy = example(key, tp, field)
    return f"{problem}; write {takes}{', ' + copy if copy else ''}"
