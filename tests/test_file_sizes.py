"""Files of one job: no source file of the packages over :data:`MAX_LINES` lines (issue 41's rule; a file that
grows past it holds several jobs and is split by job, as ``runtime/vm.py`` and ``builder/frontend/onnx/`` were)."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 900
PACKAGES = ("builder", "runtime", "schemas", "core")


def oversized(root: Path = ROOT, limit: int = MAX_LINES) -> list[str]:
    """``"path: N lines"`` for every ``.py`` file under the packages of ``root`` longer than ``limit`` lines."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                found.append(f"{path.relative_to(root)}: {n} lines")
    return found


def test_no_source_file_over_the_limit():
    assert oversized() == []


def test_the_check_finds_a_long_file(tmp_path):
    (tmp_path / "builder").mkdir()
    (tmp_path / "builder" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "builder" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert oversized(tmp_path) == [f"builder/long.py: {MAX_LINES + 1} lines"]
