"""Ed25519 key pairs for signing runs: made by `gpucert keygen` (the private key readable by its owner only), read
from PEM files with a one-line error naming the file, and named by their fingerprint (`SHA256:` and the base64 of
the SHA-256 of the raw 32-byte public key, unpadded)."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from gpucert.errors import ConfigError
from gpucert.files import make_folder

__all__ = ["PRIVATE_KEY", "PUBLIC_KEY", "fingerprint", "generate_key", "load_private_key", "load_public_key"]

PRIVATE_KEY, PUBLIC_KEY = "gpucert.key", "gpucert.pub"


def fingerprint(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "SHA256:" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")


def generate_key(directory: Path) -> tuple[Path, Path, str]:
    """A new Ed25519 key pair in `directory`: the private key readable by its owner only."""
    make_folder(
        directory, not_a_folder="give keygen a folder to write the key pair into", cannot="cannot create the folder"
    )
    priv_path, pub_path = directory / PRIVATE_KEY, directory / PUBLIC_KEY
    for p in (priv_path, pub_path):
        if os.path.lexists(p):  # a dangling link counts: writing through it would put the key somewhere else
            raise ConfigError("a key (or a link) already exists here; choose another folder or remove it", path=p)
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    pub = key.public_key()
    pub_pem = pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for path, data, mode in ((priv_path, pem, 0o600), (pub_path, pub_pem, 0o644)):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        except OSError as exc:
            raise ConfigError(f"cannot create the key file: {exc.strerror}", path=path) from None
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return priv_path, pub_path, fingerprint(pub)


def _key_bytes(path: Path) -> bytes:
    if path.exists() and not path.is_file():  # a FIFO would block the read forever, /dev/zero never end
        raise ConfigError("is not a regular file (a folder, a FIFO or a device); name the key file", path=path)
    return path.read_bytes()


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(_key_bytes(path), password=None)
    except FileNotFoundError:
        raise ConfigError("no such key file; create one with `gpucert keygen DIR`", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the key: {exc.strerror}", path=path) from None
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"not an unencrypted PEM private key ({exc})", path=path) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError("not an Ed25519 key; create one with `gpucert keygen DIR`", path=path)
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(_key_bytes(path))
    except FileNotFoundError:
        raise ConfigError("no such public key file", path=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the key: {exc.strerror}", path=path) from None
    except ValueError as exc:
        raise ConfigError(f"not a PEM public key ({exc})", path=path) from None
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError("not an Ed25519 public key", path=path)
    return key
