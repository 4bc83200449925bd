"""One writer and one JSON reader for every file of a run folder: a crash mid-write leaves the old file (never a torn
one), and every unusable file is one line naming the file, where, and the fix."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpucert import files
from gpucert.errors import ConfigError, EvidenceError
from gpucert.plan.inventory import Inventory, Node, read_inventory, write_inventory
from gpucert.plan.runfolder import RunFolder
from gpucert.stack.observe import StackObservation, read_stack, write_stack

SRC = str(Path(files.__file__).parent.parent)

# Each writer writes a document far larger than the file size limit the child runs under: the kernel stops the
# write part way with SIGXFSZ (setrlimit(2)), whose default action kills the process there, as a crash would, with no
# cleanup run. CPython ignores SIGXFSZ at startup (Python/pylifecycle.c), so the child restores the default.
_CRASH = """
import resource, signal, sys
from pathlib import Path
from gpucert.plan.inventory import Inventory, Node, write_inventory
from gpucert.stack.observe import NodeStack, StackObservation, write_stack
from gpucert.files import write_json
from gpucert.plan.runfolder import RunFolder

path, which = Path(sys.argv[1]), sys.argv[2]
nodes = [f"gpu-node-{i}" for i in range(400)]
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
if which == "inventory":
    write_inventory(path, Inventory("simulated", tuple(Node(n, 8, "NVIDIA-H100", 8, True) for n in nodes)))
elif which == "carry":  # a node's evidence carried over from an earlier run, over the one there
    RunFolder(path.parent.parent).carry_evidence("gpu-node-1", Path(sys.argv[3]))
elif which == "stack":
    write_stack(path, StackObservation(nodes={n: NodeStack(node=n, ready=True, labels={"a": "b" * 64}) for n in nodes}))
else:
    write_json(path, {"nodes": nodes})
"""


def _old_inventory(path: Path) -> None:
    write_inventory(path, Inventory("simulated", (Node("gpu-node-1", 8, "NVIDIA-H100", 8, True),)))


def _old_stack(path: Path) -> None:
    write_stack(path, StackObservation(nodes={}))


@pytest.mark.parametrize(
    ("which", "write_old", "read"),
    [
        ("inventory", _old_inventory, read_inventory),
        ("stack", _old_stack, read_stack),
        ("json", lambda p: files.write_json(p, {"old": True}), files.read_json),
        ("carry", lambda p: files.write_json(p, {"old": True}), files.read_json),
    ],
)
def test_a_crash_mid_write_leaves_the_old_file_never_a_torn_one(
    tmp_path: Path, which: str, write_old: object, read: object
) -> None:
    path = tmp_path / "evidence" / "gpu-node-1.json" if which == "carry" else tmp_path / f"{which}.json"
    write_old(path)  # type: ignore[operator]
    old = path.read_bytes()
    carried = tmp_path / "source.json"  # what a carry copies: larger than the child may write
    carried.write_text(json.dumps({"samples": list(range(1000))}))
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CRASH), str(path), which, str(carried)],
        env={**os.environ, "PYTHONPATH": SRC},
        capture_output=True,
        check=False,
    )
    assert child.returncode == -signal.SIGXFSZ, child.stderr.decode()  # it did crash mid-write
    assert path.read_bytes() == old
    read(path)  # type: ignore[operator]  # still a document its reader takes


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "verdict.json"
    files.write_json(path, {"result": "fail"})

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        files.write_json(path, {"result": "pass"})
    assert json.loads(path.read_text()) == {"result": "fail"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verdict.json"]


def test_a_written_file_is_as_readable_as_a_plain_write_would_make_it(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        plain = tmp_path / "plain"
        plain.write_text("x")
        written = files.write_atomic(tmp_path / "atomic", "x")
    finally:
        os.umask(umask)
    assert written.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o644


def test_a_long_name_still_has_room_for_its_temporary(tmp_path: Path) -> None:
    path = tmp_path / ("n" * 250 + ".json")  # a node name at its limit, plus `.json`
    files.write_json(path, {})
    assert files.read_json(path) == {}


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('{"result": "pass",\n "summary": }', r"verdict\.json: not JSON \(line 2, column 13: Expecting value\)"),
        (b"\xff\xfe\x00garbage", r"verdict\.json: not JSON"),
        ("[1, 2]", r"verdict\.json: expected a JSON object, got list"),
        ("[" * 100_000 + "]" * 100_000, r"verdict\.json: not JSON gpucert wrote \(nested too deeply\)"),
    ],
)
def test_a_bad_document_is_one_line_naming_file_where_and_the_fix(
    tmp_path: Path, content: str | bytes, said: str
) -> None:
    folder = RunFolder(tmp_path)
    if isinstance(content, bytes):
        folder.verdict_path.write_bytes(content)
    else:
        folder.verdict_path.write_text(content)
    with pytest.raises(EvidenceError, match=said) as caught:
        folder.read_verdict()
    message = str(caught.value)
    assert "\n" not in message
    assert str(folder.verdict_path) in message
    assert "pass a folder gpucert wrote" in message or "write it again" in message


def test_a_missing_or_strange_file_says_so_and_the_fix(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    with pytest.raises(EvidenceError, match=r"verdict\.json: missing: pass a run folder written by gpucert"):
        folder.read_verdict()
    os.mkfifo(folder.verdict_path)  # a reader would block on a FIFO forever
    with pytest.raises(EvidenceError, match="not a regular file"):
        folder.read_verdict()
    folder.verdict_path.unlink()
    folder.verdict_path.symlink_to(folder.verdict_path.name)  # a link to itself: the system refuses to follow it
    with pytest.raises(EvidenceError, match=r"cannot read \(Too many levels of symbolic links\): write it again"):
        folder.read_verdict()


def test_a_document_not_of_its_model_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "inventory.json"
    _old_inventory(path)
    doc = json.loads(path.read_text())
    doc["nodes"][0]["gpu_count"] = True  # JSON's `true` is no count
    path.write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=r"inventory\.json: nodes\.0\.gpu_count: Input should be a valid integer"):
        read_inventory(path)


def test_a_folder_the_user_named_is_made_or_refused_in_one_line(tmp_path: Path) -> None:
    made = files.make_folder(tmp_path / "a" / "b", not_a_folder="name a folder", cannot="cannot create it")
    assert made.is_dir()
    (tmp_path / "file").write_text("x")
    for in_the_way in (tmp_path / "file", tmp_path / "file" / "below"):  # FileExistsError, NotADirectoryError
        with pytest.raises(ConfigError) as exc:
            files.make_folder(in_the_way, not_a_folder="name a folder", cannot="cannot create it", key="--out")
        assert str(exc.value).endswith("is not a folder: name a folder")
        assert exc.value.key == "--out"
    with pytest.raises(ConfigError) as exc:  # any other OSError: its own words, not a traceback nor an errno
        files.make_folder(tmp_path / ("x" * 300), not_a_folder="name a folder", cannot="cannot create it")
    assert str(exc.value).endswith("cannot create it: File name too long")
