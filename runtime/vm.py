"""``VirtualMachine``: runs an :class:`~runtime.executable.Executable` on numpy arrays.

    vm = VirtualMachine(exe)              # loads the native kernels
    y = vm["forward"](x, w1, w2)          # or vm.invoke("forward", ...)
    vm.set_input("forward", x, w1=w1, w2=w2); y = vm.run("forward")   # TVM's stateful style

Before any kernel runs, every argument is checked against the function's signature: it must be
a numpy array of the declared dtype and ndim, static dims must match, and each symbolic dim
(``batch_size``) must have one value across all arguments. A mismatch raises ValueError naming
the argument and both sides. The kernels check again natively (their ABI returns an error code
before touching memory), so a wrong input is an exception, never a crash.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .executable import Executable
from .native import NativeLibrary, dim_to_str, eval_dim, numpy_dtype

__all__ = ["VirtualMachine"]


def _shape_text(dims: list) -> str:
    return "(" + ", ".join(dim_to_str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


class VirtualMachine:
    """Interpreter of an Executable's bytecode; kernels run as native code.

    ``VirtualMachine(exe, device="cpu")``. Raises ValueError for a device other than "cpu".
    """

    def __init__(self, exe: Executable, device: Any = "cpu") -> None:
        if str(device) not in ("cpu", "cpu(0)"):
            raise ValueError(f"device {device!r} is not supported; only 'cpu'")
        self.exe = exe
        self.lib = NativeLibrary(exe.object_code, exe.kernels)
        self._inputs: dict[str, tuple] = {}

    def __getitem__(self, name: str):
        fn = self.exe._function(name)

        def call(*args: Any, **kwargs: Any):
            return self._run(name, fn, self._collect(name, fn, args, kwargs))

        call.__name__ = name
        return call

    def invoke(self, name: str, *args: Any) -> Any:
        """Run function ``name`` on ``args`` (numpy arrays) and return its result."""
        return self[name](*args)

    def set_input(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Store the inputs of ``name`` (positional, or keyword by parameter name) for :meth:`run`."""
        fn = self.exe._function(name)
        self._inputs[name] = self._collect(name, fn, args, kwargs)

    def run(self, name: str) -> Any:
        """Run ``name`` on the inputs given to :meth:`set_input`."""
        if name not in self._inputs:
            raise ValueError(f"no inputs set for '{name}'; call set_input first")
        return self._run(name, self.exe._function(name), self._inputs[name])

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _collect(name: str, fn: dict, args: tuple, kwargs: dict) -> tuple:
        params = fn["params"]
        names = [p["name"] for p in params]
        values: list[Any] = list(args)
        if len(values) > len(params):
            raise TypeError(f"{name}() takes {len(params)} arguments ({', '.join(names)}), got {len(values)}")
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{name}() has no parameter '{key}'; parameters: {', '.join(names)}")
            idx = names.index(key)
            if idx < len(values):
                raise TypeError(f"{name}() got parameter '{key}' twice")
            values.extend([_MISSING] * (idx + 1 - len(values)))
            values[idx] = value
        missing = [names[i] for i in range(len(params)) if i >= len(values) or values[i] is _MISSING]
        if missing:
            raise TypeError(f"{name}() missing arguments: {', '.join(missing)}")
        return tuple(values)

    def _check_inputs(self, name: str, fn: dict, args: tuple) -> dict[str, int]:
        env: dict[str, int] = {}
        checked = []
        for i, (p, a) in enumerate(zip(fn["params"], args)):
            if p["kind"] != "tensor":
                continue
            where = f"{name}: argument '{p['name']}' (#{i})"
            if not isinstance(a, np.ndarray):
                raise ValueError(f"{where} must be a numpy array of shape {_shape_text(p['shape'])} "
                                 f"and dtype {p['dtype']}, got {type(a).__name__}")
            if a.dtype != numpy_dtype(p["dtype"]):
                raise ValueError(f"{where} has dtype {a.dtype}, expected {p['dtype']}")
            if a.ndim != len(p["shape"]):
                raise ValueError(f"{where} has {a.ndim} dims {a.shape}, expected {len(p['shape'])} dims "
                                 f"{_shape_text(p['shape'])}")
            for d, tree in enumerate(p["shape"]):
                if isinstance(tree, list) and tree[0] == "var":
                    size = a.shape[d]
                    if tree[1] in env and env[tree[1]] != size:
                        raise ValueError(f"{where} dim {d} is {size}, but the symbolic dim '{tree[1]}' "
                                         f"is already {env[tree[1]]} from an earlier argument "
                                         f"(expected shape {_shape_text(p['shape'])}, got {a.shape})")
                    env[tree[1]] = size
            checked.append((where, p, a))
        for where, p, a in checked:
            for d, tree in enumerate(p["shape"]):
                expected = eval_dim(tree, env)
                if expected != a.shape[d]:
                    raise ValueError(f"{where} has shape {a.shape}, expected {_shape_text(p['shape'])} "
                                     f"(dim {d} must be {expected})")
        return env

    def _run(self, name: str, fn: dict, args: tuple) -> Any:
        env = self._check_inputs(name, fn, args)
        regs: list[Any] = [None] * fn["num_registers"]
        for i, a in enumerate(args):
            regs[i] = np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a
        lib = self.lib
        for ins in fn["instructions"]:
            op = ins[0]
            if op == "call":
                _, kernel, arg_regs, out_regs, out_specs = ins
                outs = []
                for reg, (dtype, dims) in zip(out_regs, out_specs):
                    regs[reg] = np.empty([eval_dim(t, env) for t in dims], dtype=numpy_dtype(dtype))
                    outs.append(regs[reg])
                lib.call(kernel, [regs[r] for r in arg_regs] + outs)
            elif op == "reshape":
                regs[ins[1]] = regs[ins[2]].reshape([eval_dim(t, env) for t in ins[3]])
            elif op == "tuple":
                regs[ins[1]] = tuple(regs[r] for r in ins[2])
            elif op == "get_item":
                regs[ins[1]] = regs[ins[2]][ins[3]]
            elif op == "null":
                regs[ins[1]] = None
            elif op == "const":
                regs[ins[1]] = self.exe.constants[ins[2]]
            elif op == "move":
                regs[ins[1]] = regs[ins[2]]
            elif op == "ret":
                return regs[ins[1]]
            else:
                raise ValueError(f"{name}: unknown instruction {op!r} (executable from a newer compiler?)")
        raise ValueError(f"{name}: bytecode ended without ret")


_MISSING = object()
