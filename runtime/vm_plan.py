"""The prepared plan of a function (``_Plan``), which :class:`runtime.vm.VirtualMachine` runs.

A function's bytecode is resolved on its first run into a plan (``_Plan``: one prepared step per
instruction, shapes with symbolic dims looked up per run), which the VM keeps for that function.
A call of a kernel whose metadata says ``weight_transform`` (the row tiles of a float weight,
:class:`builder.transform.TileWeights`) on model parameters only is run once for the arrays passed:
its outputs are kept (``vm.kept``, shared by the functions) while the same read-only arrays come
again, and computed afresh for another or a writable array (which may change between calls).
Large outputs come from the VM's :class:`~runtime.memory.BufferPool` (``vm.pool``), and the plan drops
each register that may hold one after its last use, so the buffers of one call serve the next (and
the later steps of the same call) instead of faulting in fresh pages.

Each stretch of two or more kernel calls between other instructions (builtins, externs, tuples) runs
as one native call (:mod:`runtime.kernel_runs`): its argument tables are laid out once per set of symbolic
dims, its intermediates live in an arena placed by their lifetimes, and only the arrays that come from
outside are checked per run (a parameter once per array object). Whatever that path cannot take it
leaves to the instructions' own steps, which raise the precise errors; ``vm.kernel_runs = False`` runs
every call through :meth:`NativeLibrary.invoke` (for profilers that time each call).
"""
from __future__ import annotations

import math
import operator
import threading
from typing import Any

import numpy as np

from .builtins import _call_builtin
from .externs import _call_extern, _extern_arg
from .kernel_runs import Arena, KernelRun
from .memory import CHECKED_ALLOCATION, BufferPool, check_allocation
from .native import NativeLibrary, dim_to_str, eval_dim, numpy_dtype


def _alloc(func: str, callee: str, dims: list, dtype: str, env: dict, pool: BufferPool) -> np.ndarray:
    """The output buffer of a call: ``dims`` evaluated in ``env``, from ``pool``. Raises ValueError naming the
    function, the callee and the shape when a dim comes out negative (the inputs are too small
    for the op, e.g. a convolution window wider than its padded input), and
    :class:`runtime.memory.MemoryLimitError` when the buffer is larger than the memory available."""
    shape = [eval_dim(t, env) for t in dims]
    if shape and min(shape) < 0:
        raise ValueError(f"{func}: the output of '{callee}' would have shape {tuple(shape)} "
                         f"({_shape_text(dims)} with {', '.join(f'{k}={v}' for k, v in env.items())}): "
                         "the inputs are too small for it")
    np_dtype = numpy_dtype(dtype)
    nbytes = math.prod(shape) * np_dtype.itemsize
    if nbytes > _CHECKED_ALLOCATION:
        check_allocation(nbytes, f"{func}: the output of '{callee}' of shape {tuple(shape)} {dtype}")
    return pool.empty(tuple(shape), np_dtype)


#: Output buffers above this many bytes are checked against the memory available before allocating
#: (a module global, so that tests can lower it).
_CHECKED_ALLOCATION = CHECKED_ALLOCATION


def _shape_text(dims: list) -> str:
    return "(" + ", ".join(dim_to_str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"


class _Plan:
    """A function's bytecode resolved once, for the VM to run many times (one per VM and function).

    ``steps``: one callable ``step(regs, table, env)`` per instruction up to the first ``ret`` (the
    instructions after it never run); ``ret``: the register returned (None when the bytecode has no
    ``ret``). A kernel call holds its kernel's prepared entry (:meth:`NativeLibrary.entry`), its
    registers and its outputs' dtypes; an output or reshape shape whose dims are all ints is a tuple
    made once. The shapes with symbolic dims are looked up in ``table`` (:meth:`shape_table`, once
    per run), which is built from the distinct symbolic dims evaluated in ``env`` and cached by their
    values: the shapes that depend on the same symbolic dims form a group, and a group is computed
    again only when one of its dims changed (in decoding, the shapes of ``batch`` stay and those of
    ``total_seq_len`` are recomputed). An output shape that is negative or larger than
    ``_CHECKED_ALLOCATION`` bytes is allocated by :func:`_alloc`, which raises ValueError /
    MemoryLimitError as before; a reshape checks its element count on every run.

    Outputs of at least ``pool.min_bytes`` (or of a symbolic shape) come from ``pool``
    (:meth:`BufferPool.empty`), the others from ``np.empty``. ``kills``: after the steps that read a
    register for the last time, a step sets it to None when it may hold a pooled buffer (a large or
    symbolic output, or a reshape / tuple / item / move / builtin result of one), so that the buffer
    is free for the following steps once no other array views it (the register returned is kept).

    ``param_checks``: per parameter ``(numpy dtype, shape)`` when it is a tensor of static shape
    (not bfloat16, whose bits may come as int16), so that a matching argument passes
    :meth:`VirtualMachine._check_inputs` with one comparison; None otherwise (the full check).
    """

    #: Entries of one group's cache of shapes before it is cleared.
    CACHE_ENTRIES = 64

    def __init__(self, name: str, fn: dict, lib: NativeLibrary, constants: list, pool: BufferPool,
                 kernels: dict | None = None, kept: dict | None = None) -> None:
        self.fn = fn
        self.name = name
        self.pool = pool
        self.kernels = kernels or {}
        self.kept = {} if kept is None else kept
        self.param_checks = [self._param_check(p) for p in fn["params"]]
        body, self.ret = [], None
        for ins in fn["instructions"]:
            if isinstance(ins, list) and ins and ins[0] == "ret":
                self.ret = ins[1]
                break
            body.append(ins)
        # the distinct symbolic trees, in order of first use; every shape with one of them gets a
        # place in the table, grouped by the trees it uses
        trees: dict[str, int] = {}
        self._trees: list = []
        groups: dict[tuple, list] = {}
        for pos, ins in enumerate(body):
            for j, (dims, itemsize) in enumerate(self._shapes_of(ins)):
                if all(type(d) is int for d in dims):
                    continue
                deps = set()
                for d in dims:
                    if type(d) is not int and repr(d) not in trees:
                        trees[repr(d)] = len(self._trees)
                        self._trees.append(d)
                    if type(d) is not int:
                        deps.add(trees[repr(d)])
                groups.setdefault(tuple(sorted(deps)), []).append(((pos, j), dims, itemsize))
        # symbolic vars bound while the function runs (``match_shape`` of a data-dependent result, e.g.
        # ``vm.builtin.nonzero``'s count), not by the arguments: the trees using them have no value
        # when a run starts, and the table is made again after each such binding
        bound: set = set()
        for p in fn["params"]:
            self._param_vars(p, bound)
        late: set = set()
        for ins in body:
            if isinstance(ins, list) and len(ins) == 3 and ins[0] == "match_shape" and isinstance(ins[2], list):
                self._env_vars(ins[2], late)
        self._late = frozenset(late - bound)
        self._late_trees = set()
        for i, tree in enumerate(self._trees):
            used: set = set()
            self._env_vars([tree], used)
            if used & self._late:
                self._late_trees.add(i)
        self._index: dict[tuple, int] = {}
        self._groups = []
        self._late_groups = []      # (table offset, group) of the groups using a late tree
        for deps, items in groups.items():
            at = len(self._index)
            for k, (key, _, _) in enumerate(items):
                self._index[key] = len(self._index)
            self._groups.append((operator.itemgetter(*deps), [(self._getter(dims, trees), itemsize)
                                                             for _, dims, itemsize in items], {}))
            if self._late_trees & set(deps):
                self._late_groups.append((at, self._groups[-1]))
        steps = [self._step(pos, ins, lib, constants) for pos, ins in enumerate(body)]
        self.kills = self._kills(body, pool.min_bytes)
        self.steps = []
        for pos, step in enumerate(steps):
            self.steps.append(step)
            if pos in self.kills:
                self.steps.append(self._kill_step(self.kills[pos]))
        #: the same body with its stretches of kernel calls as :class:`runtime.kernel_runs.KernelRun` steps
        #: (None: no stretch worth one); one run at a time uses them (``lock``: a second thread running
        #: the function meanwhile takes ``steps``), since their intermediates live in one ``arena``
        self.lock = threading.Lock()
        self.arena = Arena()
        self.fast_steps = self._fast_steps(body, steps, lib)

    @staticmethod
    def _writes(ins: Any) -> list | None:
        """The registers instruction ``ins`` writes; None when it is malformed."""
        op = ins[0] if isinstance(ins, list) and ins else None
        try:
            if op in ("call", "call_extern"):
                return list(ins[3])
            if op in ("call_builtin", "reshape", "get_item", "move", "tuple", "const", "null"):
                return [ins[1]]
        except (TypeError, IndexError):
            return None
        return []

    @staticmethod
    def _env_vars(dims: list, out: set) -> None:
        """Add the names of the symbolic vars in the dim trees ``dims`` to ``out``."""
        for d in dims:
            if isinstance(d, list):
                if len(d) == 2 and d[0] == "var" and isinstance(d[1], str):
                    out.add(d[1])
                else:
                    _Plan._env_vars(d[1:], out)

    @staticmethod
    def _param_vars(p: Any, out: set) -> None:
        """Add the names of the symbolic vars in parameter signature ``p``'s dims to ``out``."""
        if not isinstance(p, dict):
            return
        for key in ("shape", "dims"):
            if isinstance(p.get(key), list):
                _Plan._env_vars(p[key], out)
        for f in p.get("fields") or ():
            _Plan._param_vars(f, out)

    def _fast_steps(self, body: list, steps: list, lib: NativeLibrary) -> list | None:
        """``steps`` (one per instruction of ``body``) with the constants and kept weight transforms first
        (they read only parameters), and each stretch of two or more kernel calls (with the reshapes
        between them) as one :class:`~runtime.kernel_runs.KernelRun` step that falls back to its
        instructions' own steps. None when the body writes a register twice or a parameter (not SSA), or
        has no such stretch."""
        nparams = len(self.fn["params"])
        written: set = set()
        for ins in body:
            regs = self._writes(ins)
            if regs is None or any(type(r) is not int or r < nparams or r in written for r in regs):
                return None
            written.update(regs)
        kind = []
        for pos, ins in enumerate(body):
            op = ins[0] if isinstance(ins, list) and ins else None
            k = "other"
            if op == "const":
                k = "hoist"
            elif op == "reshape" and len(ins) == 4 and type(ins[2]) is int:
                k = "reshape"
            elif op == "call" and len(ins) == 5 and isinstance(ins[1], str) and ins[1] in lib:
                _, kernel, arg_regs, out_regs, out_specs = ins
                entry = lib.entry(kernel)
                if entry.nparams != len(arg_regs) + len(out_regs):
                    k = "other"
                elif self._keeps(kernel, arg_regs, out_regs, out_specs):
                    k = "hoist"
                elif all(o[1] is not None or o[2] is not None
                         for o in (self._output(pos, j, *spec) for j, spec in enumerate(out_specs))):
                    k = "call"
            kind.append(k)
        readers: dict = {}            # register -> the positions that read it
        for pos, ins in enumerate(body):
            for r in self._reads(ins):
                if type(r) is int:
                    readers.setdefault(r, []).append(pos)
        order = [pos for pos in range(len(body)) if kind[pos] == "hoist"]
        stable = set(range(nparams)).union(*(self._writes(body[pos]) for pos in order))
        order += [pos for pos in range(len(body)) if kind[pos] != "hoist"]
        out: list = []
        any_run = False
        i = 0
        while i < len(order):
            j = i
            while j < len(order) and kind[order[j]] in ("call", "reshape"):
                j += 1
            stretch = order[i:j]
            if sum(kind[pos] == "call" for pos in stretch) >= 2:
                out.append(self._run_step(body, stretch, readers, steps, lib, stable))
                any_run = True
                i = j
                continue
            for pos in order[i:max(j, i + 1)]:
                out.append(steps[pos])
                if pos in self.kills:
                    out.append(self._kill_step(self.kills[pos]))
            i = max(j, i + 1)
        return out if any_run else None

    def _run_step(self, body: list, stretch: list, readers: dict, steps: list, lib: NativeLibrary, stable: set):
        """The step of the stretch of kernel calls and reshapes at positions ``stretch`` (``readers``: register
        -> positions reading it; ``stable``: the registers of parameters, constants and kept weight
        transforms)."""
        inside = set(stretch)
        items, defined, env_vars, kills, slow = [], set(), set(), [], []
        for pos in stretch:
            ins = body[pos]
            if ins[0] == "call":
                _, kernel, arg_regs, out_regs, out_specs = ins
                outputs = []
                for j, (dtype, dims) in enumerate(out_specs):
                    np_dtype, static, k, _, _ = self._output(pos, j, dtype, dims)
                    pooled = not (k is None and static is not None
                                  and math.prod(static) * np_dtype.itemsize < self.pool.min_bytes)
                    outputs.append((np_dtype, static, k, pooled))
                    self._env_vars(dims, env_vars)
                items.append(("call", lib.entry(kernel), list(arg_regs), list(out_regs), outputs))
                defined.update(out_regs)
            else:
                _, dst, src, dims = ins
                if all(type(d) is int for d in dims):
                    static, k = (tuple(dims), -1 if min(dims, default=0) < 0 else math.prod(dims)), None
                else:
                    static, k = None, self._index[(pos, 0)]
                self._env_vars(dims, env_vars)
                items.append(("reshape", dst, src, static, k))
                defined.add(dst)
            kills += self.kills.get(pos, [])
            slow.append(steps[pos])
            if pos in self.kills:
                slow.append(self._kill_step(self.kills[pos]))
        escapes = {r for r in defined if r == self.ret or any(pos not in inside for pos in readers.get(r, ()))}
        run = KernelRun(self.name, items, escapes, stable, sorted(env_vars), kills, self.pool,
                        self.arena, lib.error_text)

        def step(regs, table, env):
            if not run.run(regs, table, env):
                for s in slow:
                    s(regs, table, env)
        step.kernel_run = run
        return step

    @staticmethod
    def _reads(ins: Any) -> list:
        """The registers instruction ``ins`` reads."""
        op = ins[0] if isinstance(ins, list) and ins else None
        try:
            if op == "call":
                return list(ins[2])
            if op == "call_extern":
                return [v for kind, v in ins[2] if kind == "reg"]
            if op == "call_builtin":
                return [v for kind, v in ins[3] if kind == "reg"]
            if op in ("reshape", "get_item", "move"):
                return [ins[2]]
            if op == "match_shape":
                return [ins[1]]
            if op == "tuple":
                return list(ins[2])
        except (TypeError, ValueError, IndexError):
            pass   # a malformed instruction: its step raises when it runs
        return []

    def _kills(self, body: list, min_bytes: int) -> dict[int, list]:
        """``{position: [register, ...]}``: the registers that may hold a pooled buffer, at the
        position of their last read (the returned register never)."""
        pooled: set = set()
        last: dict = {}
        for pos, ins in enumerate(body):
            op = ins[0] if isinstance(ins, list) and ins else None
            reads = self._reads(ins)
            for r in reads:
                if type(r) is int:
                    last[r] = pos
            if op in ("call", "call_extern") and len(ins) == 5:
                for r, (dims, itemsize) in zip(ins[3], self._shapes_of(ins)):
                    if not all(type(d) is int for d in dims) or math.prod(dims) * itemsize >= min_bytes:
                        pooled.add(r)
            elif op in ("reshape", "get_item", "move", "tuple", "call_builtin") and len(ins) > 1:
                if any(r in pooled for r in reads if type(r) is int):
                    pooled.add(ins[1])
        kills: dict[int, list] = {}
        for r in sorted(pooled, key=repr):
            if r != self.ret and r in last:
                kills.setdefault(last[r], []).append(r)
        return kills

    @staticmethod
    def _kill_step(regs_to_clear: list):
        if len(regs_to_clear) == 1:
            r = regs_to_clear[0]

            def step(regs, table, env):
                regs[r] = None
            return step

        def step(regs, table, env):
            for r in regs_to_clear:
                regs[r] = None
        return step

    @staticmethod
    def _param_check(p: dict):
        if (p.get("kind") != "tensor" or p.get("dtype") == "bfloat16"
                or not all(type(d) is int for d in p.get("shape", ()))):
            return None
        return numpy_dtype(p["dtype"]), tuple(p["shape"])

    @staticmethod
    def _shapes_of(ins: Any) -> list:
        """``(dims, itemsize)`` of every shape instruction ``ins`` makes at run time: its outputs
        (``call`` / ``call_extern``), or its target with itemsize None (``reshape``)."""
        op = ins[0] if isinstance(ins, list) and ins else None
        if op in ("call", "call_extern") and len(ins) == 5:
            return [(dims, numpy_dtype(dtype).itemsize) for dtype, dims in ins[4]]
        if op == "reshape" and len(ins) == 4:
            return [(ins[3], None)]
        return []

    @staticmethod
    def _getter(dims: list, trees: dict):
        """``getter(values) -> shape tuple``, ``values`` the symbolic trees' values."""
        parts = [(type(d) is not int, trees[repr(d)] if type(d) is not int else d) for d in dims]
        return lambda values: tuple([values[v] if symbolic else v for symbolic, v in parts])

    def shape_table(self, env: dict) -> list:
        """Every shape with symbolic dims for a run with ``env``: for an output, its shape tuple, or
        None when it must be allocated by :func:`_alloc` (negative or large); for a reshape, ``(shape,
        elements)``, elements -1 when a dim is negative. Each symbolic dim is evaluated first (an
        unbound var or a division by zero raises, before any instruction runs, what
        :func:`runtime.native.eval_dim` raises: KeyError, ZeroDivisionError, ValueError), except those
        with a var that a ``match_shape`` binds during the run: their entries are placeholders until then
        (an output of them is allocated by :func:`_alloc`, a reshape raises, if one ran before it)."""
        values = self._tree_values(env)
        table: list = []
        for deps, items, cache in self._groups:
            table += self._group_shapes(deps, items, cache, values)
        return table

    def update_late_shapes(self, table: list, env: dict) -> None:
        """After ``match_shape`` bound a var: the groups of ``table`` whose shapes use the vars bound
        during the run, made again in place (the others keep their entries)."""
        values = self._tree_values(env)
        for at, (deps, items, cache) in self._late_groups:
            table[at:at + len(items)] = self._group_shapes(deps, items, cache, values)

    def _group_shapes(self, deps, items: list, cache: dict, values: list) -> list:
        """The table entries of one group of shapes for the dims' ``values`` (cached by its dims')."""
        late = self._late_trees
        key = deps(values)
        if late and None in (key if isinstance(key, tuple) else (key,)):
            # a dim bound later in the run (match_shape makes these entries again then): outputs are
            # allocated by _alloc, which names the unbound var if it is still unbound
            return [None if itemsize is not None else (None, -1) for _, itemsize in items]
        shapes = cache.get(key)
        if shapes is None:
            shapes = []
            for getter, itemsize in items:
                shape = getter(values)
                negative = min(shape, default=0) < 0
                if itemsize is None:
                    shapes.append((shape, -1 if negative else math.prod(shape)))
                else:
                    shapes.append(None if negative or math.prod(shape) * itemsize > _CHECKED_ALLOCATION
                                  else shape)
            if len(cache) >= self.CACHE_ENTRIES:
                cache.clear()
            cache[key] = shapes
        return shapes

    def _tree_values(self, env: dict) -> list:
        """The value of every symbolic tree in ``env``; None for a tree with a var that a ``match_shape``
        binds during the run and has not bound yet."""
        late = self._late_trees
        return [eval_dim(t, env) if i not in late else self._late_value(t, env) for i, t in enumerate(self._trees)]

    @staticmethod
    def _late_value(tree: Any, env: dict) -> int | None:
        try:
            return eval_dim(tree, env)
        except KeyError:
            return None

    def _output(self, pos: int, j: int, dtype: str, dims: list) -> tuple:
        """``(numpy dtype, static shape or None, table index or None, dtype, dims)`` of output ``j``
        of the call at ``pos``; neither a static shape nor an index: :func:`_alloc` on every run."""
        np_dtype = numpy_dtype(dtype)
        static = tuple(dims) if all(type(d) is int for d in dims) else None
        if static is not None and (min(static, default=0) < 0
                                   or math.prod(static) * np_dtype.itemsize > _CHECKED_ALLOCATION):
            static = None
        return np_dtype, static, self._index.get((pos, j)), dtype, dims

    def _allocator(self, pos: int, callee: str, specs: list):
        """``alloc(table, env) -> [array, ...]``: the output buffers of the call at ``pos`` of the
        body (``specs``: its ``[dtype, dims]`` list), uninitialized."""
        name, pool = self.name, self.pool
        outputs = [self._output(pos, j, dtype, dims) for j, (dtype, dims) in enumerate(specs)]

        def alloc(table, env):
            outs = []
            for np_dtype, shape, k, dtype, dims in outputs:
                if k is not None:
                    shape = table[k]
                outs.append(_alloc(name, callee, dims, dtype, env, pool) if shape is None
                            else pool.empty(shape, np_dtype))
            return outs

        return alloc

    # -- steps -------------------------------------------------------------------------------------
    def _keeps(self, kernel: str, arg_regs: list, out_regs: list, out_specs: list) -> bool:
        """Whether a call's result may be kept across runs: a ``weight_transform`` kernel (a layout
        transform of a model weight, :class:`builder.transform.TileWeights`) of one argument, a
        model parameter (after ``num_input``), and one output of a static shape."""
        meta = self.kernels.get(kernel)
        nparams = len(self.fn["params"])
        num_input = self.fn.get("num_input", nparams)
        return (isinstance(meta, dict) and meta.get("weight_transform") is True
                and len(arg_regs) == 1 and type(arg_regs[0]) is int and num_input <= arg_regs[0] < nparams
                and len(out_regs) == 1 and all(type(d) is int and d >= 0 for d in out_specs[0][1]))

    def _kept_step(self, kernel: str, entry, arg: int, out: int, out_spec: list, lib: NativeLibrary):
        """A weight transform's step (:meth:`_keeps`): its output is computed once for the array
        passed and kept (``kept``, shared by the VM's functions: prefill and decode tile a weight
        once) while the same array comes again, if it is read-only (a writable array may change
        between calls: its transform runs on every call). A kept output is an array of its own (not
        the pool's), which only kernels read. One entry per call site: another array replaces it."""
        name, kept = self.name, self.kept
        dtype, dims = out_spec
        np_dtype, shape = numpy_dtype(dtype), tuple(dims)
        nbytes = math.prod(shape) * np_dtype.itemsize
        mine: list = [None, None, None]     # this site's entry: key, array, output

        def compute(a):
            key = (kernel, id(a))
            hit = kept.get(key)
            if hit is not None and hit[0] is a and not a.flags.writeable:
                result = hit[1]
            else:
                if nbytes > _CHECKED_ALLOCATION:
                    check_allocation(nbytes, f"{name}: the output of '{kernel}' of shape {shape} {dtype}")
                result = np.empty(shape, np_dtype)
                lib.invoke(entry, [a, result], 1)
                if a.__class__ is not np.ndarray or a.flags.writeable:
                    return result
                if mine[0] is not None and mine[0] != key:
                    kept.pop(mine[0], None)
                kept[key] = (a, result)
            mine[:] = [key, a, result]
            return result

        def step(regs, table, env):
            a = regs[arg]
            regs[out] = mine[2] if a is mine[1] and not a.flags.writeable else compute(a)
        return step

    def _match_shape_step(self, src: int, dims: list):
        """The step of ``["match_shape", src, dims]``: register ``src``'s array must have ``len(dims)``
        dims; a dim that is a var without a value binds it (TVM's ``match_cast`` of a data-dependent
        shape: ``vm.builtin.nonzero``'s count), the others must equal their value. The shapes that use
        the vars it bound are then made (:meth:`update_late_shapes`). Raises ValueError naming the
        function otherwise."""
        name = self.name

        def step(regs, table, env):
            a = regs[src]
            shape = getattr(a, "shape", None)
            if not isinstance(shape, tuple) or len(shape) != len(dims):
                raise ValueError(f"{name}: a runtime result has shape "
                                 f"{shape if isinstance(shape, tuple) else type(a).__name__}, expected "
                                 f"{_shape_text(dims)}")
            fresh = False
            for d, tree in enumerate(dims):
                if isinstance(tree, list) and len(tree) == 2 and tree[0] == "var" and tree[1] not in env:
                    env[tree[1]] = int(shape[d])
                    fresh = True
                elif eval_dim(tree, env) != shape[d]:
                    raise ValueError(f"{name}: a runtime result has shape {shape}, expected {_shape_text(dims)} "
                                     f"(dim {d} must be {eval_dim(tree, env)})")
            if fresh:
                self.update_late_shapes(table, env)
        return step

    def _step(self, pos: int, ins: Any, lib: NativeLibrary, constants: list):
        name, pool = self.name, self.pool
        op = ins[0] if isinstance(ins, list) and ins else None
        if op == "call":
            _, kernel, arg_regs, out_regs, out_specs = ins
            alloc = self._allocator(pos, kernel, out_specs)
            try:
                entry = lib.entry(kernel)
            except KeyError:
                entry = None
            n_in = len(arg_regs)
            if entry is None or entry.nparams != n_in + len(out_regs):
                def step(regs, table, env):   # the library refuses it (KeyError / ValueError)
                    outs = alloc(table, env)
                    lib.call(kernel, [regs[r] for r in arg_regs] + outs)
                return step
            if self._keeps(kernel, arg_regs, out_regs, out_specs):
                return self._kept_step(kernel, entry, arg_regs[0], out_regs[0], out_specs[0], lib)
            if len(out_regs) == 1:   # the common case, without the loops
                np_dtype, static, k, dtype, dims = self._output(pos, 0, *out_specs[0])
                out_reg = out_regs[0]
                # small static outputs skip the pool's size test
                empty = (np.empty if k is None and static is not None
                         and math.prod(static) * np_dtype.itemsize < pool.min_bytes else pool.empty)

                def step(regs, table, env):
                    shape = static if k is None else table[k]
                    out = regs[out_reg] = (empty(shape, np_dtype) if shape is not None
                                           else _alloc(name, kernel, dims, dtype, env, pool))
                    arrays = [regs[r] for r in arg_regs]
                    arrays.append(out)
                    lib.invoke(entry, arrays, n_in)
                return step
            outs_to_regs = list(enumerate(out_regs))

            def step(regs, table, env):
                outs = alloc(table, env)
                for j, r in outs_to_regs:
                    regs[r] = outs[j]
                lib.invoke(entry, [regs[r] for r in arg_regs] + outs, n_in)
            return step
        if op == "call_extern":
            _, ext_name, arg_specs, out_regs, out_specs = ins
            alloc = self._allocator(pos, ext_name, out_specs)

            def step(regs, table, env):
                outs = alloc(table, env)
                for r, o in zip(out_regs, outs):
                    regs[r] = o
                _call_extern(name, ext_name, [_extern_arg(s, regs, env) for s in arg_specs], outs)
            return step
        if op == "call_builtin":
            _, dst, builtin, arg_specs = ins

            def step(regs, table, env):
                regs[dst] = _call_builtin(name, builtin, [_extern_arg(a, regs, env) for a in arg_specs])
            return step
        if op == "reshape":
            _, dst, src, dims = ins
            if all(type(d) is int for d in dims):
                static = (tuple(dims), -1 if min(dims, default=0) < 0 else math.prod(dims))
                k = None
            else:
                static, k = None, self._index[(pos, 0)]

            def step(regs, table, env):
                a = regs[src]
                shape, size = static if k is None else table[k]
                if size != a.size:
                    if shape is None:
                        raise ValueError(f"{name}: cannot reshape to {_shape_text(dims)}: a symbolic dim of it "
                                         "is not bound yet")
                    target = _shape_text(dims)
                    raise ValueError(f"{name}: cannot reshape a tensor of shape {tuple(a.shape)} "
                                     f"({a.size} elements) to {tuple(shape)}"
                                     + (f" = {target}" if target != str(tuple(shape)) else ""))
                regs[dst] = a.reshape(shape)
            return step
        if op == "match_shape":
            _, src, dims = ins
            return self._match_shape_step(src, dims)
        if op == "tuple":
            _, dst, srcs = ins

            def step(regs, table, env):
                regs[dst] = tuple(regs[r] for r in srcs)
            return step
        if op == "get_item":
            _, dst, src, index = ins

            def step(regs, table, env):
                regs[dst] = regs[src][index]
            return step
        if op == "null":
            dst = ins[1]

            def step(regs, table, env):
                regs[dst] = None
            return step
        if op == "const":
            _, dst, index = ins

            def step(regs, table, env):
                regs[dst] = constants[index]
            return step
        if op == "move":
            _, dst, src = ins

            def step(regs, table, env):
                regs[dst] = regs[src]
            return step

        def step(regs, table, env):
            raise ValueError(f"{name}: unknown instruction {op!r} (executable from a newer compiler?)")
        return step


