"""The one writer of a study's section of benchmarks/RESULTS.md: the text between `<!-- NAME:begin -->` and
`<!-- NAME:end -->`, replaced in place (appended with its markers where the file has none yet)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["write_section"]


def write_section(path: Path | None, name: str, text: str) -> None:
    """Print nothing; write `text` as the section `name` of `path` (nothing when `path` is None)."""
    if path is None:
        return
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    old = path.read_text()
    if begin in old and end in old:
        new = old[: old.index(begin)] + f"{begin}\n{text}\n{end}" + old[old.index(end) + len(end) :]
    else:
        new = old.rstrip() + f"\n\n{begin}\n{text}\n{end}\n"
    path.write_text(new)
