"""What the benchmarks say about the machine they ran on (imported by the scripts beside it)."""
import os
import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def l3_bytes(base: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> int:
    """The L3 cache size in bytes from Linux's cache directory ``base`` (``index*/level`` and
    ``size`` such as ``480M`` / ``32768K``), else ``sysconf``; 0 when unknown."""
    try:
        for idx in sorted(base.glob("index*")):
            if (idx / "level").read_text().strip() == "3":
                text = (idx / "size").read_text().strip().upper()
                units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
                return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    except (OSError, ValueError):
        pass
    try:
        return max(0, int(os.sysconf("SC_LEVEL3_CACHE_SIZE")))
    except (ValueError, OSError, AttributeError):
        return 0
