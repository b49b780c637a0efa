"""The fuzz targets: write a case's files, run it in the worker, judge it, count it.

:class:`Fuzzing` owns the worker, a scratch folder and the good inputs the damaged ones come from
(seed recipes, a safetensors file written by the ``safetensors`` library, a compiled executable with
its inputs and the digest of its result).
"""
from __future__ import annotations

import itertools
import time
from pathlib import Path

import numpy as np

from .harness import STATS, Limits, Worker, judge_cli, judge_exe, judge_onnx, judge_weights
from .strategies import SEEDS
from .worker import digest


def _outcome_name(result: dict) -> str:
    if result["outcome"] != "done":
        return result["outcome"]
    if "rc" in result:
        return f"exit {result['rc']}"
    ours = result["ours"]
    return "accepted" if "ok" in ours else f"refused ({ours['error']})"


class Fuzzing:
    """Runs fuzz cases of every kind (see the module docstring); each method returns the problems."""

    def __init__(self, tmp: Path, limits: Limits | None = None, keep: Path | None = None) -> None:
        self.tmp = Path(tmp)
        self.keep = Path(keep) if keep else None    # where the files of cases with problems are copied
        self.limits = limits or Limits()
        self.worker = Worker(self.tmp, self.limits)
        self.counter = itertools.count()
        self._good_weights: bytes | None = None
        self._exe: tuple[bytes, Path, str] | None = None

    def close(self) -> None:
        """Stop the worker."""
        self.worker.close()

    def _file(self, suffix: str, data: bytes | str) -> Path:
        path = self.tmp / f"case{next(self.counter)}{suffix}"
        if isinstance(data, str):
            path.write_text(data, encoding="utf-8", errors="surrogatepass")
        else:
            path.write_bytes(data)
        return path

    def _run(self, kind: str, case: dict, judge) -> list[str]:
        t0 = time.perf_counter()
        result = self.worker.run(case)
        problems = judge(result)
        STATS.record(kind, _outcome_name(result), problems, result.get("peak_kib", -1),
                     time.perf_counter() - t0, case)
        if problems and self.keep is not None and "path" in case:
            import shutil

            self.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(case["path"], self.keep)
        return problems

    # -- recipes ------------------------------------------------------------------------------------
    def recipe(self, seed: str, text: str, overrides: list[str] = ()) -> list[str]:
        """Build recipe ``text`` through the CLI (``--no-ir``) with ``overrides``."""
        path = self._file(".yaml", text)
        case = {"kind": "cli", "argv": [str(path), *overrides, "--no-ir"], "seed": seed}
        kind = "override" if overrides else "recipe"
        return self._run(kind, case, lambda r: judge_cli(r, self.limits, str(path)))

    def override(self, seed: str, overrides: list[str]) -> list[str]:
        """Build seed recipe ``seed`` with ``overrides``."""
        return self.recipe(seed, SEEDS[seed], overrides)

    # -- weights ------------------------------------------------------------------------------------
    @property
    def good_weights(self) -> bytes:
        """A small safetensors file written by the library (float32, float16 and int64 tensors)."""
        if self._good_weights is None:
            from safetensors.numpy import save

            rng = np.random.default_rng(0)
            self._good_weights = save({
                "a": rng.standard_normal((3, 4)).astype(np.float32),
                "b": rng.standard_normal(5).astype(np.float16),
                "c": np.arange(4, dtype=np.int64).reshape(2, 2),
            })
        return self._good_weights

    def weights(self, data: bytes) -> list[str]:
        """Load the damaged file ``data`` with ours and with the library, expecting the good file's tensors."""
        path = self._file(".safetensors", data)
        case = {"kind": "weights", "path": str(path),
                "expected": {"a": [[3, 4], "float32"], "b": [[5], "float16"], "c": [[2, 2], "int64"]}}
        return self._run("weights", case, lambda r: judge_weights(r, self.limits))

    # -- executables --------------------------------------------------------------------------------
    @property
    def good_exe(self) -> tuple[bytes, Path, str]:
        """``(saved executable, .npz of its call's arguments, digest of the result)`` for the ``packed`` seed
        (linear, attention, LayerNorm and gather kernels, a runtime builtin and a count bound by
        ``match_shape``), called on a padded batch."""
        if self._exe is None:
            import builder
            from runtime import Executable, VirtualMachine

            recipe = self._file(".yaml", SEEDS["packed"])
            m = builder.build(recipe)
            data = m.exe.save()
            ids = np.random.default_rng(1).integers(0, 32, (2, 5)).astype(np.int64)
            mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)
            args = [ids, mask] + [m.params[n] for n in m.param_names]
            inputs = self.tmp / "exe_inputs.npz"
            np.savez(inputs, **{f"arg{i}": a for i, a in enumerate(args)})
            reference = digest(VirtualMachine(Executable.load(data))["forward"](*args))
            self._exe = (data, inputs, reference)
        return self._exe

    def load_good_exe(self):
        """A fresh in-memory copy of the good executable (for changes saved again)."""
        from runtime import Executable

        return Executable.load(self.good_exe[0])

    def exe(self, data: bytes, exact: bool, call: bool = True) -> list[str]:
        """Load the damaged executable ``data`` and (with ``call``) call it (see
        :func:`tests.fuzz.harness.judge_exe`)."""
        _, inputs, reference = self.good_exe
        path = self._file(".mbexe", data)
        case = {"kind": "exe", "path": str(path), "inputs": str(inputs), "function": "forward", "call": call}
        return self._run("exe", case, lambda r: judge_exe(r, self.limits, reference, exact))

    # -- ONNX models --------------------------------------------------------------------------------
    def onnx(self, seed: str, data: bytes) -> list[str]:
        """Import, compile and run the damaged ONNX model ``data`` (made from seed ``seed``)."""
        path = self._file(".onnx", data)
        return self._run("onnx", {"kind": "onnx", "path": str(path), "seed": seed},
                         lambda r: judge_onnx(r, self.limits))
