"""``compile(irmod) -> runtime.Executable``: run the pass pipeline, generate native code, emit VM bytecode.

Pipeline: :func:`builder.transform.default_pipeline` (kernel selection, elementwise fusion,
legalization, dead-code elimination; each op call becomes ``R.call_tir`` of a PrimFunc) ->
:func:`builder.codegen.build` (all PrimFuncs into one object file for the host CPU, cached on disk by
content) -> one bytecode function per graph-level function (see ``runtime/executable.py`` for the
instruction set). Calls of runtime builtins (``R.call_pure_packed`` / ``R.call_inplace_packed`` / the impure
``R.call_packed``: the KV caches' ``vm.builtin.kv_cache_*`` and ``vm.builtin.attention_kv_cache_*``,
``vm.builtin.invoke_debug_func`` of ``print_``,
``vm.builtin.prim_value_to_tensor`` of a symbolic int used as a tensor) stay as they are and become
``["call_builtin", dst, name, [arg specs]]``, run by ``runtime/vm.py``.

:class:`JitModule` is what ``nn.Module.jit`` returns: the executable loaded in a VM with the
module's bound parameters and its effects' state, called with the user inputs only.
"""
from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from runtime import Executable, VirtualMachine

from . import codegen
from .codegen.abi import kernel_symbols
from .ir import expr as E
from .ir import relax as rx
from .ir.verifier import verify
from .ir.struct_info import (
    ObjectStructInfo, PrimStructInfo, ShapeStructInfo, TensorStructInfo, TupleStructInfo,
)
from .transform import PassContext, PassInstrument, Sequential, VerifyAfter, default_pipeline

__all__ = ["compile", "BuildProgress", "JitModule", "lower_to_bytecode"]


@dataclass(frozen=True)
class BuildProgress:
    """One step of :func:`compile`, as its ``progress`` callback gets it.

    ``phase``: ``"passes"`` (the graph-level pipeline), ``"kernels"`` (PrimFuncs scheduled, lowered
    and emitted as LLVM IR, one step per function; a function structurally equal to an earlier one
    only gets its metadata), ``"llvm"`` (LLVM optimization and object code, one step per module of
    :func:`builder.codegen.build`; ``item == "cached"`` when the object came from the cache),
    ``"bytecode"`` (VM bytecode), and ``"done"`` once at the end. ``done`` / ``total``: steps finished
    / steps in this phase (``done == 0`` announces a phase). ``item``: what the step was (a pass name,
    a kernel name, ``"part 1"``), or ``""``. ``elapsed``: seconds since :func:`compile` started.
    """

    phase: str
    done: int
    total: int
    item: str
    elapsed: float


def compile(mod: rx.IRModule, target: codegen.Target | None = None,  # noqa: A001
            instruments: Sequence[PassInstrument] = (),
            progress: Callable[[BuildProgress], None] | None = None) -> Executable:
    """Compile an exported (graph-level) IRModule to an :class:`runtime.Executable`: the default
    pipeline (:func:`builder.transform.default_pipeline`, the IR verified after every pass, plus the
    given pass ``instruments``, e.g. ``PrintAfter(["fuse_ops"])``), code generation for the PrimFuncs
    (:func:`builder.codegen.build`: identical kernels compiled once, LLVM on several threads, the
    object cache), and VM bytecode for the graph-level functions.

    ``progress``, when given, is called on the calling thread with a :class:`BuildProgress` at the
    start of each phase and after each step (each pass, each kernel, each LLVM module), so that a
    caller can show a progress bar for builds that take a while; an exception it raises aborts the
    build. The executable's ``build_stats`` says what the build did: ``kernels`` / ``distinct`` /
    ``parts`` (see :class:`builder.codegen.CompiledLibrary`), ``cached``, and ``seconds`` per phase
    (``passes``, ``kernels``, ``llvm``, ``bytecode``, ``total``).

    Raises ValueError for an op without a legalization or an unsupported value.
    """
    t0 = time.perf_counter()

    def report(phase: str, done: int, total: int, item: str = "") -> None:
        if progress is not None:
            progress(BuildProgress(phase, done, total, item, time.perf_counter() - t0))

    pipeline = default_pipeline()
    extra: list[PassInstrument] = []
    if progress is not None:
        extra.append(_PassProgress(report, len(pipeline.names)))
        report("passes", 0, len(pipeline.names))
    with PassContext([VerifyAfter(), *instruments, *extra]):
        legal = pipeline(verify(mod))
    t_passes = time.perf_counter() - t0
    prim_funcs = {n: f for n, f in legal.functions.items() if not isinstance(f, rx.Function)}
    symbols = kernel_symbols(prim_funcs)   # a kernel named `exp` must not be the libm function
    prim_funcs = {symbols[n]: f for n, f in prim_funcs.items()}
    report("kernels", 0, len(prim_funcs))
    lib = codegen.build(prim_funcs, target, progress=report if progress is not None else None)
    t1 = time.perf_counter()
    report("bytecode", 0, 1)
    functions, constants = lower_to_bytecode(legal, symbols)
    report("bytecode", 1, 1)
    exe = Executable(functions, lib.functions, lib.object_code, constants, lib.target, lib.llvm_ir)
    t2 = time.perf_counter()
    exe.compile_seconds = t2 - t0
    exe.legalized = legal
    stats = lib.stats
    exe.build_stats = {"kernels": stats.get("kernels", len(lib.functions)),
                       "distinct": stats.get("distinct", len(lib.functions)),
                       "parts": stats.get("parts", 1), "cached": lib.cached,
                       "seconds": {"passes": t_passes, "kernels": stats.get("emit_seconds", 0.0),
                                   "llvm": stats.get("llvm_seconds", 0.0),
                                   "llvm_optimize": stats.get("optimize_seconds", 0.0),
                                   "llvm_codegen": stats.get("codegen_seconds", 0.0),
                                   "codegen": t1 - t0 - t_passes, "bytecode": t2 - t1, "total": t2 - t0}}
    report("done", 1, 1)
    return exe


class _PassProgress(PassInstrument):
    """Reports ``("passes", k, n, name)`` after each pass of the pipeline."""

    def __init__(self, report: Callable, total: int) -> None:
        self.report = report
        self.total = total
        self.done = 0

    def run_after_pass(self, mod: rx.IRModule, pass_) -> None:
        if not isinstance(pass_, Sequential):
            self.done += 1
            self.report("passes", min(self.done, self.total), self.total, pass_.name)


def _sinfo_json(s) -> Any:
    if isinstance(s, TensorStructInfo):
        return {"kind": "tensor", "dtype": s.dtype, "shape": [_dim(d) for d in s.shape]}
    if isinstance(s, TupleStructInfo):
        return {"kind": "tuple", "fields": [_sinfo_json(f) for f in s.fields]}
    if isinstance(s, PrimStructInfo):
        return {"kind": "prim", "dtype": s.dtype}
    if isinstance(s, ObjectStructInfo):
        return {"kind": "object"}
    if isinstance(s, ShapeStructInfo) and s.values is not None:
        return {"kind": "shape", "dims": [_dim(d) for d in s.values]}
    raise ValueError(f"unsupported struct info {s!r} at the function boundary")


# Symbolic variables are named in bytecode; distinct variables that share a name in one function
# (``hidden_size`` twice, printed ``hidden_size`` / ``hidden_size_1``) get the printer's suffixes
# while that function is lowered, so the VM keeps them apart.
_VAR_RENAMES: contextvars.ContextVar[dict] = contextvars.ContextVar("_VAR_RENAMES", default={})


def _dim(d):
    if isinstance(d, int):
        return d
    renames = _VAR_RENAMES.get()
    if renames:
        vmap = {v: renames[v] for v in E.free_vars(d) if v in renames}
        if vmap:
            d = E.substitute(d, vmap)
    return codegen.dim_to_json(d)


def _distinct_var_names(func: rx.Function) -> dict:
    """Renames for the symbolic variables of ``func`` whose name another variable took first."""
    taken: dict[str, object] = {}
    renames: dict = {}

    def visit(sinfo) -> None:
        if isinstance(sinfo, TupleStructInfo):
            for f in sinfo.fields:
                visit(f)
            return
        dims = (sinfo.shape if isinstance(sinfo, TensorStructInfo) else
                sinfo.values if isinstance(sinfo, ShapeStructInfo) else None) or ()
        for d in dims:
            if isinstance(d, int):
                continue
            for v in E.free_vars(d):
                if v in renames or taken.get(v.name) is v:
                    continue
                name, k = v.name, 0
                while name in taken:
                    k += 1
                    name = f"{v.name}_{k}"
                taken[name] = v
                if name != v.name:
                    renames[v] = E.Var(name, v.dtype)

    for p in func.params:
        visit(p.struct_info)
    for block in func.body.blocks:
        for b in block.bindings:
            visit(b.var.struct_info)
    return renames


def _sinfo_vars(sinfo) -> set:
    """The symbolic vars in the dims of struct info ``sinfo`` (tensors, shapes, tuples of them)."""
    if isinstance(sinfo, TupleStructInfo):
        return set().union(*(_sinfo_vars(f) for f in sinfo.fields))
    dims = (sinfo.shape if isinstance(sinfo, TensorStructInfo) else
            sinfo.values if isinstance(sinfo, ShapeStructInfo) else None) or ()
    return set().union(*(E.free_vars(d) for d in dims if not isinstance(d, int)))


class _FunctionLowering:
    def __init__(self, func: rx.Function, name: str, constants: list[np.ndarray],
                 symbols: dict[str, str] | None = None) -> None:
        self.func = func
        self.name = name
        self.constants = constants
        self.symbols = symbols or {}
        self.regs: dict[rx.Var, int] = {}
        self.instructions: list[list] = []
        self.next = 0
        self.bound: set = set()    # the symbolic vars with a value at this point of the bytecode

    def new_reg(self) -> int:
        self.next += 1
        return self.next - 1

    def reg_of(self, e: rx.Expr) -> int:
        if isinstance(e, rx.Var):
            if e not in self.regs:
                raise ValueError(f"{self.name}: variable '{e.name_hint}' is used before it is defined")
            return self.regs[e]
        if isinstance(e, rx.Constant):
            reg = self.new_reg()
            # np.ascontiguousarray turns a 0-d array into shape (1,); keep the constant's shape
            self.constants.append(np.ascontiguousarray(e.data).reshape(e.data.shape))
            self.instructions.append(["const", reg, len(self.constants) - 1])
            return reg
        if isinstance(e, rx.Tuple):
            regs = [self.reg_of(f) for f in e.fields]
            reg = self.new_reg()
            self.instructions.append(["tuple", reg, regs])
            return reg
        if isinstance(e, rx.TupleGetItem):
            src = self.reg_of(e.tuple_value)
            reg = self.new_reg()
            self.instructions.append(["get_item", reg, src, e.index])
            return reg
        raise ValueError(f"{self.name}: cannot lower {type(e).__name__} to bytecode")

    def lower(self) -> dict:
        token = _VAR_RENAMES.set(_distinct_var_names(self.func))
        try:
            return self._lower()
        finally:
            _VAR_RENAMES.reset(token)

    def _lower(self) -> dict:
        params = []
        for p in self.func.params:
            self.regs[p] = self.new_reg()
            params.append({"name": p.name_hint, **_sinfo_json(p.struct_info)})
            self.bound |= _sinfo_vars(p.struct_info)
        for block in self.func.body.blocks:
            for b in block.bindings:
                self.binding(b.var, b.value)
        ret = self.reg_of(self.func.body.body)
        self.instructions.append(["ret", ret])
        return {"params": params, "num_input": self.func.num_input, "instructions": self.instructions,
                "num_registers": self.next, "ret": _sinfo_json(self.func.ret_struct_info)}

    def binding(self, var: rx.Var, value: rx.Expr) -> None:
        if isinstance(value, rx.Call) and isinstance(value.op, rx.Op):
            op = value.op.name
            if op == "relax.call_tir":
                gvar, args = value.args
                arg_regs = [self.reg_of(a) for a in args.fields]
                outs = value.sinfo_args
                out_regs = [self.new_reg() for _ in outs]
                specs = [[s.dtype, [_dim(d) for d in s.shape]] for s in outs]
                self.instructions.append(["call", self.symbols.get(gvar.name_hint, gvar.name_hint), arg_regs,
                                          out_regs, specs])
                if len(outs) == 1:
                    self.regs[var] = out_regs[0]
                else:
                    reg = self.new_reg()
                    self.instructions.append(["tuple", reg, out_regs])
                    self.regs[var] = reg
                return
            if op == "relax.call_dps_packed":
                self.call_extern(var, value)
                return
            if op in ("relax.call_pure_packed", "relax.call_inplace_packed"):
                self.call_builtin(var, value)
                return
            if op == "relax.reshape":
                src = self.reg_of(value.args[0])
                reg = self.new_reg()
                self.instructions.append(["reshape", reg, src, [_dim(d) for d in value.args[1].values]])
                self.regs[var] = reg
                return
            if op == "relax.null_value":
                reg = self.new_reg()
                self.instructions.append(["null", reg])
                self.regs[var] = reg
                return
            raise ValueError(f"{self.name}: operator {op} was not legalized")
        if isinstance(value, rx.Call) and isinstance(value.op, rx.ExternFunc):   # R.call_packed (impure)
            self.call_builtin(var, rx.Call(value.op, [value.op, *value.args], sinfo_args=value.sinfo_args))
            return
        if isinstance(value, rx.Var):
            self.regs[var] = self.reg_of(value)
            return
        self.regs[var] = self.reg_of(value)

    def arg_spec(self, a: rx.Expr, callee: str) -> list:
        """How an argument of a runtime function travels in bytecode: ``["int" | "float" |
        "str", value]`` for constants, ``["dim", tree]`` for a symbolic int, ``["shape",
        [trees]]`` for a shape, ``["reg", register]`` for any other value. Raises ValueError for a
        symbolic non-integer scalar."""
        if isinstance(a, rx.ShapeExpr):
            return ["shape", [_dim(d) for d in a.values]]
        if isinstance(a, rx.PrimValue):
            v = a.value
            if isinstance(v, E.IntImm):
                return ["int", v.value]
            if isinstance(v, E.FloatImm):
                return ["float", v.value]
            if E.is_int_dtype(v.dtype):
                return ["dim", _dim(v)]
            raise ValueError(f"{self.name}: {callee} gets a symbolic non-integer scalar {v}, which the "
                             "VM cannot evaluate")
        if isinstance(a, rx.StringImm):
            return ["str", a.value]
        return ["reg", self.reg_of(a)]

    def call_extern(self, var: rx.Var, value: rx.Call) -> None:
        """``R.call_dps_packed("name", (args...), out_sinfo=...)`` -> ``call_extern``: the VM
        allocates the outputs and calls the registered Python function (``runtime.register_extern``)
        with the arguments then the outputs. Scalars travel as ``["int" | "float" | "str", value]``,
        symbolic ints as ``["dim", tree]``, tensors as ``["reg", register]``."""
        func, args = value.args
        specs_in = [self.arg_spec(a, f"extern '{func.global_symbol}'") for a in args.fields]
        out = value.sinfo_args[0]
        outs = list(out.fields) if isinstance(out, TupleStructInfo) else [out]
        out_regs = [self.new_reg() for _ in outs]
        specs = [[s.dtype, [_dim(d) for d in s.shape]] for s in outs]
        self.instructions.append(["call_extern", func.global_symbol, specs_in, out_regs, specs])
        if isinstance(out, TupleStructInfo):
            reg = self.new_reg()
            self.instructions.append(["tuple", reg, out_regs])
            self.regs[var] = reg
        else:
            self.regs[var] = out_regs[0]

    def call_builtin(self, var: rx.Var, value: rx.Call) -> None:
        """``R.call_pure_packed("name", args..., sinfo_args=...)`` (and ``call_inplace_packed``; an impure
        ``R.call_packed`` comes here with its callee put first, as the others have it)
        -> ``["call_builtin", dst, name, [arg specs]]``: the VM runs its builtin ``name``
        (``vm.builtin.attention_kv_cache_*``, ``vm.builtin.invoke_debug_func``, ...) on the
        arguments and stores the result. Argument specs: ``["reg", r]``, ``["int" | "float" |
        "str", value]``, ``["dim", tree]`` (a symbolic int) and ``["shape", [trees]]``."""
        func, *args = value.args
        specs = [self.arg_spec(a, f"'{func.global_symbol}'") for a in args]
        reg = self.new_reg()
        self.instructions.append(["call_builtin", reg, func.global_symbol, specs])
        self.regs[var] = reg
        self.match_shapes(reg, value.sinfo_args[0] if value.sinfo_args else None)

    def match_shapes(self, reg: int, sinfo) -> None:
        """After a builtin whose result has dims in symbolic vars without a value yet (a data-dependent
        shape: ``vm.builtin.nonzero``'s count), ``["match_shape", reg, dims]`` binds them from the
        array the builtin returned (in a tuple: per field, through ``get_item``)."""
        if isinstance(sinfo, TupleStructInfo):
            for i, f in enumerate(sinfo.fields):
                if _sinfo_vars(f) - self.bound:
                    item = self.new_reg()
                    self.instructions.append(["get_item", item, reg, i])
                    self.match_shapes(item, f)
            return
        if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None and _sinfo_vars(sinfo) - self.bound:
            self.instructions.append(["match_shape", reg, [_dim(d) for d in sinfo.shape]])
            self.bound |= _sinfo_vars(sinfo)


def lower_to_bytecode(mod: rx.IRModule, symbols: dict[str, str] | None = None
                      ) -> tuple[dict[str, dict], list[np.ndarray]]:
    """Bytecode for every graph-level function of a legalized module, and the constant pool.
    ``symbols`` maps PrimFunc names to their object-code symbols (:func:`codegen.abi.kernel_symbols`)."""
    constants: list[np.ndarray] = []
    functions = {}
    for name, func in mod.functions.items():
        if isinstance(func, rx.Function):
            functions[name] = _FunctionLowering(func, name, constants, symbols or {}).lower()
    return functions, constants


class JitModule:
    """A compiled module bound to its parameters' data: ``m["forward"](x)`` or ``m.forward(x)``
    (TVM's ``TorchModule``, with numpy arrays in and out).

    ``JitModule(mod, params, spec=None)``; built by ``nn.Module.jit``; ``m(x)`` runs
    ``forward``. A call takes the
    method's spec inputs only (numpy arrays for tensors, ints for ``spec.Int``, tuples for
    ``spec.Tuple``): the parameters are appended (one tuple under ``param_mode="packed"``,
    none under ``"none"``) and, when the module has effects (``_initialize_effect``: the IO
    effect of ``debug=True``, KV caches), the effects' current state is passed in and replaced
    by the state the function returns, so state persists across calls. :meth:`reset_effects`
    starts over. Without ``spec`` every function is taken as plain / plain.

    Raises ValueError when a parameter has no data; a call raises TypeError for a wrong number
    of inputs.
    """

    def __init__(self, mod: rx.IRModule, params: list[tuple[str, Any]], spec: Any = None) -> None:
        missing = [name for name, p in params if p.data is None]
        if missing:
            raise ValueError(f"Parameters are not set to any concrete values: {', '.join(missing)}")
        self.ir = mod
        self.exe = compile(mod)
        self.vm = VirtualMachine(self.exe)
        self.params = [p.data for _, p in params]
        self.modes: dict[str, tuple[str, str, int]] = {}
        if spec is not None:
            for name, mspec in zip(spec.method_names, spec.method_specs):
                self.modes[name] = (mspec.param_mode, mspec.effect_mode, len(mspec.arg_specs))
        self.effects: list | None = None
        self.reset_effects()

    def reset_effects(self) -> None:
        """(Re)create the effects' state by running ``_initialize_effect`` (no-op without it)."""
        if "_initialize_effect" in self.exe.functions:
            self.effects = list(self.vm["_initialize_effect"]())
        else:
            self.effects = None

    def __getitem__(self, name: str):
        calls = self.__dict__.setdefault("_calls", {})
        if name not in calls:
            calls[name] = self._make_call(name)
        return calls[name]

    def _make_call(self, name: str):
        fn = self.vm[name]
        num_input = self.exe.functions[name]["num_input"]
        effects = self.effects or []
        param_mode, effect_mode, num_args = self.modes.get(
            name, ("plain", "plain", num_input - len(effects)))
        threads_effects = self.effects is not None and effect_mode != "none"
        params = {"plain": self.params, "packed": [tuple(self.params)], "none": []}[param_mode]

        def call(*args):
            if len(args) != num_args:
                raise TypeError(f"{name}() takes {num_args} inputs, got {len(args)}")
            args = [(int(a),) if isinstance(a, (int, np.integer)) and not isinstance(a, bool) else a
                    for a in args]
            if not threads_effects:
                state = []
            elif effect_mode == "packed":
                state = [tuple(self.effects)]
            else:
                state = list(self.effects)
            out = fn(*args, *state, *params)
            if threads_effects:
                out, new_state = out
                self.effects = list(new_state)
            return out

        call.__name__ = name
        return call

    def __call__(self, *args):
        """``m(x)`` is ``m["forward"](x)``."""
        return self["forward"](*args)

    def __getattr__(self, name: str):
        if name.startswith("_") or name in ("exe", "vm", "params", "ir", "modes", "effects"):
            raise AttributeError(name)
        if name in self.exe.functions:
            return self[name]
        raise AttributeError(f"compiled module has no function '{name}'")
