"""Reading the user's YAML documents into typed models, with errors that name file, key path and line.

Pure of everything but the file system: specs, fleets and baselines all come through `load_document`.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from gpucert.errors import ConfigError

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
        for name, field in cls.model_fields.items():
            for key in {name, field.alias or name}:
                problem = _not_a_number(field.annotation, data[key], [key]) if key in data else None
                if problem:
                    raise ValidationError.from_exception_data(cls.__name__, [problem])
        return data


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


def _not_a_number(tp: Any, value: Any, loc: list[str | int]) -> InitErrorDetails | None:
    """Why `value` at `loc` is no number where the type `tp` wants one (in a list or a mapping too), or None."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    kind = _number_kind(tp)
    if kind is not None:
        why = _why_not(kind, value)
        error = PydanticCustomError("value_error", "Value error, {why}", {"why": why}) if why else None
        return InitErrorDetails(type=error, loc=tuple(loc), input=value) if error else None
    if _is_union(tp):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        return _not_a_number(members[0], value, loc) if len(members) == 1 else None
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2 and isinstance(value, dict):
        found = (_not_a_number(args[1], v, [*loc, k]) for k, v in value.items())
        return next((p for p in found if p), None)
    if isinstance(origin, type) and issubclass(origin, Sequence | set | frozenset) and isinstance(value, list):
        items = [args[0]] * len(value) if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis) else list(args)
        found = (_not_a_number(t, v, [*loc, i]) for i, (t, v) in enumerate(zip(items, value, strict=False)))
        return next((p for p in found if p), None)
    return None


def _why_not(kind: type, value: Any) -> str | None:
    if isinstance(value, bool):
        return f"{str(value).lower()} is a yes/no value, not a number; write the number"
    if isinstance(value, str):
        return f"{value!r} is text, not a number; write the number without quotes"
    if kind is int and isinstance(value, float):
        return f"{value!r} is not a whole number; write it without a decimal point"
    return None


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


def _unwrap(tp: Any) -> Any:
    """The type inside Annotated[...] and X | None."""
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            if len(args) != 1:
                return tp
            tp = args[0]
        else:
            return tp


def _keys_of(model: type[BaseModel]) -> dict[str, Any]:
    return {(f.alias or name): f.annotation for name, f in model.model_fields.items()}


def _valid_keys(model: type[BaseModel], loc: Key) -> list[str]:
    """The keys the mapping at `loc` accepts (pydantic's location, union tags included), or [] when unknown."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        origin = typing.get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = _keys_of(tp)
            if part not in fields:
                return []
            tp = fields[part]
        elif origin is list and isinstance(part, int):
            tp = typing.get_args(tp)[0]
        elif origin is dict:
            tp = typing.get_args(tp)[1]
        elif origin in (typing.Union, types.UnionType):
            # a discriminated union: pydantic names the member by its tag (`kind`)
            members = [m for m in map(_unwrap, typing.get_args(tp)) if isinstance(m, type)]
            tagged = [
                m
                for m in members
                if issubclass(m, BaseModel) and part in typing.get_args(_unwrap(_keys_of(m).get("kind")))
            ]
            if not tagged:
                return []
            tp = tagged[0]
        else:
            return []
    tp = _unwrap(tp)
    return sorted(_keys_of(tp)) if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def _unknown_key(model: type[BaseModel], loc: Key) -> str:
    valid = _valid_keys(model, loc[:-1])
    close = difflib.get_close_matches(str(loc[-1]), valid, n=1, cutoff=0.6) if loc else []
    if close:
        return f"unknown key; did you mean {close[0]}?"
    if valid:
        return f"unknown key; the keys here are {', '.join(valid)}"
    return "unknown key; remove it or check its spelling against `gpucert schema`"


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
        raise ConfigError(f"expected a mapping at the top level, got {type(data).__name__}", path=path, line=1)
    try:
        doc = model.model_validate(data)
    except RecursionError:
        raise ConfigError("the document is nested too deeply to be a gpucert document", path=path) from None
    except ValidationError as exc:
        # an unknown key first: a misspelt key also reports the key it was meant to be as missing
        errors = sorted(exc.errors(), key=lambda e: {"extra_forbidden": 0, "missing": 2}.get(e["type"], 1))
        err = errors[0]
        loc: Key = tuple(p for p in err["loc"] if isinstance(p, str | int))
        # pydantic puts the discriminator or a union member in the location; keep only keys of the document
        doc_loc = _document_loc(data, loc)
        if err["type"] == "extra_forbidden":
            msg = _unknown_key(model, loc)
        elif err["type"] == "missing":
            msg = "required key is missing; add it"
        elif err["type"] == "value_error":  # one of gpucert's validators: its message says what to do
            msg = err["msg"].removeprefix("Value error, ")
        else:
            got = repr(err.get("input"))
            msg = f"{err['msg']} (got {got[:80] + '...' if len(got) > 80 else got})"
        more = len(errors) - 1
        if more:
            msg += f" (and {more} more problem{'s' if more > 1 else ''})"
        raise ConfigError(msg, path=path, key=_key_path(doc_loc), line=_nearest_line(doc_loc, lines)) from None
    for key, message in check(doc) if check is not None else []:
        raise ConfigError(message, path=path, key=_key_path(key), line=_nearest_line(key, lines))
    return doc


def _document_loc(data: Any, loc: Key) -> Key:
    """The part of pydantic's error location that names keys of the document (not union tags or validators)."""
    out: list[str | int] = []
    cur: Any = data
    for i, part in enumerate(loc):
        in_dict = isinstance(cur, dict) and part in cur
        in_list = isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur)
        if in_dict or in_list:
            out.append(part)
            cur = cur[part]
        elif isinstance(cur, dict) and i == len(loc) - 1:
            out.append(part)  # a missing or unknown key: name it
        elif cur is None or not isinstance(cur, dict | list):
            break
    return tuple(out)
