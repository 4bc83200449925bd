"""Allure's history carried between the runs of one spec, so its trend graphs show the fleet over time.

Allure 2 has no store of its own: `allure generate` writes the report's `history/` folder, and the next generation
reads it back from the RESULTS folder, `<results>/history/history.json` (per test's historyId its statistic and
latest items: allure-generator's history/HistoryPlugin.java, `readResults`) and `history-trend.json` (one item per
earlier report: history/HistoryTrendPlugin.java), beside duration-trend.json, categories-trend.json and
retry-trend.json of the other trend widgets. So gpucert keeps the latest report's history per spec, in
`<reports>/.history/<spec>/allure/` beside the nodes' history (with `source.json`: the spec and the run it came from),
copies it out whenever it renders a report (`gpucert report allure`, the single file embeds it), and copies it into
every run's `allure-results/history/` (and --alluredir's), so an Allure of the user's own (`allure generate`,
`allure serve`, a CI plugin) carries the trend on as well. Never across specs; a file Allure would not read as
history (not JSON, or not the shape it reads) is left out with a note, never a crash.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from gpucert.errors import EvidenceError, GpucertError
from gpucert.files import read_json_object, write_atomic
from gpucert.spec.names import NameError_, check_file_stem, inside

__all__ = ["HISTORY_FILES", "carry_in", "kept_history", "save_history", "store_of", "usable"]

HISTORY_DIR = ".history"  # the reports' history folder (fleet/history.py keeps the nodes' there too)
SOURCE = "source.json"
# what Allure 2.x reads from <results>/history/, and the JSON it reads each as: history.json a map of historyId to
# its data (HistoryPlugin: Map<String, HistoryData>), each trend a list of items (HistoryTrendPlugin and the
# duration, categories and retry trend plugins)
HISTORY_FILES: dict[str, type] = {
    "history.json": dict,
    "history-trend.json": list,
    "duration-trend.json": list,
    "categories-trend.json": list,
    "retry-trend.json": list,
}


def store_of(reports: Path, spec: str) -> Path | None:
    """`<reports>/.history/<spec>/allure`; None for a spec name that cannot name a folder."""
    try:
        return inside(reports / HISTORY_DIR, check_file_stem(spec, "spec name"), "allure")
    except NameError_:
        return None


def usable(files: Mapping[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """The files Allure reads as history, each in the shape it reads; the others, with why, as notes."""
    kept: dict[str, bytes] = {}
    notes: list[str] = []
    for name, data in sorted(files.items()):
        shape = HISTORY_FILES.get(name)
        if shape is None:
            notes.append(f"{name}: not a history file Allure reads; left out")
            continue
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            notes.append(f"{name}: not JSON; left out (the trend starts again from this run)")
            continue
        if not isinstance(doc, shape):
            notes.append(f"{name}: not a JSON {'object' if shape is dict else 'list'}; left out")
            continue
        kept[name] = data
    return kept, notes


def kept_history(reports: Path, spec: str, run: str) -> tuple[dict[str, bytes], list[str]]:
    """The spec's kept history to carry into `run`'s results: only from an earlier run of the same spec."""
    store = store_of(reports, spec)
    if store is None or not store.is_dir():
        return {}, []
    try:
        source = read_json_object(store / SOURCE, missing="kept by gpucert with the trend")
        files = {p.name: p.read_bytes() for p in store.iterdir() if p.is_file() and p.name != SOURCE}
    except (EvidenceError, OSError) as exc:  # said, never a crash: the report stands without the trend
        return {}, [f"{store}: cannot be read ({exc}); no trend carried"]
    if source.get("spec") != spec:
        return {}, [f"{store}: kept for another spec ({SOURCE}); no trend carried"]
    if not isinstance(source.get("run"), str) or source["run"] >= run:
        return {}, []  # a later run's history: not this run's past
    kept, notes = usable(files)
    return kept, [f"{store}/{n}" for n in notes]


def carry_in(results: Path, files: Mapping[str, bytes], *, replace: bool = True) -> None:
    """Put `files` where Allure reads them: `<results>/history/`. `replace=False` leaves a file already there as it
    is (a CI job that copies its own previous report's history into --alluredir before the run keeps it)."""
    for name, data in files.items():
        path = results / "history" / name
        if replace or not path.exists():
            write_atomic(path, data)


def save_history(reports: Path, spec: str, run: str, files: Mapping[str, bytes]) -> list[str]:
    """Keep the history of `run`'s report as the spec's latest, unless a later run's is kept already. Returns
    notes (what was left out, or why nothing was kept)."""
    store = store_of(reports, spec)
    if store is None:
        return [f"the spec name {spec!r} cannot name a folder; the trend is not kept"]
    kept, notes = usable(files)
    if not kept:
        return notes
    try:
        source = read_json_object(store / SOURCE) if (store / SOURCE).is_file() else {}
    except EvidenceError:
        source = {}  # unreadable: replaced by this run's
    if source.get("spec") == spec and str(source.get("run", "")) > run:
        return [*notes, f"{store} keeps a later run's trend ({source['run']}); left as it is"]
    try:
        for old in store.glob("*.json") if store.is_dir() else ():
            if old.name not in kept and old.name != SOURCE:
                old.unlink()
        for name, data in kept.items():
            write_atomic(store / name, data)
        write_atomic(store / SOURCE, json.dumps({"spec": spec, "run": run}, indent=1) + "\n")
    except (OSError, GpucertError) as exc:  # something not ours in the way: the report stands, the trend is not kept
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return [*notes, f"the trend is not kept in {store} ({why}): move what is in the way there aside"]
    return notes
