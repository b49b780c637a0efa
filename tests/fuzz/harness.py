"""Run fuzz cases in an isolated worker process and judge what happened.

A :class:`Worker` is one ``python -m tests.fuzz.worker`` process under an address-space limit.
:meth:`Worker.run` sends it a case and waits for the result under a timeout; a process that dies
(a signal, an abort) or does not answer in time is reported as ``"crash"`` / ``"hang"`` with the
tail of what it wrote to stderr, and a fresh worker takes the next case. The ``judge_*`` functions
turn a result into a list of problems (empty when the case behaved):

- a CLI run must exit 0, 2 with every issue at ``file:line:column`` (or at ``<override KEY=VALUE>``),
  or 1 with one ``error: Type: message`` whose type is not an internal Python error; never a
  traceback, a signal, a hang, or more than :attr:`Limits.memory_kib` of peak resident memory;
- a damaged weights file must load exactly what the ``safetensors`` library reads from it (floats
  of another float dtype cast to the expected one, as ``load_params`` documents), or be refused
  with ``WeightsError`` (always refused when the library refuses it; a valid file holding bfloat16,
  which the library's numpy backend cannot return, is judged on validity only);
- a damaged executable must be refused with a ``ValueError`` (or a subclass) or compute exactly
  what the undamaged one computes;
- a damaged ONNX model must be refused with an exception that is not an internal Python error
  (``ONNXImportError``, ``ValueError``, ...), or import, compile and run; its import and compile within
  the memory budget (its run: within the address-space limit, see :func:`judge_onnx`);
- a small valid ONNX model that onnxruntime runs must compute what onnxruntime computes (shapes, dtypes,
  NaN / inf positions, values within the dtype's tolerance: :mod:`tests.fuzz.onnx_diff`), or be refused
  cleanly (:func:`judge_onnx_diff`);

:class:`Stats` counts cases and outcomes for the figures of a long run (``python -m tests.fuzz``).
"""
from __future__ import annotations

import json
import os
import re
import resource
import selectors
import stat
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Exception types that mean the program failed internally (a bug), not that the input was refused.
INTERNAL_ERRORS = frozenset({
    "RecursionError", "MemoryError", "KeyError", "TypeError", "AttributeError", "IndexError", "AssertionError",
    "OverflowError", "UnicodeError", "UnicodeEncodeError", "UnicodeDecodeError", "ZeroDivisionError",
    "RuntimeError", "NotImplementedError", "MarkupError", "LookupError", "NameError", "UnboundLocalError",
    "StopIteration", "SystemError", "BufferError", "EOFError", "struct.error", "error", "JSONDecodeError",
    "ValidationError", "SafetensorError", "YAMLError", "ScannerError", "ParserError", "ComposerError",
    "ConstructorError", "ReaderError",
})

_ISSUE_AT = re.compile(r"^(?:.+?:\d+:\d+|<override .*?>): ")
_ERROR_LINE = re.compile(r"^error: (?P<type>[A-Za-z_][\w.]*): ")


@dataclass
class Limits:
    """Budgets of one case: wall time, peak resident memory of the worker during the case (KiB), and the
    worker's address-space limit (bytes; what turns a runaway allocation into a refusal, not a dead host)."""

    timeout_s: float = 45.0
    memory_kib: int = 1_500_000
    address_space: int = 8 << 30


@dataclass
class Stats:
    """Counts of a fuzzing run: cases per kind, outcomes, problems, the largest peak memory and time."""

    cases: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    problems: list = field(default_factory=list)
    peak_kib: int = 0
    slowest_s: float = 0.0

    def record(self, kind: str, outcome: str, problems: list[str], peak: int, seconds: float, case: dict) -> None:
        self.cases[kind] += 1
        self.outcomes[f"{kind}: {outcome}"] += 1
        self.peak_kib = max(self.peak_kib, peak)
        self.slowest_s = max(self.slowest_s, seconds)
        if problems:
            self.problems.append({"kind": kind, "problems": problems, "case": case})


STATS = Stats()


class Worker:
    """One worker process (started lazily, restarted after a crash or a hang)."""

    def __init__(self, tmp: Path, limits: Limits | None = None, env: dict | None = None) -> None:
        self.tmp = Path(tmp)
        self.limits = limits or Limits()
        self.env = {**os.environ, "MB_CACHE_DIR": str(self.tmp / "cache"), "PYTHONHASHSEED": "0",
                    **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.err_path = self.tmp / "worker.stderr"

    def _start(self) -> None:
        limit = self.limits.address_space

        def preexec() -> None:  # runs in the child
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

        self.err = open(self.err_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.worker"], cwd=ROOT, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err,
                                     preexec_fn=preexec)

    def close(self) -> None:
        """Stop the worker."""
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            self.err.close()
            self.proc = None

    def run(self, case: dict, timeout: float | None = None) -> dict:
        """Send ``case``; return the worker's result plus ``outcome`` (``done``, ``crash``, ``hang``),
        ``seconds`` and, after a crash, ``signal`` / ``returncode`` and ``stderr`` (its tail)."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._start()
        start_err = self.err_path.stat().st_size if self.err_path.exists() else 0
        t0 = time.perf_counter()
        self.proc.stdin.write((json.dumps(case) + "\n").encode())
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout if timeout is not None else self.limits.timeout_s)
        sel.close()
        line = self.proc.stdout.readline() if ready else b""
        seconds = time.perf_counter() - t0
        if line:
            result = json.loads(line)
            result.update(outcome="done", seconds=seconds)
            return result
        hung = not ready
        if hung:
            self.proc.kill()
        rc = self.proc.wait()
        self.err.flush()
        with open(self.err_path, "rb") as fh:
            fh.seek(start_err)
            tail = fh.read()[-3000:].decode(errors="replace")
        self.close()
        return {"outcome": "hang" if hung else "crash", "returncode": rc, "signal": -rc if rc < 0 else None,
                "stderr": tail, "seconds": seconds, "peak_kib": -1}


def _common(result: dict, limits: Limits) -> list[str]:
    if result["outcome"] == "hang":
        return [f"no answer within {limits.timeout_s:.0f} s (killed); stderr: {result['stderr'][-500:]}"]
    if result["outcome"] == "crash":
        sig = result.get("signal")
        return [f"the process died ({'signal ' + str(sig) if sig else 'exit ' + str(result['returncode'])}); "
                f"stderr: {result['stderr'][-800:]}"]
    if result.get("peak_kib", 0) > limits.memory_kib:
        return [f"peak memory {result['peak_kib'] / 1024:.0f} MiB > budget {limits.memory_kib / 1024:.0f} MiB"]
    return []


def judge_cli(result: dict, limits: Limits, recipe_path: str | None = None) -> list[str]:
    """Problems of one CLI run (see the module docstring)."""
    problems = _common(result, limits)
    if problems:
        return problems
    rc, out, err = result["rc"], result["stdout"], result["stderr"]
    if "Traceback" in out + err or rc == "traceback":
        return [f"a traceback escaped:\n{err[-1500:]}"]
    if rc == 0:
        return []
    lines = [ln for ln in err.split("\n") if ln.strip()]   # not splitlines: user text may hold \x1c-\x1e
    if rc == 2:
        if lines and lines[0].startswith("usage: build") and any(ln.startswith("build: error: ") for ln in lines):
            return []   # argparse's usage error: an argument that starts with '-' is an option (its text,
            #             quoted in the error line, may hold newlines)
        if not lines or not lines[0].startswith("error: recipe has"):
            return [f"exit 2 without the recipe-problem header: {err[-500:]!r}"]
        bad = [ln for ln in lines[1:] if not _ISSUE_AT.match(ln)
               and not (recipe_path and ln.startswith(f"{recipe_path}: "))]
        return [f"recipe issue(s) without file:line:column: {bad[:3]}"] if bad else []
    if rc == 1:
        m = _ERROR_LINE.match(lines[0]) if lines else None
        if m is None:
            return [f"exit 1 without one 'error: Type: message' line: {err[-500:]!r}"]
        if m.group("type").split(".")[-1] in INTERNAL_ERRORS:
            return [f"an internal error escaped as exit 1: {lines[0][:300]}"]
        return []
    return [f"unexpected exit code {rc!r}: {err[-500:]!r}"]


def judge_weights(result: dict, limits: Limits) -> list[str]:
    """Problems of one damaged-safetensors load (see the module docstring)."""
    problems = _common(result, limits)
    if problems:
        return problems
    ours, lib = result["ours"], result["library"]
    if "error" in ours and ours["error"] != "WeightsError":
        return [f"{ours['error']} instead of WeightsError: {ours['message'][:300]}\n{ours.get('trace', '')[-800:]}"]
    if "ok" in ours and "error" in lib:
        return [f"loaded a file the safetensors library refuses ({lib['error']}: {lib['message'][:200]})"]
    if "ok" in ours and lib["ok"] != "unreadable" and ours["ok"] != lib["ok"]:
        return ["loaded other values than the safetensors library reads from the same file"]
    if "error" in ours and "ok" in lib and lib["ok"] != "unreadable":
        return [f"refused a file the safetensors library reads as expected: {ours['message'][:300]}"]
    return []


def judge_exe(result: dict, limits: Limits, reference: str, exact: bool) -> list[str]:
    """Problems of one damaged-executable run. ``exact``: the damage was to the saved bytes (so the
    result, if any, must equal ``reference``); otherwise the executable was changed and saved again
    with valid checksums, and only a clean refusal or a clean run is required."""
    problems = _common(result, limits)
    if problems:
        return problems
    ours = result["ours"]
    if "error" in ours:
        name = ours["error"]
        if name == "KeyError" and "no function" in ours["message"]:   # VirtualMachine[...] of an unknown name
            return []
        if name in INTERNAL_ERRORS or not name.endswith("Error"):
            return [f"{name} instead of a clean refusal: {ours['message'][:300]}\n{ours.get('trace', '')[-800:]}"]
        return []
    if exact and ours["ok"] != reference:
        return ["a damaged executable ran and computed a different result"]
    return []


def judge_onnx(result: dict, limits: Limits) -> list[str]:
    """Problems of one damaged ONNX model (see the module docstring). The memory budget holds for the import and
    the compile (``build_peak_kib``); running the model may take what its own shapes ask for (a valid model
    whose convolution pads a dim by a million does), which the worker's address-space limit bounds and the
    runtime refuses beyond with MemoryLimitError."""
    run_limits = Limits(limits.timeout_s, limits.address_space // 1024, limits.address_space)
    problems = _common(result, run_limits)
    if problems:
        return problems
    if result.get("build_peak_kib", 0) > limits.memory_kib:
        return [f"peak memory of the import and compile {result['build_peak_kib'] / 1024:.0f} MiB > budget "
                f"{limits.memory_kib / 1024:.0f} MiB"]
    ours = result["ours"]
    if "error" in ours and (ours["error"] in INTERNAL_ERRORS or not ours["error"].endswith("Error")):
        return [f"{ours['error']} instead of a clean refusal: {ours['message'][:300]}\n{ours.get('trace', '')[-1200:]}"]
    return []


def judge_onnx_diff(result: dict, limits: Limits) -> list[str]:
    """Problems of one differential ONNX case (:mod:`tests.fuzz.onnx_diff`): a crash, a hang or the
    import's and compile's memory as in :func:`judge_onnx`; an internal error (or a non-``Error``
    exception) of ours; any difference from onnxruntime's outputs. A model onnxruntime refuses
    (``skip``) and a clean refusal of ours are no problem."""
    run_limits = Limits(limits.timeout_s, limits.address_space // 1024, limits.address_space)
    problems = _common(result, run_limits)
    if problems or "skip" in result:
        return problems
    ours = result["ours"]
    if "error" in ours:
        if ours["error"] in INTERNAL_ERRORS or not ours["error"].endswith("Error"):
            return [f"{ours['error']} instead of a clean refusal: {ours['message'][:300]}\n"
                    f"{ours.get('trace', '')[-1200:]}"]
        return []
    if ours["ok"]:
        return [f"differs from onnxruntime: {'; '.join(ours['ok'][:3])[:600]}"]
    return []


def snapshot(folder: Path) -> dict:
    """What :func:`judge_output_path` compares: every entry of ``folder`` (not following symlinks) with its
    type, permission bits, device number, link target and, for a directory, its own entries."""
    out = {}
    for entry in sorted(os.listdir(folder)):
        p = folder / entry
        st = os.lstat(p)
        info = {"type": stat.S_IFMT(st.st_mode), "mode": stat.S_IMODE(st.st_mode)}
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            info["rdev"] = st.st_rdev
        if stat.S_ISLNK(st.st_mode):
            info["link"] = os.readlink(p)
        if stat.S_ISDIR(st.st_mode):
            info["entries"] = sorted(os.listdir(p))
        if stat.S_ISREG(st.st_mode) and st.st_size < 1 << 20:
            info["data"] = p.read_bytes()
        out[entry] = info
    return out


def judge_output_path(result: dict, limits: Limits, before: dict, after: dict, target: str,
                      created: str | None, flag: str) -> list[str]:
    """Problems of one ``build ... --output P`` / ``--save-params P`` run whose ``P`` (``target``, an entry of
    the case's folder, maybe a symlink) was a FIFO, a directory, a character device, a file with a special
    mode, a symlink to one of them or a dangling symlink. ``before`` / ``after``: :func:`snapshot` of the
    folder; ``created``: the entry a successful write may add (the file P, or the dangling link's target).
    The rules: the CLI's own (:func:`judge_cli`: exit 0, or 1 with one message; never a hang, so a FIFO is
    never blocked on); every entry that existed keeps its type, mode, device number and link target (a
    device stays a device, a symlink stays a symlink, a directory keeps its entries); an existing regular
    file changes only its contents, and only when the CLI exits 0 (to a readable ``.npz`` / safetensors
    file); no other entry appears (no temporary file is left behind)."""
    problems = judge_cli(result, limits)
    if problems:
        return problems
    rc = result["rc"]
    if rc not in (0, 1):
        return [f"exit {rc} for an output path (expected 0 or 1)"]
    extra = sorted(set(after) - set(before) - ({created} if created and rc == 0 else set()))
    if extra:
        problems.append(f"entries left behind in the folder: {extra}")
    for name, was in before.items():
        now = after.get(name)
        if now is None:
            problems.append(f"{name!r} ({stat.filemode(was['type'] | was['mode'])}) was removed")
            continue
        for key in ("type", "mode", "rdev", "link", "entries"):
            if was.get(key) != now.get(key):
                problems.append(f"{name!r}: its {key} changed from {was.get(key)!r} to {now.get(key)!r}")
        if "data" in was and was["data"] != now.get("data") and rc != 0:
            problems.append(f"{name!r}: its contents changed although the CLI failed (exit {rc})")
    written = [info for n, info in after.items() if "data" in info and info["data"] != before.get(n, {}).get("data")]
    for info in written:
        if not _readable(info["data"], flag):
            problems.append(f"the file written for {flag} is not a readable {'.npz' if flag == '--output' else 'safetensors'} file")
    return problems


def _readable(data: bytes, flag: str) -> bool:
    import io

    import numpy as np

    try:
        if flag == "--output":
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                return len(z.files) > 0
        from safetensors.numpy import load

        return len(load(data)) > 0
    except Exception:  # noqa: BLE001 - any failure to read it back is the finding
        return False
