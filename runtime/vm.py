"""``VirtualMachine``: runs an :class:`~runtime.executable.Executable` on numpy arrays.

    vm = VirtualMachine(exe)              # loads the native kernels
    y = vm["forward"](x, w1, w2)          # or vm.invoke("forward", ...)
    vm.set_input("forward", x, w1=w1, w2=w2); y = vm.run("forward")   # TVM's stateful style

Before any kernel runs, every argument is checked against the function's signature: it must be
a numpy array of the declared dtype and ndim, static dims must match, and each symbolic dim
(``batch_size``) must have one value across all arguments. A mismatch raises ValueError naming
the argument and both sides. The kernels check again natively (their ABI returns an error code
before touching memory), so a wrong input is an exception, never a crash.

A function's bytecode is resolved on its first run into a plan (:mod:`runtime.vm_plan`), which the VM
keeps for that function; the builtins it calls are in :mod:`runtime.builtins`, the externs in
:mod:`runtime.externs`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .builtins import AttentionKVCache
from .executable import Executable
from .externs import register_extern
from .memory import BufferPool
from .native import NativeLibrary, eval_dim, numpy_dtype
from .vm_plan import _Plan, _shape_text

__all__ = ["VirtualMachine", "register_extern", "AttentionKVCache"]


def _bind_arg(where: str, p: dict, a: Any, env: dict, checked: list) -> None:
    """Check argument ``a`` against its signature entry ``p`` (tensor: numpy array of the
    dtype and ndim; shape: ints (``spec.Int`` inputs); tuple: recursively) and bind the
    symbolic dims it defines in ``env``; the full shapes are checked afterwards."""
    kind = p["kind"]
    if kind == "tuple":
        if not isinstance(a, (tuple, list)) or len(a) != len(p["fields"]):
            raise ValueError(f"{where} must be a tuple of {len(p['fields'])} values, got "
                             f"{type(a).__name__}{'' if not isinstance(a, (tuple, list)) else f' of {len(a)}'}")
        for j, (f, v) in enumerate(zip(p["fields"], a)):
            _bind_arg(f"{where} item {j}", f, v, env, checked)
        return
    if kind == "shape":
        dims = p["dims"]
        values = a if isinstance(a, (tuple, list)) else (a,)
        if (len(values) != len(dims)
                or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values)):
            raise ValueError(f"{where} must be {len(dims)} int(s) {_shape_text(dims)}, got {a!r}")
        _bind_dims(where, dims, [int(v) for v in values], env)
        checked.append((where, dims, [int(v) for v in values]))
        return
    if kind != "tensor":
        return
    if isinstance(a, np.generic):   # a numpy scalar: a 0-d array
        a = np.asarray(a)
    if not isinstance(a, np.ndarray):
        raise ValueError(f"{where} must be a numpy array of shape {_shape_text(p['shape'])} "
                         f"and dtype {p['dtype']}, got {type(a).__name__}")
    if a.dtype != numpy_dtype(p["dtype"]) and not (
            p["dtype"] == "bfloat16" and (a.dtype == np.int16 or a.dtype.name == "bfloat16")):
        raise ValueError(f"{where} has dtype {a.dtype}, expected {p['dtype']}"
                         + (" (bfloat16 arrays are their uint16 bit patterns)"
                            if p["dtype"] == "bfloat16" else ""))
    if a.ndim != len(p["shape"]):
        raise ValueError(f"{where} has {a.ndim} dims {a.shape}, expected {len(p['shape'])} dims "
                         f"{_shape_text(p['shape'])}")
    _bind_dims(where, p["shape"], a.shape, env)
    checked.append((where, p["shape"], a.shape))



def _contiguous(a: Any) -> Any:
    """Arrays (also inside tuples, e.g. ``transform_params``' weights) as C-contiguous arrays;
    a numpy scalar becomes a 0-d array."""
    if isinstance(a, np.ndarray):
        return np.ascontiguousarray(a).reshape(a.shape)
    if isinstance(a, np.generic):
        return np.asarray(a)
    if isinstance(a, (tuple, list)):
        return tuple(_contiguous(v) for v in a)
    return a


def _bind_dims(where: str, dims: list, shape, env: dict) -> None:
    for d, tree in enumerate(dims):
        if isinstance(tree, list) and tree[0] == "var":
            size = shape[d]
            if tree[1] in env and env[tree[1]] != size:
                raise ValueError(f"{where} dim {d} is {size}, but the symbolic dim '{tree[1]}' "
                                 f"is already {env[tree[1]]} from an earlier argument "
                                 f"(expected shape {_shape_text(dims)}, got {tuple(shape)})")
            env[tree[1]] = size



class VirtualMachine:
    """Interpreter of an Executable's bytecode; kernels run as native code.

    ``VirtualMachine(exe, device="cpu")``. Raises ValueError for a device other than "cpu".
    A function is planned on its first run; replacing ``exe.functions[name]`` makes a new plan, but a
    function dict edited in place after its first run is not seen.
    """

    def __init__(self, exe: Executable, device: Any = "cpu") -> None:
        if str(device) not in ("cpu", "cpu(0)"):
            raise ValueError(f"device {device!r} is not supported; only 'cpu'")
        self.exe = exe
        self.lib = NativeLibrary(exe.object_code, exe.kernels, exe.target or None)
        self._inputs: dict[str, tuple] = {}
        self._plans: dict[str, _Plan] = {}
        #: the large output buffers, reused across calls (:class:`runtime.memory.BufferPool`)
        self.pool = BufferPool()
        #: the results of weight transforms (row tiles of the float weights), kept while the same
        #: read-only weight arrays are passed: (kernel, id of the array) -> (array, output)
        self.kept: dict = {}
        self._transformed: dict[str, tuple] = {}   # function -> (its dict, transformed_params)
        #: run stretches of kernel calls with one native call each (:mod:`runtime.kernel_runs`); False:
        #: every kernel call goes through ``lib.invoke`` (what profilers that wrap it need)
        self.kernel_runs = True

    def __getitem__(self, name: str):
        fn = self.exe._function(name)

        def call(*args: Any, **kwargs: Any):
            return self._run(name, fn, self._collect(name, fn, args, kwargs))

        call.__name__ = name
        return call

    def transformed_params(self, name: str) -> list[int]:
        """The positions of function ``name``'s parameters that weight transforms read (the float
        weights tiled by :class:`builder.transform.TileWeights`): passed as read-only arrays, their
        transforms are computed once and kept (see the module docstring). KeyError for an unknown
        function."""
        fn = self.exe._function(name)
        known = self._transformed.get(name)
        if known is not None and known[0] is fn:
            return list(known[1])
        nparams = len(fn["params"])
        out: set = set()
        for ins in fn["instructions"]:
            if (isinstance(ins, list) and len(ins) == 5 and ins[0] == "call"
                    and isinstance(self.exe.kernels.get(ins[1]), dict)
                    and self.exe.kernels[ins[1]].get("weight_transform") is True):
                out.update(r for r in ins[2] if type(r) is int and r < nparams)
        self._transformed[name] = (fn, sorted(out))
        return sorted(out)

    def invoke(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run function ``name`` and return its result (TVM's ``invoke``): on ``args`` /
        ``kwargs`` (keywords by parameter name) when given, else on the inputs stored by
        :meth:`set_input` (a function without parameters needs neither)."""
        if args or kwargs or name not in self._inputs:
            return self[name](*args, **kwargs)
        return self._run(name, self.exe._function(name), self._inputs[name])

    def set_input(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Store the inputs of ``name`` (positional, or keyword by parameter name) for :meth:`run`."""
        fn = self.exe._function(name)
        self._inputs[name] = self._collect(name, fn, args, kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """``run("forward")`` runs ``forward`` on the inputs given to :meth:`set_input`
        (ValueError when none were set); ``run("forward", x, ...)`` is ``invoke("forward", x,
        ...)``; ``run(x, ...)`` (no name first) is TVM's shorthand for ``invoke("main", x, ...)``."""
        if args and isinstance(args[0], str):
            name, args = args[0], args[1:]
            if not args and not kwargs:
                if name not in self._inputs:
                    raise ValueError(f"no inputs set for '{name}'; call set_input first")
                return self._run(name, self.exe._function(name), self._inputs[name])
            return self.invoke(name, *args, **kwargs)
        return self.invoke("main", *args, **kwargs)

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _collect(name: str, fn: dict, args: tuple, kwargs: dict) -> tuple:
        params = fn["params"]
        if not kwargs and len(args) == len(params):
            return tuple(args)
        names = [p["name"] for p in params]
        values: list[Any] = list(args)
        if len(values) > len(params):
            raise TypeError(f"{name}() takes {len(params)} arguments ({', '.join(names)}), got {len(values)}")
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{name}() has no parameter '{key}'; parameters: {', '.join(names)}")
            idx = names.index(key)
            if idx < len(values) and values[idx] is not _MISSING:
                raise TypeError(f"{name}() got parameter '{key}' twice")
            values.extend([_MISSING] * (idx + 1 - len(values)))
            values[idx] = value
        missing = [names[i] for i in range(len(params)) if i >= len(values) or values[i] is _MISSING]
        if missing:
            raise TypeError(f"{name}() missing arguments: {', '.join(missing)}")
        return tuple(values)

    def _check_inputs(self, name: str, fn: dict, plan: "_Plan", args: tuple) -> dict[str, int]:
        env: dict[str, int] = {}
        checked: list = []
        for i, (p, a, fast) in enumerate(zip(fn["params"], args, plan.param_checks)):
            # a tensor of static shape that is exactly right needs nothing more (the common case:
            # weights); anything else, e.g. a symbolic dim or a mismatch, takes the full check
            if fast is not None and a.__class__ is np.ndarray and a.dtype is fast[0] and a.shape == fast[1]:
                continue
            _bind_arg(f"{name}: argument '{p['name']}' (#{i})", p, a, env, checked)
        for where, dims, shape in checked:
            for d, tree in enumerate(dims):
                expected = eval_dim(tree, env)
                if expected != shape[d]:
                    raise ValueError(f"{where} has shape {tuple(shape)}, expected {_shape_text(dims)} "
                                     f"(dim {d} must be {expected})")
        return env

    def _plan(self, name: str, fn: dict) -> "_Plan":
        plan = self._plans.get(name)
        if plan is None or plan.fn is not fn:
            plan = self._plans[name] = _Plan(name, fn, self.lib, self.exe.constants, self.pool,
                                             self.exe.kernels, self.kept)
        return plan

    def _run(self, name: str, fn: dict, args: tuple) -> Any:
        plan = self._plan(name, fn)
        env = self._check_inputs(name, fn, plan, args)
        regs: list[Any] = [None] * fn["num_registers"]
        for i, a in enumerate(args):
            regs[i] = a if a.__class__ is np.ndarray and a.flags.c_contiguous else _contiguous(a)
        table = plan.shape_table(env)
        if self.kernel_runs and plan.fast_steps is not None and plan.lock.acquire(blocking=False):
            try:
                for step in plan.fast_steps:
                    step(regs, table, env)
            finally:
                plan.lock.release()
        else:
            for step in plan.steps:
                step(regs, table, env)
        if plan.ret is None:
            raise ValueError(f"{name}: bytecode ended without ret")
        return regs[plan.ret]


_MISSING = object()
