"""Reading the user's YAML documents into typed models, with errors that name file, key path and line.

Pure of everything but the file system: specs, fleets and baselines all come through `load_document`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from gpucert.errors import ConfigError

__all__ = ["Document", "Key", "Problem", "load_document", "load_yaml"]

Key = tuple[str | int, ...]
M = TypeVar("M", bound=BaseModel)


class Document(BaseModel):
    """Base of every user-written document: unknown keys are errors, values are not coerced across types."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


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
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            "file not found; check the path (relative paths are relative to the spec)", path=path
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", path=path) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(
            f"YAML syntax error: {problem}; fix the YAML", path=path, line=mark.line + 1 if mark else None
        ) from None
    lines: dict[Key, int] = {}
    if node is not None:
        _line_map(node, (), lines)
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


def _hint(error_type: str) -> str:
    return {
        "extra_forbidden": "unknown key; remove it or check its spelling against `gpucert schema`",
        "missing": "required key is missing; add it",
    }.get(error_type, "")


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
    except ValidationError as exc:
        err = exc.errors()[0]
        loc: Key = tuple(p for p in err["loc"] if isinstance(p, str | int))
        # pydantic puts the discriminator or a union member in the location; keep only keys of the document
        doc_loc = _document_loc(data, loc)
        msg = _hint(err["type"]) or err["msg"]
        if err["type"] not in ("extra_forbidden", "missing"):
            msg = f"{err['msg']} (got {err.get('input')!r})"
        more = len(exc.errors()) - 1
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
