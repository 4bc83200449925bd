"""Signed certification: sign, verify, tamper, and an independent check with openssl."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpucert.report import attest

from ..in_process import gpucert_here

ROOT = Path(__file__).resolve().parents[2]


def gpucert(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return gpucert_here(*args, cwd=cwd)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """A demo run signed at the end of `gpucert certify --sign-key`, and its key pair (kept outside the run)."""
    work = tmp_path_factory.mktemp("signed")
    r = gpucert("keygen", "keys", cwd=work)
    assert r.returncode == 0, r.stderr
    r = gpucert("certify", str(ROOT / "examples" / "demo.yaml"), "-q", "--sign-key", "keys/gpucert.key", cwd=work)
    assert r.returncode == 1, r.stdout + r.stderr  # the demo fleet fails certification, and is signed all the same
    # the run folder; gpucert keeps its own hidden folders (.history) beside it
    (run,) = (p for p in (work / "reports").iterdir() if not p.name.startswith("."))
    return run, work / "keys" / "gpucert.key", work / "keys" / "gpucert.pub"


@pytest.fixture
def run(signed: tuple[Path, Path, Path], tmp_path: Path) -> Path:
    copy = tmp_path / signed[0].name
    shutil.copytree(signed[0], copy)
    return copy


def verify(run: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    return gpucert("verify", str(run), "--key", str(pub), cwd=run.parent)


def test_key_files(signed: tuple[Path, Path, Path]) -> None:
    run, priv, _ = signed
    assert priv.stat().st_mode & 0o777 == 0o600
    assert not any(p.name == "gpucert.key" for p in run.rglob("*"))
    assert b"PRIVATE KEY" not in b"".join(p.read_bytes() for p in run.rglob("*") if p.is_file())


def test_untouched_run_verifies_and_says_simulated(run: Path, signed: tuple[Path, Path, Path]) -> None:
    r = verify(run, signed[2])
    assert r.returncode == 0, r.stdout
    assert "TARGET: SIMULATED" in r.stdout
    assert "VALID" in r.stdout


def test_statement_covers_every_file(run: Path) -> None:
    env = json.loads((run / attest.ENVELOPE).read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json"
    st = json.loads(base64.b64decode(env["payload"]))
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicateType"] == "https://gpucert.io/certification/v1"
    names = {s["name"] for s in st["subject"]}
    on_disk = {p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()} - {attest.ENVELOPE}
    assert names == on_disk
    pred = st["predicate"]
    assert pred["target"] == "simulated"
    assert pred["result"] == "fail"
    assert pred["spec"]["name"] == "demo-h100-pod-a"
    assert len(pred["spec"]["sha256"]) == 64
    assert list(pred["baselines"]) == ["baseline.yaml"]
    assert pred["nodes"] == {"gpu-node-1": "fail", "gpu-node-2": "fail", "gpu-node-3": "fail", "gpu-node-4": "fail"}
    assert pred["run"]["started"]
    assert pred["run"]["finished"]
    assert pred["gpucert"]["version"]


def test_one_changed_byte_in_the_html_report(run: Path, signed: tuple[Path, Path, Path]) -> None:
    p = run / "report.html"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(bytes(data))
    r = verify(run, signed[2])
    assert r.returncode == 1
    assert "changed: report.html" in r.stdout


def test_edited_verdict(run: Path, signed: tuple[Path, Path, Path]) -> None:
    p = run / "verdict.json"
    v = json.loads(p.read_text())
    v["result"], v["findings"] = "pass", []
    p.write_text(json.dumps(v))
    r = verify(run, signed[2])
    assert r.returncode == 1
    assert "changed: verdict.json" in r.stdout


def test_removed_and_added_files(run: Path, signed: tuple[Path, Path, Path]) -> None:
    (run / "evidence" / "gpu-node-3.json").unlink()
    (run / "evidence" / "gpu-node-9.json").write_text("{}")
    r = verify(run, signed[2])
    assert r.returncode == 1
    assert "missing: evidence/gpu-node-3.json" in r.stdout
    assert "added: evidence/gpu-node-9.json" in r.stdout


def test_wrong_public_key(run: Path, tmp_path: Path) -> None:
    _, other_pub, fp = attest.generate_key(tmp_path / "other")
    r = verify(run, other_pub)
    assert r.returncode == 1
    # a key that has not signed (yet) is told so plainly, not as a forgery
    said = " ".join(r.stdout.split())
    assert f"not signed with the key {fp} (yet)" in said
    assert "nothing it says can be trusted" not in said


def test_a_signature_stating_the_key_that_does_not_verify_is_distrusted(
    run: Path, signed: tuple[Path, Path, Path]
) -> None:
    env_path = run / attest.ENVELOPE
    env = json.loads(env_path.read_text())
    env["payload"] = base64.b64encode(b'{"subject": []}').decode()  # altered after signing
    env_path.write_text(json.dumps(env))
    r = verify(run, signed[2])
    assert r.returncode == 1
    assert "nothing it says can be trusted" in " ".join(r.stdout.split())


def test_signing_refuses_a_run_without_verdict_and_a_key_inside_the_run(
    run: Path, signed: tuple[Path, Path, Path]
) -> None:
    shutil.copy(signed[1], run / "gpucert.key")
    r = gpucert("sign", str(run), "--key", str(run / "gpucert.key"), cwd=run.parent)
    assert r.returncode == 2
    assert "must not live inside the run folder" in r.stderr
    (run / "gpucert.key").unlink()
    (run / "verdict.json").unlink()
    r = gpucert("sign", str(run), "--key", str(signed[1]), cwd=run.parent)
    assert r.returncode == 2
    assert "no verdict.json" in r.stderr


def test_openssl_verifies_the_dsse_signature(run: Path, signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    env = json.loads((run / attest.ENVELOPE).read_text())
    payload = base64.b64decode(env["payload"])
    (tmp_path / "pae.bin").write_bytes(attest.pae(env["payloadType"], payload))
    (tmp_path / "sig.bin").write_bytes(base64.b64decode(env["signatures"][0]["sig"]))
    cmd = [
        "openssl",
        "pkeyutl",
        "-verify",
        "-pubin",
        "-inkey",
        str(signed[2]),
        "-rawin",
        "-in",
        str(tmp_path / "pae.bin"),
        "-sigfile",
        str(tmp_path / "sig.bin"),
    ]
    ok = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "Signature Verified Successfully" in ok.stdout
    (tmp_path / "pae.bin").write_bytes(attest.pae(env["payloadType"], payload + b" "))
    bad = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert bad.returncode != 0


def test_readme_openssl_recipe_matches_the_encoding(run: Path, signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The shell recipe the manual (docs/acceptance.md) gives buyers, run as written (python3 stands in for jq)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    readme = (ROOT / "docs" / "acceptance.md").read_text()  # the manual page the recipe moved to from README
    block = readme.split("<!-- verify-recipe -->")[1].split("```bash")[1].split("```")[0]
    script = block.replace("gpucert.pub", str(signed[2]))
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=run, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Signature Verified Successfully" in r.stdout
    assert "every signed file matches" in r.stdout
    (run / "verdict.json").write_text("{}")
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=run, capture_output=True, text=True, check=False)
    assert r.returncode != 0
    assert "verdict.json: FAILED" in r.stdout


def readme_recipe() -> str:
    """The manual's openssl recipe (docs/acceptance.md), exactly as a buyer copies it."""
    readme = (ROOT / "docs" / "acceptance.md").read_text()  # the manual page the recipe moved to from README
    return readme.split("<!-- verify-recipe -->")[1].split("```bash")[1].split("```")[0]


@pytest.mark.parametrize("how", ["script", "pasted"])
def test_readme_openssl_recipe_fails_with_the_wrong_key(
    run: Path, signed: tuple[Path, Path, Path], tmp_path: Path, how: str
) -> None:
    """Issue 23 item 12: with another key, openssl says "Signature Verification Failure"; the recipe must then stop
    with a non-zero status and never print "every signed file matches". Run as written: no `-e` given to bash, as a
    script file (`bash verify.sh`) and as lines pasted into an interactive-like shell that keeps going."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    r = gpucert("keygen", str(tmp_path / "other"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    block = readme_recipe()
    assert "KEY=gpucert.pub I=0" in block
    outcomes = {}
    for key in (signed[2], tmp_path / "other" / "gpucert.pub"):
        script = block.replace("KEY=gpucert.pub I=0", f"KEY={key} I=0")
        if how == "script":
            (tmp_path / "verify.sh").write_text(script)
            cmd = ["bash", str(tmp_path / "verify.sh")]
        else:  # what a shell session sees: the recipe, then the user's next command reading its status
            cmd = ["bash", "-c", script + '\necho "status $?"\n']
        outcomes[key] = subprocess.run(cmd, cwd=run, capture_output=True, text=True, check=False)
    right, wrong = outcomes.values()
    if how == "script":
        assert right.returncode == 0, right.stdout + right.stderr
        assert wrong.returncode != 0
    else:
        assert right.stdout.rstrip().endswith("status 0"), right.stdout + right.stderr
        assert not wrong.stdout.rstrip().endswith("status 0")
        assert wrong.stdout.rstrip().splitlines()[-1].startswith("status ")
    assert "Signature Verified Successfully" in right.stdout
    assert "every signed file matches" in right.stdout
    assert "Signature Verification Failure" in wrong.stdout + wrong.stderr
    assert "every signed file matches" not in wrong.stdout
