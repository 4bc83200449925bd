"""deploy/Dockerfile read as Docker reads it: what the probe pod's process finds when it starts (a writable home for
CuPy's kernel cache, CUDA's device order, a user that is not root) and what the image installs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[2] / "deploy" / "Dockerfile"


def instructions(dockerfile: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def env_at_user() -> dict[str, str]:
    """The environment every instruction after USER (and the probe) sees."""
    env: dict[str, str] = {}
    for word, rest in instructions():
        if word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value.replace("$PATH", env.get("PATH", ""))
        if word == "USER":
            break
    return env


def test_the_probe_user_has_a_writable_cupy_cache() -> None:
    steps = instructions()
    user = next(rest for word, rest in steps if word == "USER")
    uid = user.split(":")[0]
    assert uid not in ("0", "root")
    env = env_at_user()
    home, cache = env.get("HOME"), env.get("CUPY_CACHE_DIR")
    assert home, "the probe user needs a home CuPy can write its kernel cache in"
    assert home != "/nonexistent"
    assert cache is not None
    assert cache.startswith(home + "/")
    runs = [rest for word, rest in steps[: [w for w, _ in steps].index("USER")] if word == "RUN"]
    made = [r for r in runs if f"mkdir -p {cache}" in r or f"mkdir -p {home}" in r]
    assert made, f"{home} is never created"
    assert any(re.search(rf"chown -R {uid}(:\d+)? {re.escape(home)}", r) for r in made), f"{home} is not {uid}'s"


def test_cuda_numbers_gpus_as_nvml_does() -> None:
    assert env_at_user().get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID"


def test_the_image_installs_what_the_probes_load() -> None:
    steps = instructions()
    base = next(rest for word, rest in steps if word == "FROM")
    assert re.fullmatch(r"nvcr\.io/nvidia/cuda:12\.\d+\.\d+-runtime-ubuntu(22|24)\.04", base), base  # -runtime: NCCL
    version = next(rest.partition("=")[2] for word, rest in steps if word == "ARG" and rest.startswith("DCGM_"))
    install = " ".join(rest for word, rest in steps if word == "RUN" and "apt-get install" in rest)
    for package in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12"):  # DCGM 4's package split
        assert f'"{package}=1:${{DCGM_VERSION}}"' in install, package
    assert re.fullmatch(r"4\.\d+\.\d+-1", version)
    assert 'pip install ".[gpu]"' in " ".join(rest for word, rest in steps if word == "RUN")
