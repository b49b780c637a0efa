"""Stretches of kernel calls run by one native call: the VM's fast path (:class:`KernelRun`).

Between its builtins (KV-cache updates, externs) a function's bytecode is kernel ``call``s and
``reshape``s. Run one by one from Python, each call allocates its outputs, checks its inputs, packs its two
argument arrays and makes one ctypes call: about 4 us a call (Intel Xeon, 2 cores; measured with no-op
kernels: 72 calls of MiniLM-L6 at batch 1 x 12 tokens took 310-350 us, some 15% of the model). A
:class:`KernelRun` holds such a stretch with every argument's address and dims laid out in two tables once
per set of symbolic dim values; the arrays only its own calls read (the intermediates) get fixed offsets
in one arena shared by the function's runs, placed by their lifetimes (first fit: a buffer is free for
the calls after its last reader), as TVM's graph executor plans its storage statically. A run then costs
a check of each array that comes from outside (none for a model parameter passed again: the same object
and shape), the allocation of the arrays that leave the stretch (read later or returned: pool buffers as
before), and one native call to ``mb_run_kernels``, a loop over the calls' (function, pointers, dims)
descriptors that returns at the first nonzero return code.

Whatever the fast path cannot take it leaves to the VM's steps, which raise the precise errors: an array
from outside that is not a C-contiguous numpy array of the kernel's dtype and rank, a reshape of the wrong
element count, a shape with a negative dim or above the checked allocation size. A stretch whose calls
disagree about a buffer's dtype or rank (a damaged executable), or bytecode that writes a register twice,
never takes the fast path. A kernel's own error (its native dim checks) raises the ValueError
:meth:`runtime.native.NativeLibrary.invoke` raises.
"""
from __future__ import annotations

import ctypes
import math
import threading
from types import SimpleNamespace
from typing import Any, Callable

import llvmlite.binding as llvm
import numpy as np

from .memory import MemoryLimitError, check_allocation, huge_page_buffer
from .native import _data_pointer
from .host import host_target_machine, init_llvm

__all__ = ["KernelRun", "run_kernels"]

_RUNNER_IR = """
define i64 @mb_run_kernels(ptr %desc, i64 %n) nounwind {
entry:
  %none = icmp sle i64 %n, 0
  br i1 %none, label %done, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %cont ]
  %at = mul i64 %i, 3
  %pf = getelementptr i64, ptr %desc, i64 %at
  %f = load ptr, ptr %pf
  %pp = getelementptr i64, ptr %pf, i64 1
  %ptrs = load ptr, ptr %pp
  %pd = getelementptr i64, ptr %pf, i64 2
  %dims = load ptr, ptr %pd
  %rc = call i32 %f(ptr %ptrs, ptr %dims)
  %bad = icmp ne i32 %rc, 0
  br i1 %bad, label %fail, label %cont
cont:
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
fail:
  %rc64 = zext i32 %rc to i64
  %which = add i64 %i, 1
  %hi = shl i64 %which, 32
  %code = or i64 %hi, %rc64
  ret i64 %code
done:
  ret i64 0
}
"""

_RUNNER: list = []          # [engine, ctypes function], made once per process
_RUNNER_LOCK = threading.Lock()
_RUNNER_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)


def run_kernels() -> Callable[[int, int], int]:
    """``mb_run_kernels(desc, n) -> code`` (compiled once per process): calls ``n`` kernels, the ``i``-th
    as ``desc[3i](desc[3i + 1], desc[3i + 2])`` (the kernel ABI: pointers array, dims array), in order;
    returns 0, or ``(i + 1) << 32 | rc`` for the first call that returned ``rc != 0`` (the rest do not run)."""
    if not _RUNNER:
        with _RUNNER_LOCK:
            if not _RUNNER:
                init_llvm()
                tm = host_target_machine(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                                         llvm.get_host_cpu_features().flatten(), opt=2)
                mod = llvm.parse_assembly(_RUNNER_IR)
                mod.triple = llvm.get_process_triple()
                mod.verify()
                engine = llvm.create_mcjit_compiler(mod, tm)
                engine.finalize_object()
                _RUNNER[:] = [engine, _RUNNER_TYPE(engine.get_function_address("mb_run_kernels"))]
    return _RUNNER[1]


class Arena:
    """One function's buffer for the intermediates of its kernel runs (64-byte aligned, a
    :func:`runtime.memory.huge_page_buffer`; grows, never shrinks, while the plan lives).
    ``generation`` counts reallocations: tables holding the old base address are rebuilt."""

    ALIGN = 64

    def __init__(self) -> None:
        self.buf: np.ndarray | None = None
        self.base = 0
        self.size = 0
        self.generation = 0

    def reserve(self, nbytes: int, what: str) -> None:
        """Make the arena at least ``nbytes`` long. Raises MemoryLimitError when that is more than the
        memory available (:func:`runtime.memory.check_allocation`)."""
        if nbytes <= self.size:
            return
        size = max(nbytes, self.size * 5 // 4)
        self.buf = None
        check_allocation(size + self.ALIGN, what)
        self.buf = huge_page_buffer(size + self.ALIGN)
        self.base = self.buf.ctypes.data + (-self.buf.ctypes.data % self.ALIGN)
        self.size = size
        self.generation += 1


class KernelRun:
    """A stretch of a plan's body run by one native call (see the module docstring).

    ``items``: the stretch's instructions in order, each ``("call", entry, arg_regs, out_regs,
    outputs)`` (``entry``: the kernel's :class:`runtime.native._Entry`; ``outputs``: per output ``(numpy
    dtype, static shape or None, table index or None, whether it comes from the pool)``) or ``("reshape",
    dst, src, static (shape, elements) or None, table index or None)``; ``escapes``: the registers it
    defines that are read after it or returned; ``stable``: the registers whose arrays are checked
    once per array object (the parameters, constants and kept weight transforms: never pool buffers, which
    a reference held here would keep from reuse; read-only arrays from elsewhere are too, a KV cache's
    pool views, the same objects step after step); ``env_vars``: the symbolic dims its shapes depend on;
    ``kills``: registers to drop after it (their last reader is in it); ``pool``: the VM's
    :class:`runtime.memory.BufferPool`; ``arena``: the function's :class:`Arena`; ``error_text``:
    ``(entry, rc, arrays) -> str`` for a kernel's nonzero return code.

    :meth:`run` returns False, having changed no register, when the VM's steps must run the stretch;
    ``usable`` is False when they always must (calls that disagree about a buffer's dtype or rank).
    """

    def __init__(self, name: str, items: list, escapes: set, stable: set, env_vars: list, kills: list,
                 pool: Any, arena: Arena, error_text: Callable) -> None:
        self.name, self.pool, self.arena, self.error_text = name, pool, arena, error_text
        self.stable, self.env_vars, self.kills = frozenset(stable), list(env_vars), list(kills)
        self.calls = [it for it in items if it[0] == "call"]
        self.n = len(self.calls)
        self.usable = True
        # every register it defines: reg -> (root, kind, numpy dtype, static, table index, pooled). A root
        # is a call's output: kind "arena" (read only here) or "out" (it leaves: a real array each run); a
        # "view" reshapes one; an "ext" view reshapes an array from outside (its root: that register)
        defs: dict = {}
        first: dict = {}              # root -> the call that writes it
        last: dict = {}               # root -> the last call that reads it
        later = {r for it in items for r in (it[3] if it[0] == "call" else [it[1]])}   # defined here
        call_no = -1
        for it in items:
            if it[0] == "call":
                call_no += 1
                _, entry, arg_regs, out_regs, outputs = it
                for r in arg_regs:
                    if r in later and r not in defs:
                        self.usable = False   # read before it is written (damaged bytecode): the steps refuse it
                    if r in defs and defs[r][1] != "ext":
                        last[defs[r][0]] = call_no
                for r, (dt, static, index, pooled) in zip(out_regs, outputs):
                    defs[r] = [r, "arena", dt, static, index, pooled]
                    first[r] = call_no
            else:
                _, dst, src, static, index = it
                if src in later and src not in defs:
                    self.usable = False
                if src in defs and defs[src][1] != "ext":
                    root = defs[src][0]
                    defs[dst] = [root, "view", defs[root][2], static, index, False]
                else:
                    defs[dst] = [defs[src][0] if src in defs else src, "ext", None, static, index, False]
        self.escapes = {r for r in escapes if r in defs}
        for r in self.escapes:
            if defs[r][1] != "ext":
                defs[defs[r][0]][1] = "out"
        self.defs, self.first, self.last = defs, first, last
        self.views = [(r, info[0]) for r, info in defs.items() if info[1] in ("view", "ext") and r in self.escapes]
        # the argument tables: call i's pointers at ptrs[p0:], its dims at dims[d0:]
        self.regions: list = []
        slots: list = []              # (call no, param no, reg, ptr index, dims index, ndim)
        p = d = 0
        for i, (_, entry, arg_regs, out_regs, _outputs) in enumerate(self.calls):
            regs = list(arg_regs) + list(out_regs)
            if len(regs) != entry.nparams:
                self.usable = False
            self.regions.append((p, d))
            for j, r in enumerate(regs[:entry.nparams]):
                slots.append((i, j, r, p, d, entry.ndims[j]))
                p += 1
                d += entry.ndims[j]
        self.ptrs = (ctypes.c_uint64 * max(p, 1))()
        self.dims = (ctypes.c_int64 * max(d, 1))()
        self.desc = (ctypes.c_uint64 * max(3 * self.n, 1))()
        base_p, base_d = ctypes.addressof(self.ptrs), ctypes.addressof(self.dims)
        for i, it in enumerate(self.calls):
            p0, d0 = self.regions[i]
            self.desc[3 * i] = ctypes.cast(it[1].cfunc, ctypes.c_void_p).value or 0
            self.desc[3 * i + 1] = base_p + 8 * p0
            self.desc[3 * i + 2] = base_d + 8 * d0
        self.desc_addr = ctypes.addressof(self.desc)
        # what each slot holds; the buffers made here checked against the kernels once
        self.inner_slots: list = []   # (ptr index, dims index, reg, root, ndim): buffers made here, their views
        ext: dict = {}                # (reg, root, dtype, ndim) -> [(ptr index, dims index), ...]
        for i, j, r, pi, di, nd in slots:
            entry = self.calls[i][1]
            info = defs.get(r) if type(r) is int else None
            if type(r) is not int:
                self.usable = False
            elif info is None or info[1] == "ext":
                ext.setdefault((r, r if info is None else info[0], entry.dtypes[j], nd), []).append((pi, di))
            else:
                static = info[3]
                if defs[info[0]][2] != entry.dtypes[j] or (static is not None and len(static[0] if info[1] == "view"
                                                                                      else static) != nd):
                    self.usable = False   # the stretch disagrees with a kernel: its steps raise
                self.inner_slots.append((pi, di, r, info[0], nd))
        self.externals = [(r, root, dt, nd, places) for (r, root, dt, nd), places in ext.items()]
        #: the pointer slots of the arrays that leave the stretch (made afresh each run): (ptr index, root)
        self.out_slots = [(pi, root) for pi, _di, _r, root, _nd in self.inner_slots if defs[root][1] == "out"]
        self.cached: list = [None] * len(self.externals)   # a stable array's (array, shape) in the tables
        self.key: tuple | None = None
        self.generation = -1
        self.shapes: dict = {}
        self.offsets: dict = {}
        self.out_allocs: list = []

    # -- per set of symbolic dims ---------------------------------------------------------------
    def _prepare(self, table: list, key: tuple) -> bool:
        """Shapes, arena offsets and the inner slots for the dims of ``key``; False when the VM's
        steps must run (a negative or oversized shape, a reshape of the wrong size, no memory)."""
        shapes: dict = {}
        for r, (root, kind, dt, static, index, _pooled) in self.defs.items():
            shape = static if index is None else table[index]
            if shape is None:
                return False
            if kind in ("view", "ext"):
                shape, size = shape
                if size < 0 or (kind == "view" and size != math.prod(shapes[root])):
                    return False
            shapes[r] = shape
        if any(len(shapes[r]) != nd for _pi, _di, r, _root, nd in self.inner_slots):
            return False              # a rank the kernel does not take (damaged bytecode): its steps raise
        offsets: dict = {}            # first fit by lifetime
        live: list = []               # (offset, bytes, last reader)
        total = Arena.ALIGN
        for r in sorted((r for r, info in self.defs.items() if info[1] == "arena"), key=lambda r: self.first[r]):
            nbytes = -(-math.prod(shapes[r]) * self.defs[r][2].itemsize // Arena.ALIGN) * Arena.ALIGN
            start = self.first[r]
            live = sorted((blk for blk in live if blk[2] >= start), key=lambda blk: blk[0])
            at = 0
            for off, size, _end in live:
                if at + nbytes <= off:
                    break
                at = max(at, off + size)
            offsets[r] = at
            live.append((at, nbytes, self.last.get(r, start)))
            total = max(total, at + nbytes)
        try:
            self.arena.reserve(total, f"{self.name}: the intermediates of a kernel run")
        except MemoryLimitError:
            return False
        self.shapes, self.offsets = shapes, offsets
        self.out_allocs = [(r, info[2], shapes[r], self.pool.empty if info[5] else np.empty)
                           for r, info in self.defs.items() if info[1] == "out"]
        self.cached = [None] * len(self.externals)   # a view's dims may have changed
        self._write_inner()
        self.key = key
        return True

    def _write_inner(self) -> None:
        ptrs, dims, base = self.ptrs, self.dims, self.arena.base
        for pi, di, r, root, _nd in self.inner_slots:
            if root in self.offsets:
                ptrs[pi] = base + self.offsets[root]
            for k, v in enumerate(self.shapes[r]):
                dims[di + k] = v
        self.generation = self.arena.generation

    # -- a run ------------------------------------------------------------------------------------
    def run(self, regs: list, table: list, env: dict) -> bool:
        """Run the stretch on ``regs`` (the VM's registers) with this run's shape ``table`` and symbolic
        dims ``env``. Returns False when nothing ran and the VM's steps must run it; raises ValueError for
        a kernel's error, as :meth:`runtime.native.NativeLibrary.invoke`."""
        if not self.usable:
            return False
        key = tuple([env.get(v) for v in self.env_vars])
        if key != self.key:
            if not self._prepare(table, key):
                self.key = None
                return False
        elif self.generation != self.arena.generation:
            self._write_inner()
        ptrs, dims, stable, cached = self.ptrs, self.dims, self.stable, self.cached
        for k, (r, root, dt, nd, places) in enumerate(self.externals):
            a = regs[root]
            hit = cached[k]
            if hit is not None and hit[0] is a and hit[1] == a.shape:
                continue
            if a.__class__ is not np.ndarray or (a.dtype is not dt and a.dtype != dt) or not a.flags.c_contiguous:
                return False
            shape = a.shape if r == root else self.shapes[r]
            if len(shape) != nd or (r != root and math.prod(shape) != a.size):
                return False
            addr = _data_pointer(a)
            for pi, di in places:
                ptrs[pi] = addr
                for q, v in enumerate(shape):
                    dims[di + q] = v
            if root in stable or not a.flags.writeable:
                cached[k] = (a, a.shape)
        made = {r: empty(shape, dt) for r, dt, shape, empty in self.out_allocs}
        for pi, root in self.out_slots:
            ptrs[pi] = _data_pointer(made[root])
        code = run_kernels()(self.desc_addr, self.n)
        if code:
            i, rc = (code >> 32) - 1, code & 0xFFFFFFFF
            entry, d = self.calls[i][1], self.regions[i][1]
            arrays = []
            for nd in entry.ndims:
                arrays.append(SimpleNamespace(shape=tuple(dims[d:d + nd])))
                d += nd
            raise ValueError(self.error_text(entry, rc - (1 << 32) if rc >= 1 << 31 else rc, arrays))
        for r, a in made.items():
            regs[r] = a
        for r, root in self.views:
            regs[r] = regs[root].reshape(self.shapes[r])
        for r in self.kills:
            regs[r] = None
        return True
