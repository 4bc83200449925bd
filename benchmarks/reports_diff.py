"""Compare two run folders' reports, for a change that must not change them (issue 28: the reports written with less
CPU, their content the same): report.html, junit.xml, verdict.json, run.json and the rest of the folder's text files,
and allure-results/ file by file (matched by their text, for their names are random uuids).

    PYTHONPATH=<tree>/src python -m gpucert.cli.main certify ...   # once by each tree, from the same inputs
    python benchmarks/reports_diff.py RUN_BEFORE RUN_AFTER          # exit 1 and each difference where they differ

What two runs of the same inputs may differ in is normalised first: uuids, run ids (a folder's time), ISO times,
Allure's start/stop and each item's time and duration, ages in seconds, the paths of the trees that ran, and run.json's
git commit and code digest. evidence/ and inputs/ are the runs' inputs, and certificate.intoto.json is signed over
the rest: neither is compared.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIMES = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ"), "RUN"),  # a run folder's name
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?"), "ISO"),
    (re.compile(r'"(start|stop|finished|started)": [0-9.]+'), r'"\1": T'),
    (re.compile(r'(time|timestamp)="[^"]*"'), r'\1="T"'),  # junit.xml
    (re.compile(r'"ageSeconds": \d+'), '"ageSeconds": A'),
    (re.compile(r'"(git_commit|gpucert_code)": "[^"]*"'), r'"\1": X'),
    (re.compile(r"/work/(main|wt/[\w.-]+)/"), "/SRC/"),  # a tree's path in a skip's location (wt/final9-b)
    # report.html (pytest-html): each item's duration, the footer's times, the measurement's length
    (re.compile(r"(&#34;|\")(duration|time)(&#34;|\"): ?(&#34;|\")?[0-9:.]+( ms)?"), r"\2:D"),
    (re.compile(r"col-duration(\\?&#34;|\")&gt;(\d+ ms|\d\d:\d\d:\d\d)&lt;"), r"col-duration\1&gt;D&lt;"),
    (re.compile(r"\b\d+ (tests?|checks?) (took|evaluated in) [^;<&]*"), "TOOK"),
    (re.compile(r"measured in [0-9a-z ]+ \("), "measured in M ("),
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "HMS"),
    (re.compile(r"on \d\d-\w+-\d{4} at"), "on DATE at"),
]
SKIPPED = ("evidence", "inputs")


def normalised(text: str) -> str:
    text = UUID.sub("U", text)
    for pattern, said in TIMES:
        text = pattern.sub(said, text)
    return text


def folder_files(run: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(run)): p
        for p in run.rglob("*")
        if p.is_file()
        and not any(part in SKIPPED for part in p.relative_to(run).parts)
        and p.parts[len(run.parts)] != "allure-results"
        and p.name != "certificate.intoto.json"
    }


def allure(run: Path) -> list[tuple[str, str]]:
    """Each allure-results file's name and text, normalised; none where the folder has no allure-results/."""
    found = []
    folder = run / "allure-results"
    for p in folder.iterdir() if folder.is_dir() else ():
        text = normalised(p.read_text(encoding="utf-8", errors="replace"))
        found.append((UUID.sub("U", p.name), text))
    return sorted(found)


def differences(before: Path, after: Path) -> list[str]:
    said: list[str] = []
    a, b = folder_files(before), folder_files(after)
    for name in sorted(a.keys() ^ b.keys()):
        said.append(f"only in {'the first' if name in a else 'the second'}: {name}")
    for name in sorted(a.keys() & b.keys()):
        x = normalised(a[name].read_text(encoding="utf-8", errors="replace"))
        y = normalised(b[name].read_text(encoding="utf-8", errors="replace"))
        if x != y:
            at = next((i for i, (p, q) in enumerate(zip(x, y, strict=False)) if p != q), min(len(x), len(y)))
            said.append(
                f"{name} differs at {at}:\n  {x[max(at - 120, 0) : at + 80]!r}\n  {y[max(at - 120, 0) : at + 80]!r}"
            )
    x_results, y_results = allure(before), allure(after)
    if x_results != y_results:  # by their count of each text: two results alike in one run are two
        odd = sorted((Counter(x_results) - Counter(y_results)) + (Counter(y_results) - Counter(x_results)))
        said.append(f"allure-results differ ({len(x_results)} and {len(y_results)} files): {odd[0][0]} first")
    return said


def main() -> int:
    if len(sys.argv) != 3 or not all(Path(a).is_dir() for a in sys.argv[1:]):
        print(f"usage: {sys.argv[0]} RUN_BEFORE RUN_AFTER (two run folders)", file=sys.stderr)
        return 2
    before, after = Path(sys.argv[1]), Path(sys.argv[2])
    said = differences(before, after)
    for line in said:
        print(line)
    compared = len(folder_files(before)) + len(allure(before))
    print(f"{'the same' if not said else f'{len(said)} differences'} ({compared} files compared)")
    return 1 if said else 0


if __name__ == "__main__":
    sys.exit(main())
