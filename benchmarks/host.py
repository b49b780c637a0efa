"""What the benchmarks say about the machine they ran on (imported by the scripts beside it)."""
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from runtime.host import host_cache_bytes  # noqa: E402


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
    """The L3 cache size in bytes (:func:`runtime.host.host_cache_bytes`); 0 when unknown."""
    return host_cache_bytes(3, base)
