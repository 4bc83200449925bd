"""A DSSE envelope (https://github.com/secure-systems-lab/dsse, v1) as gpucert reads it: the pre-authentication
encoding that is signed, each signature checked against the keys given, and the payload read only as an in-toto
statement. Nothing of a payload is to be believed before one of its signatures is (attest.py signs and verifies).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from gpucert.errors import EvidenceError
from gpucert.files import read_json_object
from gpucert.report.keys import fingerprint

__all__ = ["PAYLOAD_TYPE", "Envelope", "SignatureCheck", "pae", "read_envelope"]

PAYLOAD_TYPE = "application/vnd.in-toto+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding: what is actually signed."""
    t = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(t), t, len(payload), payload)


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    """One signature of an envelope: its position, the key id it states (a hint, never trusted), and the
    fingerprint of the given key that verifies it (None: no key given verifies it)."""

    index: int
    keyid: str | None
    verified_by: str | None


@dataclass(frozen=True)
class Envelope:
    """A DSSE envelope as read from disk: nothing of its payload is to be believed before a signature is."""

    path: Path
    payload_type: str
    payload: bytes
    signatures: tuple[tuple[str | None, bytes], ...]  # (keyid, sig)

    def check(self, keys: list[Ed25519PublicKey]) -> list[SignatureCheck]:
        """Each signature with the given key that verifies it over the PAE of this payload type and payload."""
        message = pae(self.payload_type, self.payload)
        out = []
        for i, (keyid, sig) in enumerate(self.signatures):
            by = None
            for key in keys if self.payload_type == PAYLOAD_TYPE else []:
                try:
                    key.verify(sig, message)
                except InvalidSignature:
                    continue
                by = fingerprint(key)
                break
            out.append(SignatureCheck(i, keyid, by))
        return out

    def statement(self) -> dict[str, Any]:
        """The in-toto statement (read it once a signature is verified, or only to compare digests with files)."""
        try:
            statement = json.loads(self.payload)
            if not isinstance(statement, dict) or not isinstance(statement["subject"], list):
                raise TypeError("no subject list")
            for sub in statement["subject"]:
                if not isinstance(sub["name"], str) or not isinstance(sub["digest"]["sha256"], str):
                    raise TypeError("a subject without a name or sha256")
        except (ValueError, KeyError, TypeError) as exc:
            raise EvidenceError(f"the envelope's payload is not an in-toto statement ({exc})", path=self.path) from None
        return statement

    def signed_digests(self) -> dict[str, str]:
        return {s["name"]: s["digest"]["sha256"] for s in self.statement()["subject"]}


def read_envelope(path: Path) -> Envelope:
    """The envelope at `path` (EvidenceError when it is missing, a link, or not a DSSE envelope)."""
    if path.is_symlink():
        raise EvidenceError("the envelope is a link: a certificate is a plain file in its folder", path=path)
    if not path.exists():
        raise EvidenceError(f"no {path.name}: this folder was not signed (`gpucert sign`)", path=path.parent)
    data = read_json_object(path, missing="this folder was not signed (`gpucert sign`)")
    try:
        payload = base64.b64decode(data["payload"], validate=True)
        sigs = tuple(
            (s.get("keyid") if isinstance(s.get("keyid"), str) else None, base64.b64decode(s["sig"], validate=True))
            for s in data["signatures"]
        )
        payload_type = data["payloadType"]
        if not isinstance(payload_type, str):
            raise TypeError("payloadType is not a string")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise EvidenceError(f"not a DSSE envelope ({exc})", path=path) from None
    return Envelope(path, payload_type, payload, sigs)
