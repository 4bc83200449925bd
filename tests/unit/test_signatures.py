"""Several signatures in one DSSE envelope: sign, countersign, verify requiring each key, and what is refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from gpucert.errors import ConfigError, EvidenceError
from gpucert.report import attest


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, Path, Path]:
    folder = tmp_path / "acceptance"
    folder.mkdir()
    (folder / "acceptance.json").write_text('{"result": "pass"}\n')
    (folder / "report.html").write_text("<html></html>\n")
    vendor, _, _ = attest.generate_key(tmp_path / "vendor")
    buyer, _, _ = attest.generate_key(tmp_path / "buyer")
    attest.sign_folder(folder, vendor, "https://gpucert.io/acceptance/v1", {"result": "pass"})
    return folder, vendor, buyer


def pub(key: Path) -> Path:
    return key.with_suffix(".pub")


def fp(key: Path) -> str:
    return attest.fingerprint(attest.load_public_key(pub(key)))


def test_countersigned_envelope_verifies_with_both_keys_and_names_each_signature(
    signed: tuple[Path, Path, Path],
) -> None:
    folder, vendor, buyer = signed
    path, who = attest.countersign(folder, buyer)
    assert who == fp(buyer)
    env = json.loads(path.read_text())
    assert [s["keyid"] for s in env["signatures"]] == [fp(vendor), fp(buyer)]
    v = attest.verify(folder, [pub(vendor), pub(buyer)])
    assert v.ok, v.problems()
    assert [(s.index, s.verified_by) for s in v.signatures] == [(0, fp(vendor)), (1, fp(buyer))]
    one = attest.verify(folder, [pub(vendor)])
    assert one.ok
    assert [s.verified_by for s in one.signatures] == [fp(vendor), None]


def test_a_removed_signature_is_caught_when_its_key_is_required(signed: tuple[Path, Path, Path]) -> None:
    folder, vendor, buyer = signed
    attest.countersign(folder, buyer)
    env_path = folder / attest.ENVELOPE
    env = json.loads(env_path.read_text())
    env["signatures"] = env["signatures"][:1]
    env_path.write_text(json.dumps(env))
    v = attest.verify(folder, [pub(vendor), pub(buyer)])
    assert not v.ok
    assert v.unsigned_keys == [fp(buyer)]
    # the file alone cannot tell a removed signature from one not made yet: it says what it holds, plainly
    assert v.problems()[0].startswith(f"not signed with the key {fp(buyer)} (yet): ")
    assert f"holds 1 signature (by {fp(vendor)}), none by this key" in v.problems()[0]
    assert v.statement == {}  # nothing of the payload is read before every required key has signed


def test_a_forged_signature_under_the_buyers_key_id_does_not_count(signed: tuple[Path, Path, Path]) -> None:
    folder, vendor, buyer = signed
    env_path = folder / attest.ENVELOPE
    env = json.loads(env_path.read_text())
    env["signatures"].append({"keyid": fp(buyer), "sig": base64.b64encode(b"\0" * 64).decode()})
    env_path.write_text(json.dumps(env))
    v = attest.verify(folder, [pub(vendor), pub(buyer)])
    assert not v.ok
    assert v.unsigned_keys == [fp(buyer)]


def test_countersigning_refuses_a_changed_folder_and_a_second_signature_by_one_key(
    signed: tuple[Path, Path, Path],
) -> None:
    folder, vendor, buyer = signed
    with pytest.raises(ConfigError, match="already signed by this key"):
        attest.countersign(folder, vendor)
    (folder / "acceptance.json").write_text('{"result": "fail"}\n')
    with pytest.raises(EvidenceError, match=r"does not match what was signed \(acceptance.json\)"):
        attest.countersign(folder, buyer)
    assert len(json.loads((folder / attest.ENVELOPE).read_text())["signatures"]) == 1
    with pytest.raises(ConfigError, match="must not live inside the folder"):
        attest.countersign(folder.parent, vendor.parent / "gpucert.key")


def test_verify_needs_a_key_and_an_envelope(signed: tuple[Path, Path, Path], tmp_path: Path) -> None:
    folder, vendor, _ = signed
    with pytest.raises(ConfigError, match="needs the signer's public key"):
        attest.verify(folder, [])
    (tmp_path / "empty").mkdir()
    with pytest.raises(EvidenceError, match="was not signed"):
        attest.verify(tmp_path / "empty", [pub(vendor)])
