"""Allure result files as allure-commons writes them (allure-python-commons 2.16.2, allure_commons/logger.py), from
attrs results or from the dict allure-commons would make of one, with CPython's C JSON encoder."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import attr
from allure_commons.logger import INDENT, AllureFileLogger
from allure_commons.model2 import TEST_CASE_PATTERN

__all__ = ["ResultsLogger"]


class ResultsLogger(AllureFileLogger):
    """allure-commons' file logger, each result written with json.dumps. Its own `_report_item` (allure-python-commons
    2.16.2, allure_commons/logger.py) calls json.dump, which never takes CPython's C encoder (JSONEncoder.iterencode
    takes it only for a one-shot encode, json/encoder.py): with a result per node holding a step per check, that was
    about a twentieth of a re-test's CPU at 1,024 x 8. The same file name, fields, text, temporary file and rename;
    `report_text` writes a result already built as the text allure-commons writes of one (allure_passed.py)."""

    def __init__(self, report_dir: str) -> None:
        AllureFileLogger.__init__(self, report_dir)
        self._folder = str(self._report_dir)

    def report_result(self, result: Any) -> None:
        """allure-commons' hook of the same name, typed: gpucert calls it, and the logger is no plugin of allure's."""
        self._report_item(result)

    def _report_item(self, item: Any) -> None:
        self._write(item.file_pattern, item)

    def report_text(self, text: str) -> None:
        """A test result given as the text allure-commons writes of it without indent (json.dumps of `asdict(result,
        filter=lambda _, v: v or v is False)`), written as `report_result` writes the TestResult: indented again
        where ALLURE_INDENT_OUTPUT asks (the same keys in the same order, so the same text)."""
        if os.environ.get("ALLURE_INDENT_OUTPUT"):
            text = json.dumps(json.loads(text), indent=INDENT, ensure_ascii=False)
        self._save(TEST_CASE_PATTERN, text)

    def _write(self, file_pattern: str, item: Any) -> None:
        indent = INDENT if os.environ.get("ALLURE_INDENT_OUTPUT") else None
        self._save(file_pattern, json.dumps(_plain(item), indent=indent, ensure_ascii=False))

    def _save(self, file_pattern: str, text: str) -> None:
        """The file as allure-commons' `io.open(tmp, "w", encoding="utf8")` writes it, then renamed: by the os
        module (no text wrapper, no pathlib), a file per node and per check that did not pass at fleet scale."""
        final = os.path.join(self._folder, file_pattern.format(prefix=uuid.uuid4()))
        written = f"{final}.tmp"
        fd = os.open(written, _CREATE, 0o666)
        try:
            data = memoryview(text.encode("utf8"))
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
        os.replace(written, final)


_CREATE = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)  # io.open's flags for mode "w"
_FIELDS: dict[type, tuple[str, ...]] = {}  # an attrs class's attribute names, in order
_SCALARS = (str, int, float)


def _plain(item: Any) -> dict[str, Any]:
    """`attr.asdict(item, filter=lambda _, v: v or v is False)`, as allure-commons writes a result: each attribute in
    order, those that are None, empty or zero left out (False kept), attrs values and those in lists as dicts, lists
    and tuples as lists. attrs 25's asdict is generic (collection types kept or not, value serializers, a filter call
    per attribute): at 1,024 x 8 a re-test's Allure results were 78,623 asdict calls, 0.6 s of the profile."""
    cls = type(item)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(a.name for a in attr.fields(cls))
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(item, name)
        if value or value is False:
            out[name] = value if isinstance(value, _SCALARS) else _plain_value(value)
    return out


def _plain_value(value: Any) -> Any:
    if attr.has(type(value)):
        return _plain(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain_value(v) for v in value]
    if isinstance(value, dict):
        return {_plain_value(k): _plain_value(v) for k, v in value.items()}
    return value
