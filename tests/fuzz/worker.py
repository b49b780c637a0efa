"""The process that runs fuzz cases, one at a time, for :mod:`tests.fuzz.harness`.

Protocol: one JSON object per line on stdin (a case), one JSON object per line on stdout (its
result). Python-level output of a case is captured; anything the native side writes to fd 2
(an LLVM assertion, glibc's ``malloc(): ...``) goes to the stderr the harness gave this process,
which is how a crash is diagnosed. Before each case the peak resident set size is reset
(``/proc/self/clear_refs``, value 5), and the result reports the case's own peak in KiB.

Case kinds:

- ``{"kind": "cli", "argv": [...]}``: ``builder.cli.main(argv)``; result ``rc``, ``stdout``, ``stderr``.
- ``{"kind": "weights", "path": P, "expected": {name: [shape, dtype]}}``: our
  :func:`runtime.load_params` and the ``safetensors`` library's own reader on the same file;
  result ``ours`` / ``library``: ``{"ok": digest}`` or ``{"error": type, "message": text}``.
- ``{"kind": "exe", "path": P, "inputs": NPZ, "function": F, "call": bool}``: ``Executable.load``,
  ``VirtualMachine`` and (unless ``call`` is false) one call on the arrays of the ``.npz`` (in its
  order); result ``ours`` as above.
- ``{"kind": "onnx", "path": P}``: ``from_onnx``, ``compile`` and one call of ``main``
  (:func:`_onnx`); result ``ours`` as above.
- ``{"kind": "onnx_diff", "path": P, "inputs": NPZ}``: onnxruntime, then ours, on the same inputs
  (:func:`tests.fuzz.onnx_diff.run_case`); result ``skip`` (onnxruntime refused) or ``ours``:
  ``{"ok": [differences]}`` or an error as above.

Run as ``python -m tests.fuzz.worker`` from the repository root.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
import traceback



def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def _peak_kib() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def digest(value) -> str:
    """SHA-256 over the dtype, shape and bytes of an array or a (nested) tuple of arrays."""
    import numpy as np

    h = hashlib.sha256()

    def add(v):
        if isinstance(v, (tuple, list)):
            h.update(b"(")
            for item in v:
                add(item)
            h.update(b")")
        else:
            a = np.ascontiguousarray(v)
            h.update(f"{a.dtype}{a.shape}".encode())
            h.update(a.tobytes())

    add(value)
    return h.hexdigest()


def _outcome(fn) -> dict:
    try:
        return {"ok": fn()}
    except BaseException as exc:  # noqa: BLE001 - every escape is a finding for the harness
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return {"error": type(exc).__name__, "message": str(exc)[:2000],
                "module": type(exc).__module__, "trace": traceback.format_exc()[-3000:]}


def _cli(case: dict) -> dict:
    from builder.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(case["argv"]))
        except SystemExit as exc:   # argparse
            rc = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # noqa: BLE001 - escaped the CLI: what a user would see as a traceback
            err.write(traceback.format_exc())
            rc = "traceback"
    text = err.getvalue()
    if len(text) > 200_000:     # kept whole lines only: a line cut in two would read as a malformed issue
        text = text[:text.rfind("\n", 0, 200_000) + 1]
    return {"rc": rc, "stdout": out.getvalue()[-4000:], "stderr": text}


def _weights(case: dict) -> dict:
    import numpy as np

    from runtime import load_params

    expected = {k: (tuple(v[0]), v[1]) for k, v in case["expected"].items()}

    def ours():
        params = load_params(case["path"], expected)
        return digest([params[k] for k in sorted(params)])

    def library():
        from safetensors import safe_open

        floats = ("float16", "float32", "float64")
        with safe_open(case["path"], framework="numpy") as fh:
            infos = {k: (fh.get_slice(k).get_dtype(), fh.get_slice(k).get_shape()) for k in fh.keys()}
            extra = set(infos) - set(expected)
            if extra:
                raise ValueError(f"unexpected tensors {sorted(extra)}")
            for k, (shape, dtype) in expected.items():
                if k not in infos or tuple(infos[k][1]) != tuple(shape):
                    raise ValueError(f"tensor {k!r} differs from the expected shape {shape}")
            if any(d == "BF16" for d, _ in infos.values()):
                return "unreadable"   # valid, but numpy cannot hold bfloat16: judged on validity only
            arrays = {k: fh.get_tensor(k) for k in infos}
        out = []
        for k in sorted(arrays):
            a, want = arrays[k], expected[k][1]
            if str(a.dtype) != want:
                if str(a.dtype) not in floats or want not in floats:
                    raise ValueError(f"tensor {k!r} is {a.dtype}, expected {want}")
                a = a.astype(np.float32).astype(want) if str(a.dtype) != "float64" else a.astype(want)
            out.append(np.asarray(a))
        return digest(out)

    return {"ours": _outcome(ours), "library": _outcome(library)}


def _exe(case: dict) -> dict:
    import numpy as np

    from runtime import Executable, VirtualMachine

    def run():
        exe = Executable.load(case["path"])
        vm = VirtualMachine(exe)
        if not case.get("call", True):
            return "loaded"
        with np.load(case["inputs"], allow_pickle=False) as data:
            arrays = [data[f"arg{i}"] for i in range(len(data.files))]
        return digest(vm[case["function"]](*arrays))

    return {"ours": _outcome(run)}


#: The most elements of an input array the ONNX fuzzer passes to a model it built.
MAX_ONNX_INPUT = 1 << 20


def _onnx(case: dict) -> dict:
    """``from_onnx`` of a damaged model file, then compile it and call ``main`` on ones of the declared input
    shapes (symbolic dims 2; a compound dim or an input over :data:`MAX_ONNX_INPUT` elements: built only).
    ``build_peak_kib``: the peak resident memory up to the end of the compile (the run may need what the
    model's own shapes ask for, which the runtime checks against the memory it has)."""
    import math

    import numpy as np

    build_peak = [-1]

    def run():
        import builder
        from builder.frontend import from_onnx
        from builder.ir import expr as E
        from runtime import VirtualMachine

        mod = from_onnx(case["path"])
        exe = builder.compile(mod)
        build_peak[0] = _peak_kib()
        args = []
        for p in mod["main"].params:
            sinfo = p.struct_info
            shape = [d if isinstance(d, int) else 2 if isinstance(d, E.Var) else None for d in sinfo.shape]
            if None in shape or math.prod(shape) > MAX_ONNX_INPUT or sinfo.dtype == "bfloat16":
                return "built"
            args.append(np.ones(shape, dtype=sinfo.dtype))
        return digest(VirtualMachine(exe)["main"](*args))

    ours = _outcome(run)
    return {"ours": ours, "build_peak_kib": build_peak[0] if build_peak[0] >= 0 else _peak_kib()}


def _onnx_diff(case: dict) -> dict:
    from .onnx_diff import run_case

    return run_case(case["path"], case["inputs"])


_KINDS = {"cli": _cli, "weights": _weights, "exe": _exe, "onnx": _onnx, "onnx_diff": _onnx_diff}


def main() -> None:
    """Serve cases from stdin until it closes."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)   # stray writes to fd 1 (native code, a print outside a case) must not corrupt the protocol
    sys.stdout = os.fdopen(1, "w", buffering=1)
    for line in sys.stdin:
        case = json.loads(line)
        _reset_peak()
        result = _KINDS[case["kind"]](case)
        result["peak_kib"] = _peak_kib()
        protocol.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
