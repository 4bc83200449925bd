"""Reading the user's YAML documents into typed models, with errors that name file, key path and line.

Pure of everything but the file system: specs, fleets and baselines all come through `load_document`.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails, InitErrorDetails, PydanticCustomError

from gpucert.errors import ConfigError
from gpucert.spec.messages import bounds, describe, field_at, homes, members_with, translate, upper, what_is

__all__ = ["Document", "Key", "Problem", "load_document", "load_yaml"]

Key = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


class Document(BaseModel):
    """Base of every user-written document: unknown keys are errors, values are not coerced across types."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        """Strict numbers in every user document, once for all of them: pydantic's lax mode reads `true` as 1, "3"
        as 3 and 2.0 as 2 (its conversion table), so a count, seed, factor or figure written as one of those is
        refused here. Only the numbers are strict: enums and dates still parse from YAML's strings. (A field
        validator for "*" cannot do it: pydantic refuses one on a union's discriminator field.)"""
        if not isinstance(data, dict):
            return data
        for keys, field in _number_fields(cls):
            for key in keys:
                problem = _not_a_number(field.annotation, data[key], [key], field.metadata) if key in data else None
                if problem:
                    raise ValidationError.from_exception_data(cls.__name__, [problem])
        return data


_NUMBER_FIELDS: dict[type[BaseModel], list[tuple[set[str], FieldInfo]]] = {}


def _number_fields(model: type[BaseModel]) -> list[tuple[set[str], FieldInfo]]:
    """The fields of `model` that hold a number (in a list or mapping too), with the keys each may be written as;
    worked out once per model (every document validates through it)."""
    found = _NUMBER_FIELDS.get(model)
    if found is None:
        found = [({name, f.alias or name}, f) for name, f in model.model_fields.items() if _holds_numbers(f.annotation)]
        _NUMBER_FIELDS[model] = found
    return found


def _holds_numbers(tp: Any) -> bool:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if _number_kind(tp) is not None:
        return True
    if typing.get_origin(tp) is typing.Literal or (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return False
    return any(_holds_numbers(a) for a in typing.get_args(tp) if a is not Ellipsis)


def _number_kind(tp: Any) -> type | None:
    """int or float where `tp` is a number (or a number or None) and nothing else; None for any other type."""
    if typing.get_origin(tp) is typing.Literal:  # Literal[1, 2, 4]: `true` equals 1 to Python
        values = typing.get_args(tp)
        return int if all(isinstance(v, int) and not isinstance(v, bool) for v in values) else None
    args = [a for a in typing.get_args(tp) if a is not type(None)] if _is_union(tp) else [tp]
    if args and all(a in (int, float) for a in args):
        return float if float in args else int
    return None


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _not_a_number(tp: Any, value: Any, loc: list[str | int], meta: list[Any] | None = None) -> InitErrorDetails | None:
    """Why `value` at `loc` is no number where the type `tp` wants one (in a list or a mapping too), or None."""
    meta = list(meta or [])
    while typing.get_origin(tp) is typing.Annotated:
        meta += list(tp.__metadata__)
        tp = typing.get_args(tp)[0]
    kind = _number_kind(tp)
    if kind is not None:
        why = _why_not(kind, value, [m for x in meta for m in (x.metadata if isinstance(x, FieldInfo) else [x])])
        error = PydanticCustomError("value_error", "Value error, {why}", {"why": why}) if why else None
        return InitErrorDetails(type=error, loc=tuple(loc), input=value) if error else None
    if _is_union(tp):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        return _not_a_number(members[0], value, loc, meta) if len(members) == 1 else None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2 and isinstance(value, dict):
        found = (_not_a_number(args[1], v, [*loc, k]) for k, v in value.items())
        return next((p for p in found if p), None)
    if isinstance(origin, type) and issubclass(origin, Sequence | set | frozenset) and isinstance(value, list):
        items = [args[0]] * len(value) if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis) else list(args)
        found = (_not_a_number(t, v, [*loc, i]) for i, (t, v) in enumerate(zip(items, value, strict=False)))
        return next((p for p in found if p), None)
    return None


# the whole numbers every JSON reader holds exactly (RFC 8259, section 6: [-(2**53)+1, (2**53)-1] is interoperable):
# a count, seed or limit past it is a typo, and it would not survive the run's own JSON in another reader
JSON_INT = 2**53 - 1


def _why_not(kind: type, value: Any, meta: list[Any]) -> str | None:
    """What is wrong with `value` where a number of `kind` (int or float, within `meta`'s bounds) goes, and the
    number to write instead; None when it is a number of that kind (its range is pydantic's to check)."""
    number = (
        isinstance(value, int | float) and not isinstance(value, bool) and (kind is float or isinstance(value, int))
    )
    if number and not (isinstance(value, int) and abs(value) > JSON_INT):
        return None  # the common case, first: a number of the kind (its range is pydantic's to check)
    limits = bounds(meta)
    takes = f"{'a whole number' if kind is int else 'a number'}{' ' + limits if limits else ''}"
    if isinstance(value, bool):
        return f"{str(value).lower()} is a yes/no value, not a number; write {takes}"
    if isinstance(value, str):
        return f"{value!r} is text, not a number; {_number_from_text(value, kind, meta) or 'write ' + takes}"
    if kind is int and isinstance(value, float):
        if not math.isfinite(value):
            return f"{value} is not a number; write {takes}"
        return f"{value!r} is not a whole number; write {takes}"
    if kind is int and isinstance(value, int) and abs(value) > JSON_INT:
        return f"{value} is beyond any sensible value (more than 2^53); write {takes}"
    return None


def _number_from_text(text: str, kind: type, meta: list[Any]) -> str | None:
    """The fix for a number YAML read as text: quotes, a percent sign, or a form YAML 1.1 does not read as a number
    (`1e3`: PyYAML's float needs a dot, `1.0e+3`; yaml/resolver.py, Resolver float pattern, PyYAML 6.0)."""
    stripped = text.strip()
    plain = yaml.safe_load(stripped) if stripped and "\n" not in stripped else None
    if isinstance(plain, int | float) and not isinstance(plain, bool):
        return f"write it without quotes ({stripped}), or YAML reads it as text"
    if stripped.endswith("%"):
        try:
            share = float(stripped[:-1]) / 100
        except ValueError:
            return None
        top = upper(meta)
        if kind is float and (top is None or top <= 1):
            return f"write the share as a fraction: {share:g} for {stripped}"
        return f"write the number alone, without the % sign ({stripped[:-1].strip()})"
    try:
        number = float(stripped.replace("_", ""))
    except ValueError:
        return None
    if not math.isfinite(number):
        return None
    written = str(int(number)) if number.is_integer() and abs(number) < 1e15 else repr(number)
    return f"YAML 1.1 reads an exponent only with a dot and a sign (1.0e+3); write {written}"


MAX_BYTES = 4 << 20  # a spec, fleet or baseline is a few kilobytes; a larger file is not one of them


class _Refused(yaml.MarkedYAMLError):
    """Valid YAML that gpucert's documents do not accept (an alias, a key written twice)."""


class _StrictLoader(yaml.SafeLoader):
    """YAML as gpucert's documents use it: no aliases (no `*ref`, so no alias bombs and no value that silently
    stands for another), and no key written twice in one mapping (YAML would keep the last one silently)."""

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _Refused(
                None,
                None,
                f"an alias (*{event.anchor}) refers to another value: aliases are not allowed in gpucert documents; "
                "write the value out",
                event.start_mark,
            )
        return super().compose_node(parent, index)

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> Any:
        # YAML's timestamp type builds a datetime from any dddd-dd-dd; one that does not exist (2020-02-30) raises
        # ValueError from datetime (yaml/constructor.py, SafeConstructor.construct_yaml_timestamp, PyYAML 6.0)
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as exc:
            raise _Refused(
                None,
                None,
                f"{node.value} is not a date ({exc}): write one that exists as YYYY-MM-DD, or quote it for text",
                node.start_mark,
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        for key_node, value_node in node.value:
            if isinstance(value_node, yaml.ScalarNode) and value_node.tag == "tag:yaml.org,2002:timestamp":
                try:
                    self.construct_yaml_timestamp(value_node)
                except _Refused as exc:
                    exc.problem = f"{key_node.value}: {exc.problem}"
                    raise
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key is refused by the constructor itself
            if duplicate:
                raise _Refused(
                    "while reading a mapping",
                    node.start_mark,
                    f"key {key!r} is written twice; keep one (YAML would silently keep the last)",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _StrictLoader.construct_yaml_timestamp)


def _line_map(node: yaml.Node, key: Key, lines: dict[Key, int]) -> None:
    lines[key] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            lines[(*key, name)] = k.start_mark.line + 1
            _line_map(v, (*key, name), lines)
            lines[(*key, name)] = k.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_map(item, (*key, i), lines)


def load_yaml(path: Path) -> tuple[Any, dict[Key, int]]:
    """The document at `path` and the line of every key in it."""
    try:
        if path.exists() and not path.is_file():
            raise ConfigError("is not a regular file (a folder, a device or a pipe); name the YAML file", path=path)
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise ConfigError(f"the file is larger than {MAX_BYTES >> 20} MiB: not a gpucert document", path=path)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(
            "file not found; check the path (relative paths are relative to the spec)", path=path
        ) from None
    except IsADirectoryError:
        raise ConfigError("is a folder; name the YAML file", path=path) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text ({exc.reason} at byte {exc.start}): name the YAML file", path=path) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read: {exc.strerror or exc}; check the path and its permissions", path=path
        ) from None
    return _parse(text, path)


def _parse(text: str, path: Path) -> tuple[Any, dict[Key, int]]:
    try:
        loader = _StrictLoader(text)  # the reader refuses a control character here, before any parsing
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError(
            f"YAML not accepted: character #x{exc.character:04x} ({exc.reason}); fix the YAML", path=path, line=line
        ) from None
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
        lines: dict[Key, int] = {}
        if node is not None:
            _line_map(node, (), lines)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        what = "YAML not accepted" if isinstance(exc, _Refused) else "YAML syntax error"
        raise ConfigError(f"{what}: {problem}; fix the YAML", path=path, line=mark.line + 1 if mark else None) from None
    except RecursionError:
        raise ConfigError("the document is nested too deeply to be a gpucert document", path=path) from None
    finally:
        loader.dispose()
    return data, lines


def _key_path(loc: Key) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _nearest_line(loc: Key, lines: dict[Key, int]) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _valid_keys(model: type[BaseModel], loc: Key) -> list[str]:
    """The keys the mapping at `loc` accepts (pydantic's location, union tags included), or [] when unknown."""
    tp, _, _ = field_at(model, loc)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return sorted((f.alias or name) for name, f in tp.model_fields.items())
    return []


def _unknown_key(model: type[BaseModel], loc: Key, doc_loc: Key, data: Any) -> str:
    others = members_with(model, loc[:-1], str(loc[-1])) if loc else []
    if others:  # a key of another kind of the same section: `gang` under a simulated target
        section = next((str(p) for p in reversed(doc_loc[:-1]) if isinstance(p, str)), "entry")
        kind = _at(data, doc_loc[:-1]).get("kind") if isinstance(_at(data, doc_loc[:-1]), dict) else None
        kinds = " or ".join(others)
        return (
            f"{loc[-1]} applies to the {kinds} {section} only (kind: {kinds}), and this {section} is "
            f"{'kind: ' + str(kind) if kind else 'of another kind'}; remove {loc[-1]}, or set kind: {kinds}"
        )
    valid = _valid_keys(model, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6) if loc else []
    elsewhere = sorted(set(homes(model, str(loc[-1])))) if loc and not close else []
    if 0 < len(elsewhere) <= 3:  # written in the wrong section: say where it goes
        return f"unknown key here; {loc[-1]} belongs under {' or '.join(elsewhere)}: move it there"
    if close:
        return f"unknown key; did you mean {close[0]}? (the keys here are {', '.join(valid)})"
    if valid:
        return f"unknown key; remove it, or use one of the keys here: {', '.join(valid)}"
    return "unknown key; remove it or check its spelling against `gpucert schema`"


def _at(data: Any, loc: Key) -> Any:
    for part in loc:
        data = data[part]
    return data


Problem = tuple[Key, str]


def load_document(path: Path, model: type[M], *, check: Callable[[M], list[Problem]] | None = None) -> M:
    """Parse and validate `path` as `model`; the first problem becomes a ConfigError naming key and line.

    `check` finds problems that span keys (a fault naming a node the fleet does not have) and returns them
    as (key path, message) so they are reported like any other.
    """
    data, lines = load_yaml(path)
    if data is None:
        raise ConfigError("the document is empty; write the document described by `gpucert schema`", path=path)
    if not isinstance(data, dict):
        raise ConfigError(
            f"expected a mapping at the top level, got {what_is(data)}; write the document `gpucert schema` describes",
            path=path,
            line=1,
        )
    try:
        doc = model.model_validate(data)
    except RecursionError:
        raise ConfigError("the document is nested too deeply to be a gpucert document", path=path) from None
    except ValidationError as exc:
        # an unknown key first: a misspelt key also reports the key it was meant to be as missing
        errors = sorted(exc.errors(), key=lambda e: {"extra_forbidden": 0, "missing": 2}.get(e["type"], 1))
        doc_loc, msg = _said(model, errors[0], data)
        more = len(errors) - 1
        if more:
            msg += f" (and {more} more problem{'s' if more > 1 else ''})"
        raise ConfigError(msg, path=path, key=_key_path(doc_loc), line=_nearest_line(doc_loc, lines)) from None
    for key, message in check(doc) if check is not None else []:
        raise ConfigError(message, path=path, key=_key_path(key), line=_nearest_line(key, lines))
    return doc


def _said(model: type[BaseModel], err: ErrorDetails, data: Any) -> tuple[Key, str]:
    """pydantic's error as the document's key it is about and what to do there."""
    loc: Key = tuple(p for p in err["loc"] if isinstance(p, str | int))
    # pydantic puts the discriminator or a union member in the location; keep only keys of the document
    doc_loc = _document_loc(data, loc, named=err["type"] in ("extra_forbidden", "missing"))
    if err["type"] == "extra_forbidden":
        return doc_loc, _unknown_key(model, loc, doc_loc, data)
    if err["type"] == "missing":
        return doc_loc, "required key is missing; add it"
    if err["type"] == "value_error":  # one of gpucert's validators: its message says what to do
        return doc_loc, err["msg"].removeprefix("Value error, ")
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return _kind(model, loc, doc_loc, err)
    return doc_loc, translate(model, err, doc_loc[-1] if doc_loc else "")


def _kind(model: type[BaseModel], loc: Key, doc_loc: Key, err: ErrorDetails) -> tuple[Key, str]:
    """A `kind` that no member of a union of documents has (or none at all), said at the `kind` key."""
    tp, _, _ = field_at(model, loc)
    kinds = describe(tp).removeprefix("a mapping whose `kind` is ")
    if err["type"] == "union_tag_not_found":
        return (*doc_loc, "kind"), f"required key is missing; add it: kind is {kinds}"
    tag = (err.get("ctx") or {}).get("tag")
    return (*doc_loc, "kind"), f"{tag!r} is not a kind this key takes; write {kinds}"


def _document_loc(data: Any, loc: Key, named: bool = True) -> Key:
    """The part of pydantic's error location that names keys of the document (not union tags or validators);
    `named`: the last part is a key the document lacks or should not have (a missing or an unknown key)."""
    out: list[str | int] = []
    cur: Any = data
    for i, part in enumerate(loc):
        in_dict = isinstance(cur, dict) and part in cur
        in_list = isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur)
        if in_dict or in_list:
            out.append(part)
            cur = cur[part]
        elif named and isinstance(cur, dict) and i == len(loc) - 1:
            out.append(part)  # a missing or unknown key: name it
        elif cur is None or not isinstance(cur, dict | list):
            break
    return tuple(out)
