"""What the offline bundle ships, and from where: the GPU host's own image, the lock, the wheels.

:data:`HOST` and :data:`HOST_PACKAGES` say what the host already has (never bundled);
:data:`LOCK_FILE` pins vLLM and the runtime dependencies the host lacks, with hashes;
:data:`NOT_BUNDLED` and :data:`TRIMMED` say what is deliberately left out and why.
:func:`download_wheels` fetches the pinned wheels for the host's platform (here, where a
package index is reachable); :func:`wheel_entries` lists what pip would install from one.
:mod:`specdec.bundle` packs them. Standard library only (the host imports this module too).
"""
from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Sequence

from . import paths
from .lockfile import LockError, canonical_name, read_lock

#: The lock: vLLM and the runtime dependencies of vllm 0.26.0 that the host image lacks,
#: one exact version each with the sha256 of its wheel (a pip requirements file; the reasons
#: for the pins are in its header). Read by :func:`read_lock` when :func:`pack` is given no
#: ``requirements``; unpacking never reads it.
LOCK_FILE = paths.ROOT / "bundle" / "requirements-h200.txt"
#: The distribution whose wheel the lock must pin.
VLLM = "vllm"

#: vLLM requirements deliberately left out: optional kernel packages (flashinfer and the
#: JIT/DSL stacks behind it), video decoding, NVTX ranges. vLLM falls back without them
#: for dense bf16 Llama models on Hopper; VLLM_USE_FLASHINFER_SAMPLER=0 keeps the sampler
#: off flashinfer.
NOT_BUNDLED = (
    "flashinfer-python", "tilelang", "nvidia-cutlass-dsl", "quack-kernels",
    "tokenspeed-mla", "humming-kernels", "fastsafetensors", "nvidia-cudnn-frontend", "nvtx",
    "torchcodec", "pynvvideocodec",
)

#: Paths inside the installed packages that are not shipped (prefixes end with "/").
TRIMMED = (
    "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so",  # FA2; Hopper runs FA3 (_vllm_fa3_C)
    "vllm/vllm-rs",                              # Rust API server binary
    "vllm/third_party/fmha_sm100/",              # Blackwell (sm100) attention sources
    "vllm/third_party/deep_gemm/",               # DeepGEMM (FP8 MoE) sources and builds
)

#: What the target host must already have.
HOST = {
    "python": "3.12",
    "platform": "manylinux_2_28_x86_64",
    "torch": "2.11.0+cu130",
    "env": {"VLLM_USE_FLASHINFER_SAMPLER": "0"},
}

#: The packages of the host image (the device tool's CUDA image, as listed on 2026-11-17):
#: never bundled, the host's own versions are used.
HOST_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn
einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt
xarray xxhash yarl zipp
""".split())

#: pip tags the wheels must carry (the host's glibc is newer than all of these).
PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
             "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64")


class WheelError(RuntimeError):
    """A pinned wheel cannot be fetched."""


# --------------------------------------------------------------------------- #
# The lock file (read by specdec.lockfile)
# --------------------------------------------------------------------------- #
def locked_requirements(path: Path | str = LOCK_FILE) -> list[str]:
    """The lock's pins as ``name==version`` strings, vLLM first (as :func:`pack` takes them);
    :class:`LockError` for a malformed lock."""
    lock = read_lock(path)
    if canonical_name(lock[0].name) != VLLM:
        raise LockError(f"{path}:{lock[0].line}: the first pin must be {VLLM}, "
                        f"not {lock[0].name}")
    return [r.requirement for r in lock]


# --------------------------------------------------------------------------- #
# Wheels
# --------------------------------------------------------------------------- #
def requirement_name(req: str) -> str:
    return canonical_name(re.match(r"[A-Za-z0-9_.\-]+", req).group(0))


def find_wheel(wheel_dir: Path, requirement: str) -> Path | None:
    """The wheel in ``wheel_dir`` for a pinned ``name==version`` requirement, if present."""
    name = requirement_name(requirement)
    version = requirement.split("==", 1)[1] if "==" in requirement else None
    for whl in sorted(wheel_dir.glob("*.whl")):
        parts = whl.name.split("-")
        if canonical_name(parts[0]) == name and (version is None or parts[1] == version):
            return whl
    return None


def download_wheels(requirements: Sequence[str], wheel_dir: Path) -> list[Path]:
    """Fetch each pinned requirement's Python 3.12 manylinux x86-64 wheel (no dependencies).

    Wheels already in ``wheel_dir`` are reused; pip is asked only for the others.
    """
    wheel_dir.mkdir(parents=True, exist_ok=True)
    missing = [r for r in requirements if find_wheel(wheel_dir, r) is None]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--only-binary=:all:", "--python-version", HOST["python"],
               "--implementation", "cp", "-d", str(wheel_dir)]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        proc = subprocess.run(cmd + list(missing), capture_output=True, text=True)
        if proc.returncode != 0:
            raise WheelError(f"pip download failed for {', '.join(missing)}:\n"
                              f"{proc.stderr.strip()[-2000:]}")
    wheels = []
    for r in requirements:
        whl = find_wheel(wheel_dir, r)
        if whl is None:
            raise WheelError(f"no wheel for {r} in {wheel_dir} after download")
        wheels.append(whl)
    return wheels


def is_trimmed(path: str, trimmed: Sequence[str]) -> bool:
    return any(path == t or (t.endswith("/") and path.startswith(t)) for t in trimmed)


def wheel_entries(whl: Path, trimmed: Sequence[str]):
    """(installed relative path, ZipInfo) for each file pip would put in site-packages.

    ``<name>.data/purelib`` and ``/platlib`` land in site-packages like the rest; scripts,
    headers and data files are not needed to import the package and are dropped.
    """
    with zipfile.ZipFile(whl) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            name = info.filename
            m = re.match(r"[^/]+\.data/([^/]+)/(.*)", name)
            if m:
                if m.group(1) not in ("purelib", "platlib"):
                    continue
                name = m.group(2)
            yield name, info, is_trimmed(name, trimmed)
