"""The console script freezes what a command built before the process ends (gc.freeze; issue 28: the collections
at the interpreter's shutdown were about a tenth of a certification's wall): the teardown still runs (atexit
handlers, flushed streams), a certification's outputs are complete, its stdout reaches a pipe whole, and its exit
code is the verdict's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from gpucert.report import attest

# the console script as installed (`gpucert = "gpucert.__main__:main"`), with an atexit handler of its own that
# says how many objects were frozen when the interpreter tore down
SCRIPT = (
    "import atexit, gc, sys; atexit.register(lambda: print('FROZEN', gc.get_freeze_count())); "
    "from gpucert.__main__ import main; sys.exit(main())"
)


def gpucert_script(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def _frozen(stdout: str) -> int:
    """How many objects the teardown found frozen (the atexit handler ran: the teardown did)."""
    (count,) = re.findall(r"^FROZEN (\d+)$", stdout, re.MULTILINE)
    return int(count)


def _complete(run: Path) -> dict[str, object]:
    """Every output of the run parses to its end; the verdict."""
    ET.parse(run / "junit.xml")
    assert (run / "report.html").read_text().rstrip().endswith("</html>")
    results = list((run / "allure-results").glob("*-result.json"))
    assert results
    for path in results:
        json.loads(path.read_text())
    verdict: dict[str, object] = json.loads((run / "verdict.json").read_text())
    return verdict


def test_a_signed_certification_ends_frozen_with_every_output_whole_and_its_exit_code(project: Path) -> None:
    key, pub, fingerprint = attest.generate_key(project / "keys")
    r = gpucert_script("certify", "examples/demo.yaml", "-q", "--reports", "r", "--sign-key", str(key), cwd=project)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]  # the demo fleet is faulty: FAIL
    assert _frozen(r.stdout) > 10_000  # what the run built, left to the end of the process
    (run,) = [p for p in (project / "r").iterdir() if not p.name.startswith(".")]
    assert _complete(run)["result"] == "fail"
    # the last thing the command does: sign; the certificate verifies, and stdout (a pipe: block-buffered) has
    # every line up to the one that names it, before the teardown's own
    assert attest.verify_run(run, pub).ok
    said = r.stdout.rstrip().splitlines()
    assert said[-1].startswith("FROZEN")
    assert "certificate" in r.stdout
    assert fingerprint in "".join(said[-3:-1])  # rich may fold the certificate's line
