"""How a build's kernels are grouped before any of them is emitted (:func:`plan_kernels`), so that the LLVM
modules can be filled one after the other and each compiled while the next is still being written.

Every function of a build is one of three kinds, decided here from the PrimFuncs alone:

* ``distinct``: it gets code of its own (the *head* of a group);
* ``alias``: it is structurally equal to a function before it (:class:`.dedup.KernelTwins`), and becomes an
  alias of that one's entry (``@b = alias ... @a``);
* ``entry``: it is a head with some symbolic dims fixed (:func:`.dedup.specialization`, compiled the same way:
  the same ``kernel`` label), and gets only an entry that calls the head's body with the constants (a decode
  step's ``seq = 1`` kernels and the prefill ones).

A head and the functions that alias it or call its body form a :class:`KernelGroup`: they must land in one
LLVM module (an alias names a definition of its own module; an entry calls the head's internal body). The
groups come in the order of their heads, so the modules can take consecutive runs of groups: the first module
is complete, and can go to LLVM on another thread, while the second is emitted (:func:`builder.codegen.build`).
To split the groups before their code exists, each head's size is estimated (:func:`estimate_instructions`,
by kernel family); the emitter corrects the estimate with the instructions it has actually written so far.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.tir import PrimFunc
from .dedup import KernelTwins, specialization

__all__ = ["KernelGroup", "plan_kernels", "estimate_instructions", "FAMILY_INSTRUCTIONS"]

#: Unoptimized LLVM instructions a kernel of each family typically emits (the 2-layer Llama recipe in float32
#: and q4f16_1, MiniLM: row-tiled linears 550-3100 / 550-6800, the first of a format with its shared helpers;
#: row-major linears 4700-9600; attention 2850-3120; loops kernels 75-275, cold ones (``optnone``) fewer).
FAMILY_INSTRUCTIONS = {"linear": 2500, "attention": 3000}
#: ... a loops kernel, and a cold one (:func:`builder.codegen.cold_kernel`).
LOOPS_INSTRUCTIONS, COLD_INSTRUCTIONS = 150, 60


@dataclass
class KernelGroup:
    """A head (``name``, a distinct kernel) and the functions that must share its module: ``members``, in
    the build's order, each ``(name, kind, of, order)`` with ``kind`` ``"alias"`` (``of``: an earlier
    member, or the head) or ``"entry"`` (``of``: the head; ``order``: :func:`.dedup.specialization`'s
    result); ``func``: the head's PrimFunc; ``label``: its ``kernel`` label; ``estimate``:
    :func:`estimate_instructions`."""

    name: str
    func: PrimFunc
    label: str
    estimate: int
    members: list = field(default_factory=list)


def estimate_instructions(label: str, cold: bool) -> int:
    """The unoptimized LLVM instructions a distinct kernel with ``kernel`` label ``label`` (``"linear/avx2"``,
    ``"loops"``, ``"loops (linear: why not)"``) is expected to emit (:data:`FAMILY_INSTRUCTIONS`); ``cold``:
    a loops kernel compiled without the optimizer."""
    family = label.split("/", 1)[0]
    if family in FAMILY_INSTRUCTIONS:
        return FAMILY_INSTRUCTIONS[family]
    return COLD_INSTRUCTIONS if cold else LOOPS_INSTRUCTIONS


def plan_kernels(ordered: list[tuple[str, PrimFunc]], label, cold) -> list[KernelGroup]:
    """The groups of ``ordered`` (``(name, PrimFunc)`` in emission order: more general kernels first,
    :func:`builder.codegen._general_first`), in the order of their heads. ``label(func)`` gives a function's
    ``kernel`` label, ``cold(func)`` whether a loops kernel is cold; both are called once per head (and
    ``label`` once per candidate entry). A function that is a specialization of several heads joins the
    first whose label is its own, as :func:`builder.codegen.emit_llvm_parts` used to decide it while
    emitting."""
    twins = KernelTwins()
    groups: list[KernelGroup] = []
    group_of: dict[str, KernelGroup] = {}
    labels: dict[int, str] = {}

    def label_of(func: PrimFunc) -> str:
        got = labels.get(id(func))
        if got is None:
            got = labels[id(func)] = label(func)
        return got

    for name, func in ordered:
        twin = twins.find(func)
        if twin is not None:
            group = group_of[twin]
            group.members.append((name, "alias", twin, None))
            group_of[name] = group
            continue
        twins.add(name, func)
        joined = None
        for group in groups:
            order = specialization(group.func, func)
            if order is not None and label_of(func) == group.label:
                joined = group
                group.members.append((name, "entry", group.name, order))
                break
        if joined is None:
            own = label_of(func)
            joined = KernelGroup(name, func, own, estimate_instructions(own, own == "loops" and cold(func)))
            groups.append(joined)
        group_of[name] = joined
    return groups

