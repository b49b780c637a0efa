"""The VM's instruction set: the structural check of a function's bytecode, and its text form.

The instructions are listed in :mod:`runtime.executable`. :func:`validate_function` runs when an
Executable is loaded, so that a damaged or hand-made file is refused before the VM interprets it:
every instruction has a known opcode and exactly its operands; every register index is within the
function's registers and is written before it is read (the code is straight-line); constant indices
are within the pool; a ``call`` names a kernel of the executable with as many arguments and outputs as
the kernel has parameters, and its outputs have the kernel's dtypes and ranks; dims are well-formed
trees; the function ends with ``ret``.
"""
from __future__ import annotations

import json
from typing import Any

from .native import DTYPES, dim_from_json, dim_to_str

__all__ = ["validate_function", "format_instruction", "sinfo_text", "MAX_REGISTERS"]

#: The most registers a function may declare (the VM allocates a list of this length per call).
MAX_REGISTERS = 1 << 20

_ARITY = {"call": 5, "call_extern": 5, "call_builtin": 4, "reshape": 4, "tuple": 3, "get_item": 4, "null": 2,
          "const": 3, "move": 3, "ret": 2, "match_shape": 3}


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dims(value: Any, error: str) -> None:
    """Check a list of serialized dims (each by :func:`dim_from_json`); ValueError ``error`` when
    ``value`` is not a list."""
    if not isinstance(value, list):
        raise ValueError(error)
    for d in value:
        dim_from_json(d)


def _sinfo(j: Any, where: str) -> None:
    if not isinstance(j, dict):
        raise ValueError(f"{where}: struct info must be an object")
    kind = j.get("kind")
    if kind == "tensor":
        if j.get("dtype") not in DTYPES:
            raise ValueError(f"{where}: malformed tensor struct info")
        _dims(j.get("shape"), f"{where}: malformed tensor struct info")
    elif kind == "tuple":
        if not isinstance(j.get("fields"), list):
            raise ValueError(f"{where}: malformed tuple struct info")
        for f in j["fields"]:
            _sinfo(f, where)
    elif kind == "shape":
        _dims(j.get("dims"), f"{where}: malformed shape struct info")
    elif kind == "prim":
        if not isinstance(j.get("dtype"), str):
            raise ValueError(f"{where}: malformed prim struct info")
    elif kind != "object":
        raise ValueError(f"{where}: unknown struct info kind {kind!r}")


def _out_specs(specs: Any, n: int, where: str) -> list:
    if not isinstance(specs, list) or len(specs) != n:
        raise ValueError(f"{where}: expected {n} output specs")
    for spec in specs:
        if not (isinstance(spec, list) and len(spec) == 2 and spec[0] in DTYPES and isinstance(spec[1], list)):
            raise ValueError(f"{where}: malformed output spec {spec!r}")
        for d in spec[1]:
            dim_from_json(d)
    return specs


def _arg_spec(spec: Any, read, where: str) -> None:
    if not (isinstance(spec, list) and len(spec) == 2):
        raise ValueError(f"{where}: malformed argument {spec!r}")
    kind, value = spec
    if kind == "reg":
        read(value)
    elif kind == "int":
        if not _int(value):
            raise ValueError(f"{where}: int argument {value!r}")
    elif kind == "float":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"{where}: float argument {value!r}")
    elif kind == "str":
        if not isinstance(value, str):
            raise ValueError(f"{where}: str argument {value!r}")
    elif kind == "dim":
        dim_from_json(value)
    elif kind == "shape":
        _dims(value, f"{where}: shape argument {value!r}")
    else:
        raise ValueError(f"{where}: unknown argument kind {kind!r}")


def validate_function(name: str, fn: Any, kernels: dict, num_constants: int) -> None:
    """Check function ``name`` of an executable (see the module docstring) against the executable's
    ``kernels`` (name -> ABI metadata) and its number of constants. Raises ValueError naming the
    function and the first bad instruction."""
    if not isinstance(fn, dict):
        raise ValueError(f"function {name!r}: not an object")
    params, instructions, nreg = fn.get("params"), fn.get("instructions"), fn.get("num_registers")
    if not isinstance(params, list) or not isinstance(instructions, list):
        raise ValueError(f"function {name!r}: params and instructions must be lists")
    if not _int(nreg) or not len(params) <= nreg <= MAX_REGISTERS:
        raise ValueError(f"function {name!r}: num_registers {nreg!r} must be an int between its "
                         f"{len(params)} params and {MAX_REGISTERS}")
    num_input = fn.get("num_input", len(params))
    if not _int(num_input) or not 0 <= num_input <= len(params):
        raise ValueError(f"function {name!r}: num_input {num_input!r} is not between 0 and {len(params)}")
    for i, p in enumerate(params):
        _sinfo(p, f"function {name!r} param {i}")
        if not isinstance(p.get("name"), str):
            raise ValueError(f"function {name!r} param {i}: missing name")
    if "ret" in fn:
        _sinfo(fn["ret"], f"function {name!r} ret")
    if not instructions or not isinstance(instructions[-1], list) or instructions[-1][:1] != ["ret"]:
        raise ValueError(f"function {name!r}: the bytecode must end with ret")
    defined = set(range(len(params)))
    for k, ins in enumerate(instructions):
        where = f"function {name!r} instruction {k}"
        if not isinstance(ins, list) or not ins or ins[0] not in _ARITY or len(ins) != _ARITY[ins[0]]:
            raise ValueError(f"{where}: unknown or malformed instruction {str(ins)[:80]}")

        def read(r, where=where):
            if not _int(r) or not 0 <= r < nreg:
                raise ValueError(f"{where}: register {r!r} is outside the {nreg} registers")
            if r not in defined:
                raise ValueError(f"{where}: register %{r} is read before it is written")

        def write(r, where=where):
            if not _int(r) or not 0 <= r < nreg:
                raise ValueError(f"{where}: register {r!r} is outside the {nreg} registers")
            defined.add(r)

        def regs(value, where=where):
            if not isinstance(value, list):
                raise ValueError(f"{where}: register list expected")
            return value

        op = ins[0]
        if op == "call":
            _, kernel, args, outs, specs = ins
            meta = kernels.get(kernel) if isinstance(kernel, str) else None
            kparams = meta.get("params") if isinstance(meta, dict) else None
            if not isinstance(kparams, list):
                raise ValueError(f"{where}: calls kernel {str(kernel)[:60]!r}, which the executable lacks")
            for r in regs(args):
                read(r)
            _out_specs(specs, len(regs(outs)), where)
            if len(args) + len(outs) != len(kparams):
                raise ValueError(f"{where}: kernel {kernel!r} takes {len(kparams)} buffers, the call passes "
                                 f"{len(args)} inputs and {len(outs)} outputs")
            for (dtype, dims), p in zip(specs, kparams[len(args):]):
                if not isinstance(p, dict) or p.get("dtype") != dtype or len(p.get("shape") or ()) != len(dims):
                    raise ValueError(f"{where}: an output of kernel {kernel!r} is declared {dtype}"
                                     f"[{len(dims)} dims], unlike the kernel's parameter")
            for r in outs:
                write(r)
        elif op == "call_extern":
            _, ext, specs_in, outs, specs = ins
            if not isinstance(ext, str) or not isinstance(specs_in, list):
                raise ValueError(f"{where}: malformed call_extern")
            for spec in specs_in:
                _arg_spec(spec, read, where)
            _out_specs(specs, len(regs(outs)), where)
            for r in outs:
                write(r)
        elif op == "call_builtin":
            _, dst, builtin, specs_in = ins
            if not isinstance(builtin, str) or not isinstance(specs_in, list):
                raise ValueError(f"{where}: malformed call_builtin")
            for spec in specs_in:
                _arg_spec(spec, read, where)
            write(dst)
        elif op == "reshape":
            _, dst, src, dims = ins
            read(src)
            _dims(dims, f"{where}: reshape dims must be a list")
            write(dst)
        elif op == "tuple":
            for r in regs(ins[2]):
                read(r)
            write(ins[1])
        elif op == "get_item":
            read(ins[2])
            if not _int(ins[3]) or ins[3] < 0:
                raise ValueError(f"{where}: tuple index {ins[3]!r}")
            write(ins[1])
        elif op == "null":
            write(ins[1])
        elif op == "const":
            if not _int(ins[2]) or not 0 <= ins[2] < num_constants:
                raise ValueError(f"{where}: constant {ins[2]!r} is outside the pool of {num_constants}")
            write(ins[1])
        elif op == "move":
            read(ins[2])
            write(ins[1])
        elif op == "match_shape":
            read(ins[1])
            _dims(ins[2], f"{where}: match_shape dims must be a list")
        else:  # ret
            read(ins[1])


# --- text form ---------------------------------------------------------------------------------------

def _dims_text(dims: list) -> str:
    return "[" + ", ".join(dim_to_str(d) for d in dims) + "]"


def sinfo_text(j: dict) -> str:
    """``float32[n, 4]``, ``(float32[2], object)``, ``shape[n]``, ``int64`` for a struct-info JSON."""
    kind = j.get("kind")
    if kind == "tensor":
        return f"{j['dtype']}{_dims_text(j['shape'])}"
    if kind == "tuple":
        return "(" + ", ".join(sinfo_text(f) for f in j["fields"]) + ("," if len(j["fields"]) == 1 else "") + ")"
    if kind == "shape":
        return f"shape{_dims_text(j['dims'])}"
    if kind == "prim":
        return j["dtype"]
    return str(kind)


def _arg_spec_text(spec: list) -> str:
    kind, value = spec
    if kind == "reg":
        return f"%{value}"
    if kind == "str":
        return json.dumps(value)
    if kind == "dim":
        return dim_to_str(value)
    if kind == "shape":
        return f"shape{_dims_text(value)}"
    return repr(value)


def _outs_text(specs: list) -> str:
    texts = [f"{dtype}{_dims_text(dims)}" for dtype, dims in specs]
    return texts[0] if len(texts) == 1 else "(" + ", ".join(texts) + ")"


#: The text of the instructions whose operands are registers and ints, as templates of the
#: instruction's fields (``{1}`` is ``ins[1]``).
_FIELD_TEXT = {
    "get_item": "%{1} = %{2}[{3}]",
    "null": "%{1} = null",
    "const": "%{1} = const[{2}]",
    "move": "%{1} = %{2}",
    "ret": "ret %{1}",
}


def format_instruction(ins: list[Any]) -> str:
    """One instruction as text (``%3 = call te_relu(%2) -> float32[128, 128]``)."""
    op = ins[0]
    if op == "call":
        args = ", ".join(f"%{r}" for r in ins[2])
        outs = ", ".join(f"%{r}" for r in ins[3])
        return f"{outs} = call {ins[1]}({args}) -> {_outs_text(ins[4])}"
    if op == "call_extern":
        args = ", ".join(_arg_spec_text(a) for a in ins[2])
        outs = ", ".join(f"%{r}" for r in ins[3])
        return f"{outs} = call_extern {json.dumps(ins[1])}({args}) -> {_outs_text(ins[4])}"
    if op == "call_builtin":
        args = ", ".join(_arg_spec_text(a) for a in ins[3])
        return f"%{ins[1]} = call_builtin {ins[2]}({args})"
    if op == "reshape":
        return f"%{ins[1]} = reshape %{ins[2]} {_dims_text(ins[3])}"
    if op == "tuple":
        return f"%{ins[1]} = tuple({', '.join(f'%{r}' for r in ins[2])})"
    if op == "match_shape":
        return f"match_shape %{ins[1]} {_dims_text(ins[2])}"
    if op in _FIELD_TEXT:
        return _FIELD_TEXT[op].format(*ins)
    return " ".join(map(str, ins))
