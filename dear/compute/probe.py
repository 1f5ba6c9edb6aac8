"""What `dear check` needs to know about the machine and the models, without importing torch or open_clip.

- `arch_config`: an architecture's config JSON (embedded, open_clip's own
  `model_configs/`, or a file), found with `importlib.util.find_spec`;
- `cuda_devices`: how many CUDA devices the NVIDIA driver reports
  (`cuInit` + `cuDeviceGetCount` through ctypes; 0 without a driver);
- `torch_cuda_build`: the CUDA version torch was built for, read from
  torch's own `version.py`;
- `nvidia_driver`: the NVIDIA driver's version, from /proc.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import re
from pathlib import Path

RESOURCES = Path(__file__).resolve().parents[1] / "resources"


def arch_config(arch: str) -> dict | None:
    """An architecture's config JSON (embedded, open_clip's own, or a file), read without importing open_clip."""
    if arch.endswith(".json"):
        path = Path(arch)
    elif (RESOURCES / f"{arch}.json").is_file():
        path = RESOURCES / f"{arch}.json"
    else:
        spec = importlib.util.find_spec("open_clip")
        folder = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
        path = folder / "model_configs" / f"{arch}.json" if folder else Path()
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except (OSError, json.JSONDecodeError):
        return None


def cuda_devices() -> int:
    """CUDA devices the NVIDIA driver reports (0 without a driver), without importing torch."""
    if not (Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidiactl").exists()):
        return 0
    try:
        driver = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if driver.cuInit(0) != 0 or driver.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return count.value


def torch_cuda_build() -> str | None:
    """The CUDA version torch was built for, read from torch/version.py without importing torch."""
    spec = importlib.util.find_spec("torch")
    if not spec or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        match = re.search(r"^cuda\b[^=]*=\s*['\"]([^'\"]+)['\"]", version_file.read_text(), re.MULTILINE)
    except OSError:
        return None
    return match.group(1) if match else None


def nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version (from /proc/driver/nvidia/version), None without one."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for [^ ]+)?\s+([0-9][0-9.]+)", text)
    return match.group(1) if match else text.splitlines()[0].strip() if text.strip() else None
