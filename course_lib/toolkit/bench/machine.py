"""Where a benchmark ran: device, CPU model, threads, torch version, load."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path

import torch


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, ``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cache_sizes() -> dict[str, int]:
    """CPU cache sizes in bytes from sysfs: ``L1d``, ``L1i``, ``L2``, ``L3``; {} if unknown."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    sizes: dict[str, int] = {}
    if not root.is_dir():
        return sizes
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1:], 1)
        value = int(size.rstrip("KMG")) * mult
        name = f"L{level}" + {"Data": "d", "Instruction": "i"}.get(kind, "")
        sizes[name] = value
    return sizes


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (what ``uptime`` prints), or None where unsupported."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info(device: str = "cpu") -> dict[str, object]:
    """A JSON-ready description of the machine and software."""
    dev = torch.device(device)
    info: dict[str, object] = {
        "device": str(dev),
        "device_name": cpu_model(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "timestamp_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "load_average": load_average(),
    }
    if dev.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(dev)
        info["cuda_version"] = torch.version.cuda
        info["cudnn_version"] = torch.backends.cudnn.version()
        info["driver_version"] = nvidia_driver_version()
        props = torch.cuda.get_device_properties(dev)
        info["multiprocessors"] = props.multi_processor_count
        info["device_memory_bytes"] = props.total_memory
    return info


def nvidia_driver_version() -> str | None:
    """The NVIDIA driver's version as ``nvidia-smi`` reports it (None without nvidia-smi)."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else None
