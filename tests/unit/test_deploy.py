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


def final_stage() -> list[tuple[str, str]]:
    """The instructions of the image's last stage (the probe image itself), from its FROM on."""
    steps = instructions()
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last:]


def env_at_user() -> dict[str, str]:
    """The environment every instruction after USER (and the probe) sees."""
    env: dict[str, str] = {}
    for word, rest in final_stage():
        if word == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                env[key] = value.replace("$PATH", env.get("PATH", ""))
        if word == "USER":
            break
    return env


def test_the_probe_user_has_a_writable_cupy_cache() -> None:
    steps = final_stage()
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
    steps = final_stage()
    base = next(rest for word, rest in steps if word == "FROM")
    assert re.fullmatch(r"nvcr\.io/nvidia/cuda:12\.\d+\.\d+-runtime-ubuntu(22|24)\.04", base), base  # -runtime: NCCL
    version = next(rest.partition("=")[2] for word, rest in steps if word == "ARG" and rest.startswith("DCGM_"))
    install = " ".join(rest for word, rest in steps if word == "RUN" and "apt-get install" in rest)
    # DCGM 4's package split: the core, and the plugins of each CUDA major. DCGM 4.5.2 loads
    # plugins/cuda<driver's CUDA major> (TestFramework::GetPluginCudaDirExtension, nvvs/src/TestFramework.cpp), and
    # packages them as datacenter-gpu-manager-4-cuda12 and -cuda13 (cmake/packaging.cmake): R580+ drivers are CUDA 13.
    for package in (f"datacenter-gpu-manager-4-{part}" for part in ("core", "cuda12", "cuda13")):
        assert f'"{package}=1:${{DCGM_VERSION}}"' in install, package
    assert re.fullmatch(r"4\.\d+\.\d+-1", version)
    assert 'pip install ".[gpu]"' in " ".join(rest for word, rest in steps if word == "RUN")


def _args() -> dict[str, str]:
    return {k: v.strip('"') for k, _, v in (rest.partition("=") for word, rest in instructions() if word == "ARG")}


def test_the_image_has_the_cuda_headers_cupy_compiles_with() -> None:
    """CuPy compiles an elementwise kernel for fill, astype and cp.full through NVRTC, including <cuda_fp16.h>
    (cupy/_core/include/cupy/float16.cuh), and adds `-I` the directory cuda-pathfinder's
    find_nvidia_header_directory("cudart") returns, raising "Failed to find CUDA headers" when it returns None
    (cupy/_core/core.pyx lines 2593-2603, CuPy 14.2.0). That looks for cuda_runtime.h in NVIDIA wheels, conda,
    then $CUDA_PATH/include (cuda/pathfinder/_headers/find_nvidia_headers.py, cuda-pathfinder 1.9.1). The -runtime
    base image has NVRTC but no headers: the image installs its own CUDA's dev headers and points CUDA_PATH there."""
    steps = final_stage()
    base = next(rest for word, rest in steps if word == "FROM")
    cuda = re.search(r"cuda:(\d+)\.(\d+)\.", base)
    assert cuda is not None, base
    assert _args()["CUDA_PKG"] == f"{cuda[1]}-{cuda[2]}", "CUDA_PKG must name the base image's CUDA (12.8 -> 12-8)"
    install = " ".join(rest for word, rest in steps if word == "RUN" and "apt-get install" in rest)
    for package in ("cuda-cudart-dev", "cuda-cccl"):  # cuda_runtime.h, cuda_fp16.h; <cuda/std/...>
        assert f'"{package}-${{CUDA_PKG}}"' in install, package
    assert env_at_user().get("CUDA_PATH") == "/usr/local/cuda"


def test_the_image_pins_the_cupy_major_the_probes_were_written_against() -> None:
    spec = _args()["CUPY_SPEC"]
    assert re.fullmatch(r"cupy-cuda12x==14\.\*", spec), spec
    pip = " ".join(rest for word, rest in instructions() if word == "RUN" and "pip install" in rest)
    assert '"${CUPY_SPEC}"' in pip
    import tomllib

    pyproject = tomllib.loads((DOCKERFILE.parents[1] / "pyproject.toml").read_text())
    (cupy,) = [d for d in pyproject["project"]["optional-dependencies"]["gpu"] if d.startswith("cupy")]
    assert cupy == "cupy-cuda12x>=13,<15"  # no untested major through the GPU extra either


def test_dcgm_runs_in_a_directory_the_probe_user_can_write() -> None:
    """DCGM's software test checks `euidaccess(".", W_OK)` (nvvs/src/Software.cpp, DCGM 4.5.2) and writes its logs
    under $DCGM_HOME_DIR (common/DcgmUtilities.cpp): both must be the probe user's."""
    steps = final_stage()
    uid = next(rest for word, rest in steps if word == "USER").split(":")[0]
    env = env_at_user()
    home, dcgm_home = env["HOME"], env.get("DCGM_HOME_DIR")
    assert dcgm_home is not None
    assert dcgm_home.startswith(home + "/")
    before_user = steps[: [w for w, _ in steps].index("USER")]
    made = [rest for word, rest in before_user if word == "RUN" and dcgm_home in rest.split()]
    assert made
    assert re.search(rf"chown -R {uid}(:\d+)? {re.escape(home)}", made[0])
    workdir = [rest for word, rest in steps if word == "WORKDIR"][-1]
    assert workdir == home, "the probe's working directory must be one it can write"


def test_the_image_has_perftest_built_with_cuda_and_the_rdma_tools() -> None:
    """The fabric probes run perftest's `ib_write_bw --use_cuda` and rdma-core's `ibv_devinfo` (the preflight's
    `rdma` step checks both). perftest 6.29 (linux-rdma/perftest tag 26.04.17, configure.ac) defines HAVE_CUDA
    only when it finds cuda.h (in /usr/local/cuda/include: a -devel image), and needs libibverbs, librdmacm,
    libibumad and libpci (AC_CHECK_LIB ... AC_MSG_ERROR): built in a stage of the same CUDA and Ubuntu, copied in,
    and its libraries checked where it runs."""
    steps = instructions()
    froms = [rest for word, rest in steps if word == "FROM"]
    builder, final = froms[0], froms[-1]
    assert re.fullmatch(r"(\S+):(\S+)-devel-(\S+) AS perftest", builder), builder
    assert builder.split()[0].replace("-devel-", "-runtime-") == final  # the same CUDA and Ubuntu
    assert _args()["PERFTEST_TAG"] == "26.04.17"
    build = " ".join(rest for word, rest in steps[: steps.index(("FROM", final))] if word == "RUN")
    for dev in ("libibverbs-dev", "librdmacm-dev", "libibumad-dev", "libpci-dev"):
        assert dev in build, dev
    assert 'grep -q "define HAVE_CUDA 1" config.h' in build  # a perftest without --use_cuda fails the build
    last = final_stage()
    assert ("COPY", "--from=perftest /opt/perftest /opt/perftest") in last
    assert ("RUN", '! ldd /opt/perftest/bin/ib_write_bw | grep "not found"') in last
    install = " ".join(rest for word, rest in last if word == "RUN" and "apt-get install" in rest)
    assert "ibverbs-utils" in install  # ibv_devinfo
    assert "ibverbs-providers" in install  # the mlx5 user-space driver libibverbs loads
    path = env_at_user()["PATH"].split(":")
    assert "/opt/perftest/bin" in path
