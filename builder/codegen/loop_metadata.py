"""LLVM loop metadata the emitters attach to loop back-edges (``!llvm.loop``): placeholders while a
module is built, made self-referencing ``distinct`` loop IDs in its text at the end (llvmlite cannot
build self-referencing metadata nodes). The scalar emitter (:mod:`builder.codegen.llvm_emit`) and the
SIMD kernels (:mod:`builder.codegen.kernels.simd`) both use them."""
from __future__ import annotations

from llvmlite import ir

__all__ = ["plain_loop_metadata", "no_unroll_loop_metadata", "interleave_loop_metadata", "finalize_loop_metadata"]

_PLAIN_TAG = "mb.plainloop."
_NOUNROLL_TAG = "mb.nounrollloop."
_INTERLEAVE_TAG = "mb.interleaveloop."


def plain_loop_metadata(module: ir.Module) -> ir.MDValue:
    """A fresh placeholder loop ID (``!{!"mb.plainloop.<k>"}``); :func:`finalize_loop_metadata`
    turns it into a self-referencing ``distinct`` loop ID with vectorize / unroll disabled
    (llvmlite cannot build self-referencing metadata nodes)."""
    k = getattr(module, "_mb_plain_loops", 0)
    module._mb_plain_loops = k + 1
    return module.add_metadata([ir.MetaDataString(module, f"{_PLAIN_TAG}{k}")])


def no_unroll_loop_metadata(module: ir.Module) -> ir.MDValue:
    """A fresh placeholder loop ID (``!{!"mb.nounrollloop.<k>"}``) that
    :func:`finalize_loop_metadata` turns into a loop ID with only the unroller disabled
    (``llvm.loop.unroll.disable``): the loop vectorizer still vectorizes (and interleaves) it.
    Used for the reduction loops of :mod:`builder.codegen.accumulate`."""
    k = getattr(module, "_mb_nounroll_loops", 0)
    module._mb_nounroll_loops = k + 1
    return module.add_metadata([ir.MetaDataString(module, f"{_NOUNROLL_TAG}{k}")])


def interleave_loop_metadata(module: ir.Module, count: int) -> ir.MDValue:
    """A fresh placeholder loop ID that :func:`finalize_loop_metadata` turns into a loop ID
    asking the loop vectorizer to interleave ``count`` vector iterations
    (``llvm.loop.interleave.count``: independent dependency chains per iteration)."""
    k = getattr(module, "_mb_interleave_loops", 0)
    module._mb_interleave_loops = k + 1
    return module.add_metadata([ir.MetaDataString(module, f"{_INTERLEAVE_TAG}{count}.{k}")])


def finalize_loop_metadata(text: str) -> str:
    """Rewrite the placeholders of :func:`plain_loop_metadata` and
    :func:`no_unroll_loop_metadata` in module text ``text``."""
    if _PLAIN_TAG not in text and _NOUNROLL_TAG not in text and _INTERLEAVE_TAG not in text:
        return text
    lines = text.split("\n")
    top = -1
    for line in lines:
        if line.startswith("!"):
            head = line.split(" ", 1)[0][1:]
            if head.isdigit():
                top = max(top, int(head))
    nv, nu = f"!{top + 1}", f"!{top + 2}"
    out = []
    for line in lines:
        if line.startswith("!") and f'!"{_PLAIN_TAG}' in line:
            ident = line.split(" ", 1)[0]
            line = f"{ident} = distinct !{{{ident}, {nv}, {nu}}}"
        elif line.startswith("!") and f'!"{_NOUNROLL_TAG}' in line:
            ident = line.split(" ", 1)[0]
            line = f"{ident} = distinct !{{{ident}, {nu}}}"
        elif line.startswith("!") and f'!"{_INTERLEAVE_TAG}' in line:
            ident = line.split(" ", 1)[0]
            count = int(line.split(_INTERLEAVE_TAG, 1)[1].split(".", 1)[0])
            line = f'{ident} = distinct !{{{ident}, !{{!"llvm.loop.interleave.count", i32 {count}}}}}'
        out.append(line)
    out.append(f'{nv} = !{{!"llvm.loop.vectorize.enable", i1 false}}')
    out.append(f'{nu} = !{{!"llvm.loop.unroll.disable"}}')
    return "\n".join(out)
