"""The fuzz targets: write a case's files, run it in the worker, judge it, count it.

:class:`Fuzzing` owns the worker, a scratch folder and the good inputs the damaged ones come from
(seed recipes, a safetensors file written by the ``safetensors`` library, a compiled executable with
its inputs and the digest of its result).
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import stat
import time
from pathlib import Path

import numpy as np

from .harness import (STATS, Limits, Worker, judge_cli, judge_exe, judge_onnx, judge_onnx_diff, judge_output_path,
                      judge_weights, snapshot)
from .strategies import SEEDS
from .worker import digest


def _outcome_name(result: dict) -> str:
    if result["outcome"] != "done":
        return result["outcome"]
    if "rc" in result:
        return f"exit {result['rc']}"
    if "skip" in result:
        return "skipped (documented rule)" if result["skip"].startswith("documented") else "skipped (onnxruntime refused)"
    ours = result["ours"]
    if "ok" in ours and isinstance(ours["ok"], list):   # a differential case: the differences found
        return "differs" if ours["ok"] else "equal"
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

    def _run(self, kind: str, case: dict, judge, timeout: float | None = None) -> list[str]:
        """Run ``case`` in the worker (within ``timeout`` seconds, default the limits'), judge it with
        ``judge(result, limits)`` and count it under ``kind``."""
        t0 = time.perf_counter()
        limits = self.limits if timeout is None else dataclasses.replace(self.limits, timeout_s=timeout)
        result = self.worker.run(case, timeout=limits.timeout_s)
        problems = judge(result, limits)
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
        return self._run(kind, case, lambda r, lim: judge_cli(r, lim, str(path)))

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
        return self._run("weights", case, lambda r, lim: judge_weights(r, lim))

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
        return self._run("exe", case, lambda r, lim: judge_exe(r, lim, reference, exact))

    # -- ONNX models --------------------------------------------------------------------------------
    def onnx(self, seed: str, data: bytes) -> list[str]:
        """Import, compile and run the damaged ONNX model ``data`` (made from seed ``seed``)."""
        path = self._file(".onnx", data)
        return self._run("onnx", {"kind": "onnx", "path": str(path), "seed": seed},
                         lambda r, lim: judge_onnx(r, lim))

    def onnx_diff(self, case_) -> list[str]:
        """Run the differential case ``case_`` (a :class:`tests.fuzz.onnx_diff.DiffCase`) by onnxruntime and
        by ours, and compare (:func:`tests.fuzz.harness.judge_onnx_diff`)."""
        if case_.data is None:
            STATS.record("onnx_diff", "skipped (onnx shape inference)", [], 0, 0.0, {"desc": case_.desc})
            return []
        path = self._file(".onnx", case_.data)
        npz = path.with_suffix(".npz")
        np.savez(npz, **case_.inputs)
        case = {"kind": "onnx_diff", "path": str(path), "inputs": str(npz), "desc": case_.desc}
        problems = self._run("onnx_diff", case, lambda r, lim: judge_onnx_diff(r, lim))
        if problems and self.keep is not None:
            import shutil

            shutil.copy(npz, self.keep)
        return problems

    # -- structures: symbolic-shape arithmetic, deep / wide ONNX models ----------------------------------------
    def symbolic_recipe(self, desc: str, text: str, timeout: float | None = None) -> list[str]:
        """Build the recipe ``text`` (from :func:`tests.fuzz.structures.symbolic_recipes`) through the CLI."""
        path = self._file(".yaml", text)
        case = {"kind": "cli", "argv": [str(path), "--no-ir"], "desc": desc}
        return self._run("symbolic", case, lambda r, lim: judge_cli(r, lim, str(path)), timeout)

    def deep_onnx(self, model, timeout: float | None = None) -> list[str]:
        """Import, compile and run ``model`` (a :class:`tests.fuzz.structures.Blob` from
        :func:`tests.fuzz.structures.deep_onnx_models`)."""
        path = self._file(".onnx", model.data)
        return self._run("deep_onnx", {"kind": "onnx", "path": str(path), "desc": model.desc},
                         lambda r, lim: judge_onnx(r, lim), timeout)

    # -- output paths of every file type -------------------------------------------------------------------
    def _mlp_files(self) -> tuple[Path, Path]:
        recipe, inputs = self.tmp / "out_mlp.yaml", self.tmp / "out_mlp_inputs.npz"
        if not recipe.exists():
            recipe.write_text(SEEDS["mlp"])
            np.savez(inputs, x=np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32))
        return recipe, inputs

    def output_path(self, target: dict, timeout: float | None = None) -> list[str]:
        """``build mlp.yaml --output P --input X.npz`` or ``--save-params P`` where ``P`` is what ``target``
        (from :func:`tests.fuzz.structures.output_targets`) says, made in a fresh folder; judged by
        :func:`tests.fuzz.harness.judge_output_path`. A character device (the null device's numbers, private
        to the folder) needs root: without it that case is counted as skipped."""
        recipe, inputs = self._mlp_files()
        folder = self.tmp / f"out{next(self.counter)}"
        folder.mkdir()
        kind, link = target["kind"], target["link"]
        name = "target.npz" if target["flag"] == "--output" else "target.safetensors"
        t = folder / name
        created = name
        if kind == "fifo":
            os.mkfifo(t)
        elif kind == "dir":
            t.mkdir()
            (t / "inside.txt").write_text("keep me")
        elif kind == "chardev":
            try:
                os.mknod(t, stat.S_IFCHR | 0o666, os.makedev(1, 3))
            except (PermissionError, OSError):
                STATS.record("output_path", "skipped (no mknod)", [], 0, 0.0, target)
                return []
        elif kind == "file":
            t.write_bytes(b"old contents")
            os.chmod(t, target["mode"])
        elif kind == "missing_dir":
            name = created = "nodir/" + name
        path = folder / name
        if link != "none":
            os.symlink(name if link == "symlink" else "gone", folder / "link")
            path = folder / "link"
            created = "gone" if link == "dangling" else name if kind == "missing" else None
        if kind == "missing_dir":
            created = None
        argv = [str(recipe), "--no-ir", target["flag"], str(path)]
        if target["flag"] == "--output":
            argv += ["--input", str(inputs)]
        before = snapshot(folder)
        case = {"kind": "cli", "argv": argv, "target": target}

        def judge(result, limits):
            return judge_output_path(result, limits, before, snapshot(folder), path.name, created, target["flag"])

        return self._run("output_path", case, judge, timeout)

    # -- many overrides --------------------------------------------------------------------------------------
    def many_overrides(self, desc: str, overrides: list[str], timeout: float | None = None) -> list[str]:
        """Build the ``mlp`` seed with ``overrides`` (from :func:`tests.fuzz.structures.many_overrides`): the
        CLI rules of :func:`tests.fuzz.harness.judge_cli`, and exit 0 or 2 (the overrides are all that can
        be wrong)."""
        path, _ = self._mlp_files()
        case = {"kind": "cli", "argv": [str(path), *overrides, "--no-ir"], "desc": desc}

        def judge(result, limits):
            problems = judge_cli(result, limits, str(path))
            if not problems and result["rc"] not in (0, 2):
                problems = [f"exit {result['rc']} (expected 0 or 2): {result['stderr'][-300:]!r}"]
            return problems

        return self._run("many_overrides", case, judge, timeout)

    # -- tensor-parallel weights (long runs only: two ranks under mpirun) --------------------------------------
    TP_OVERRIDES = ["hidden_size=32", "intermediate_size=64", "num_heads=2", "num_kv_heads=2", "head_dim=16",
                    "num_layers=1", "vocab_size=48", "tensor_parallel_shards=2"]

    def tp_weights(self, spec: dict, timeout: float = 240) -> list[str]:
        """Two ranks of ``recipes/llama.yaml`` (tiny, ``tensor_parallel_shards=2``) under ``mpirun``, each given
        its own weights file, the second made from the first as ``spec`` says
        (:func:`tests.fuzz.structures.tp_weights`): files that differ must be refused (a nonzero exit with a
        message, no traceback, no hang); identical ones must run. Counted as skipped when mpirun or mpi4py
        is missing."""
        import importlib.util
        import shutil
        import subprocess
        import sys

        from .harness import ROOT

        launcher = Path(sys.executable).parent / "mpirun"
        launcher = str(launcher) if launcher.exists() else shutil.which("mpirun")
        if launcher is None or importlib.util.find_spec("mpi4py") is None:
            STATS.record("tp_weights", "skipped (no mpirun)", [], 0, 0.0, spec)
            return []
        from safetensors.numpy import load_file, save_file

        recipe = str(ROOT / "recipes" / "llama.yaml")
        w0 = self.tmp / "tp_w0.safetensors"
        if not w0.exists():
            overrides = [o for o in self.TP_OVERRIDES if not o.startswith("tensor_parallel")]
            res = self.worker.run({"kind": "cli", "argv": [recipe, *overrides, "--no-ir", "--save-params", str(w0)]})
            if res.get("rc") != 0:
                return [f"could not write the first rank's weights: {res.get('stderr', '')[-500:]}"]
            save_file(load_file(str(w0)), str(w0))      # both files written by the same writer
        tensors = load_file(str(w0))
        names = sorted(tensors)
        how = spec["how"]
        if how == "seed":
            rng = np.random.default_rng(spec["index"])
            tensors = {k: (rng.standard_normal(v.shape) * 0.02).astype(v.dtype) for k, v in tensors.items()}
        elif how in ("one_value", "one_tensor"):
            k = names[spec["index"] % len(names)]
            a = tensors[k].copy()
            if how == "one_value":
                flat = a.reshape(-1)
                i = spec["index"] % flat.size
                flat[i] = flat[i] + np.asarray(spec["delta"] * max(1.0, abs(float(flat[i]))), a.dtype)
            else:
                a = (a * 2).astype(a.dtype)
            tensors[k] = a
        w1 = self.tmp / f"tp_w1_{next(self.counter)}.safetensors"
        save_file(tensors, str(w1))
        differ = w1.read_bytes() != w0.read_bytes()
        env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
               "MB_CCL_TIMEOUT": "60", "PYTHONPATH": str(ROOT), "MB_CACHE_DIR": str(self.tmp / "cache")}
        build = str(Path(sys.executable).parent / "build")
        argv = [launcher, "--oversubscribe", "--mca", "btl", "self,sm"]
        for r, w in enumerate((w0, w1)):
            argv += ([":"] if r else []) + ["-n", "1", build, recipe, *self.TP_OVERRIDES, "--no-ir", "--weights",
                                            str(w), "--prompt-ids", "1,2,3", "--max-new-tokens", "2"]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
            rc, text, outcome = proc.returncode, proc.stdout + proc.stderr, "done"
        except subprocess.TimeoutExpired as exc:
            rc, outcome = None, "hang"
            text = (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
        seconds = time.perf_counter() - t0
        problems = []
        if outcome == "hang":
            problems.append(f"mpirun did not finish within {timeout:.0f} s: {text[-800:]}")
        elif "Traceback" in text:
            problems.append(f"a traceback escaped: {text[-1500:]}")
        elif differ and rc == 0:
            problems.append(f"two ranks ran on different weights files ({how}: {spec}) without an error")
        elif differ and "weights" not in text.lower():
            problems.append(f"two ranks on different weights files failed (exit {rc}) without naming the "
                            f"weights: {text[-800:]}")
        elif not differ and rc != 0:
            problems.append(f"two ranks on identical weights failed (exit {rc}): {text[-800:]}")
        name = outcome if outcome != "done" else ("refused" if rc else "ran") + (" (differ)" if differ else " (same)")
        STATS.record("tp_weights", name, problems, -1, seconds, {**spec, "differ": differ})
        return problems
