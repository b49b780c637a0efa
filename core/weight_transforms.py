"""The ``weights.transforms`` grammar and its plan: how a recipe says that the file stores a weight in another
layout than the model's parameter, and how the loader reads it in the model's layout.

A transform rewrites the file's table of tensors before names are bound: the parameters (``weights.prefix``,
``weights.map``) then see the file as if it had been saved with the transformed tensors. Transforms apply in
order, each to the table the ones before it left (a transpose then a split of the same tensor is two entries).
Each entry names its input with ``from`` (a file tensor name, complete like the file side of ``weights.map``;
``{placeholders}`` match one dot-free piece of a name, as there), exactly one operation, and its output with
``to`` (same placeholders as ``from``; default: ``from``, the tensor replaced in place):

- ``transpose: true``: a 2-D tensor's two axes swapped (GPT-2's Conv1D weights stored (in, out));
  ``transpose: [2, 0, 1]``: the axes permuted as ``numpy.transpose`` does;
- ``split: {axis: 0, sizes: [64, 32, 32]}``: one fused tensor cut along ``axis`` into consecutive parts of
  those sizes (their sum is the axis' length), ``to`` a list of one name per part (Phi-3's ``qkv_proj``);
- ``slice: {axis: 0, start: 0, stop: 32}``: the part ``[start, stop)`` along ``axis``, the rest dropped;
- ``reshape: [4, 16, 8]``: the same elements in row-major order with another shape (one size may be -1);
- ``concatenate: {axis: 0}``: ``from`` a list of tensors (the first's placeholders match, the others are
  filled in), joined along ``axis`` into the one tensor ``to``.

A negative axis counts from the end. Accounting stays strict: a tensor a transform consumes is used (its
outputs take its place in the table, so an output that no parameter uses is reported, naming the transform
that made it); a transform that matches no tensor of the file, an input that is missing, sizes that do not fit
the input's shape and an output that would overwrite another tensor are errors, all found from the header
before any data is read (:func:`plan_transforms`), as are the shape checks of the outputs against the
parameters (the loader's, on the planned table).

Reading (:meth:`Node.read`) is by region: ``(axis, lo, hi)`` asks for the part ``[lo, hi)`` along ``axis``
(a tensor-parallel rank's slice), ``None`` for the whole tensor. A transpose, a split part, a slice and a
concatenation read only the region's part of their inputs (a split of a column-parallel ``qkv_proj`` along
its rows reads each rank's rows of each part); a reshape reads its input whole and keeps the region.

Layouts (``weights.layout``: ``fnmatch`` glob over the file's names -> ``in_out`` or ``out_in``): a 2-D
weight's shape cannot tell a square matrix from its transpose, so a checkpoint that stores its weights
(in, out) (GPT-2's Conv1D) loads a forgotten square one transposed without a word. Declaring the layout of
the file's tensors by glob makes the loader check it (:func:`layout_problems`): every ``in_out`` tensor
must pass through ``transpose: true`` on its way to a parameter, no ``out_in`` one may.

Bounds (:mod:`core.limits`): at most :data:`~core.limits.MAX_WEIGHT_TRANSFORMS` entries, each with at most
:data:`~core.limits.MAX_WEIGHT_TRANSFORM_PARTS` split parts or concatenated inputs, names at most
:data:`~core.limits.MAX_WEIGHT_NAME_CHARS` characters, reshapes at most :data:`~core.limits.MAX_NDIM` dims.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .limits import MAX_DIM, MAX_NDIM, MAX_WEIGHT_TRANSFORM_PARTS, MAX_WEIGHT_TRANSFORMS
from .messages import shorten
from .weight_names import NamePattern, parse_side

__all__ = ["OPS", "LAYOUTS", "Transform", "Node", "FileNode", "parse_transform", "parse_transforms",
           "transform_problems", "plan_transforms", "layout_problems"]

OPS = ("transpose", "split", "slice", "reshape", "concatenate")
"""The operations of a transform entry (each entry has exactly one)."""

Leaf = Callable[[str, "tuple[int, int, int] | None"], np.ndarray]


@dataclass(frozen=True)
class Transform:
    """One valid ``weights.transforms`` entry (number ``index``, from 0): ``op`` (one of :data:`OPS`),
    ``sources`` / ``targets`` (name patterns) and the op's ``args`` (``perm`` (tuple or None: swap two axes),
    ``axis``, ``sizes``, ``start`` / ``stop``, ``shape``); ``where``: its place in the recipe
    (``r.yaml:12:7``), or empty."""

    index: int
    op: str
    sources: tuple
    targets: tuple
    args: dict = field(default_factory=dict)
    where: str = ""

    @property
    def label(self) -> str:
        """How messages name the entry: ``weights.transforms[1] (split of 'h.{i}.attn.c_attn.weight')``,
        with ``at r.yaml:12:7`` after the index when :attr:`where` is known."""
        at = f" at {self.where}" if self.where else ""
        return f"weights.transforms[{self.index}]{at} ({self.op} of {shorten(self.sources[0].text, 80)})"


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_transform(entry: Any, index: int = 0) -> tuple[Transform | None, list[str]]:
    """Entry ``index`` of ``weights.transforms`` (a mapping as the recipe holds it, ``from`` spelt so) as a
    :class:`Transform`, or None and its problems: not exactly one operation, an unknown key, a name that is
    not a valid file-side name (:func:`core.weight_names.parse_side`) or ends with ``.``, ``to`` not matching
    the operation (one name; a list of one per split part), placeholders of ``to`` (or of the other inputs
    of a concatenation) not those of ``from``, sizes or axes that are not integers in their ranges."""
    if not isinstance(entry, Mapping):
        return None, [f"a transform is a mapping with 'from', one of {', '.join(OPS)} and 'to', got "
                      f"{type(entry).__name__}"]
    problems: list[str] = []
    unknown = [k for k in entry if k not in ("from", "to", *OPS)]
    if unknown:
        problems.append(f"unknown key(s) {', '.join(map(repr, unknown))} (a transform has 'from', 'to' and one of "
                        f"{', '.join(OPS)})")
    ops = [k for k in OPS if k in entry and entry[k] is not None]
    if len(ops) != 1:
        problems.append(f"a transform has exactly one of {', '.join(OPS)}, got "
                        f"{', '.join(ops) if ops else 'none'}")
        return None, problems
    op = ops[0]
    value = entry[op]
    args: dict = {}
    many_from = op == "concatenate"
    many_to = op == "split"
    if op == "transpose":
        if value is True:
            args["perm"] = None
        elif isinstance(value, list) and 1 <= len(value) <= MAX_NDIM and all(_int(a) for a in value) \
                and sorted(value) == list(range(len(value))):
            args["perm"] = tuple(value)
        else:
            problems.append("transpose is true (swap the two axes of a 2-D tensor) or a permutation of the axes "
                            f"([1, 0], [2, 0, 1]; at most {MAX_NDIM}), got {shorten(repr(value), 80)}")
    elif op == "reshape":
        if (isinstance(value, list) and 1 <= len(value) <= MAX_NDIM and all(_int(d) for d in value)
                and all(d > 0 or d == -1 for d in value) and value.count(-1) <= 1
                and all(d <= MAX_DIM for d in value)):
            args["shape"] = tuple(value)
        else:
            problems.append(f"reshape is a list of 1 to {MAX_NDIM} sizes, each positive (at most {MAX_DIM}) or "
                            f"one of them -1, got {shorten(repr(value), 80)}")
    else:
        keys = {"split": ("axis", "sizes"), "slice": ("axis", "start", "stop"), "concatenate": ("axis",)}[op]
        if not isinstance(value, Mapping) or set(value) != set(keys):
            problems.append(f"{op} is a mapping with {', '.join(keys)}, got {shorten(repr(value), 80)}")
        else:
            if not _int(value["axis"]) or not -MAX_NDIM <= value["axis"] < MAX_NDIM:
                problems.append(f"{op}.axis must be an integer axis, got {shorten(repr(value['axis']), 40)}")
            args["axis"] = value["axis"]
            if op == "split":
                sizes = value["sizes"]
                if (not isinstance(sizes, list) or not 2 <= len(sizes) <= MAX_WEIGHT_TRANSFORM_PARTS
                        or not all(_int(s) and 0 < s <= MAX_DIM for s in sizes)):
                    problems.append(f"split.sizes is a list of 2 to {MAX_WEIGHT_TRANSFORM_PARTS} positive sizes, got "
                                    f"{shorten(repr(sizes), 80)}")
                else:
                    args["sizes"] = tuple(sizes)
            elif op == "slice":
                start, stop = value["start"], value["stop"]
                if not (_int(start) and _int(stop) and 0 <= start < stop <= MAX_DIM):
                    problems.append(f"slice needs integers 0 <= start < stop, got start {shorten(repr(start), 40)}, "
                                    f"stop {shorten(repr(stop), 40)}")
                args["start"], args["stop"] = start, stop
    sources = _names(entry.get("from"), "from", many_from, problems)
    targets = _names(entry.get("to", entry.get("from") if op in ("transpose", "slice", "reshape") else None),
                     "to", many_to, problems)
    if problems or sources is None or targets is None:
        return None, problems
    if many_to and "sizes" in args and len(targets) != len(args["sizes"]):
        problems.append(f"split makes {len(args['sizes'])} parts, 'to' names {len(targets)}")
    want = sorted(sources[0].names)
    for what, pats in (("from", sources[1:]), ("to", targets)):
        for pat in pats:
            if sorted(pat.names) != want:
                problems.append(f"'{what}' name {shorten(pat.text, 80)} must use the placeholders of 'from' "
                                f"({', '.join('{' + n + '}' for n in want) or 'none'})")
    if problems:
        return None, problems
    return Transform(index, op, tuple(sources), tuple(targets), args), []


def _names(value: Any, key: str, many: bool, problems: list[str]) -> "list[NamePattern] | None":
    """The name patterns of ``from`` / ``to``: one string, or (``many``) a list of 2 to the parts limit."""
    if value is None:
        problems.append(f"'{key}' is missing" + (" (a list of names)" if many else ""))
        return None
    if many:
        if not isinstance(value, list) or not 2 <= len(value) <= MAX_WEIGHT_TRANSFORM_PARTS:
            problems.append(f"'{key}' is a list of 2 to {MAX_WEIGHT_TRANSFORM_PARTS} tensor names here, got "
                            f"{shorten(repr(value), 80)}")
            return None
        texts = value
    elif not isinstance(value, str):
        problems.append(f"'{key}' is one tensor name here, got {shorten(repr(value), 80)}")
        return None
    else:
        texts = [value]
    out = []
    for text in texts:
        pat, bad = parse_side(text, f"'{key}' name")
        problems.extend(bad)
        if pat is not None and (pat.prefix or not text):
            problems.append(f"'{key}' names a whole tensor: {shorten(text, 80)} must not be empty or end with '.'")
            pat = None
        if pat is not None:
            out.append(pat)
    return out if len(out) == len(texts) else None


def transform_problems(entry: Any) -> list[str]:
    """The problems of one ``weights.transforms`` entry (:func:`parse_transform`); empty when it is valid."""
    return parse_transform(entry)[1]


def parse_transforms(entries: Sequence[Any] | None, where: Sequence[str] = ()) -> list[Transform]:
    """Every entry parsed (:func:`parse_transform`), entry ``i`` placed at ``where[i]`` when given (the
    recipe's ``file:line:column``, for messages). Raises ValueError listing the problems of every invalid
    entry, or for more than :data:`~core.limits.MAX_WEIGHT_TRANSFORMS` entries."""
    entries = list(entries or ())
    if len(entries) > MAX_WEIGHT_TRANSFORMS:
        raise ValueError(f"{len(entries)} weight transforms, more than the {MAX_WEIGHT_TRANSFORMS} allowed")
    out, problems = [], []
    for i, entry in enumerate(entries):
        t, bad = parse_transform(entry, i)
        problems += [f"weights.transforms[{i}]: {p}" for p in bad]
        if t is not None:
            out.append(replace(t, where=str(where[i])) if i < len(where) else t)
    if problems:
        raise ValueError("invalid weight transforms:\n" + "\n".join(f"  - {p}" for p in problems))
    return out


class Node:
    """A tensor of the planned table: ``dtype`` (the file's), ``shape``, ``origin`` (how messages say where
    it comes from; empty for a tensor of the file) and :meth:`read`."""

    dtype: str
    shape: tuple
    origin: str = ""

    def read(self, region, leaf: Leaf) -> np.ndarray:
        """The tensor (``region`` None) or its part ``[lo, hi)`` along ``axis`` (``region = (axis, lo, hi)``)
        as a new C-contiguous array; ``leaf(name, region)`` reads a tensor of the file."""
        raise NotImplementedError


def _take(a: np.ndarray, region) -> np.ndarray:
    if region is None:
        return np.ascontiguousarray(a)
    axis, lo, hi = region
    index = [slice(None)] * a.ndim
    index[axis] = slice(lo, hi)
    return np.ascontiguousarray(a[tuple(index)])


@dataclass
class FileNode(Node):
    """Tensor ``name`` of the file, unchanged."""

    name: str
    dtype: str
    shape: tuple
    origin: str = ""

    def read(self, region, leaf: Leaf) -> np.ndarray:
        return leaf(self.name, region)


@dataclass
class _Transpose(Node):
    src: Node
    perm: tuple
    dtype: str
    shape: tuple
    origin: str

    def read(self, region, leaf: Leaf) -> np.ndarray:
        inner = None if region is None else (self.perm[region[0]], region[1], region[2])
        return np.ascontiguousarray(self.src.read(inner, leaf).transpose(self.perm))


@dataclass
class _Range(Node):
    """The part ``[start, stop)`` of ``src`` along ``axis`` (a split part, a slice)."""

    src: Node
    axis: int
    start: int
    stop: int
    dtype: str
    shape: tuple
    origin: str

    def read(self, region, leaf: Leaf) -> np.ndarray:
        if region is None or region[0] == self.axis:
            lo, hi = (0, self.stop - self.start) if region is None else region[1:]
            return self.src.read((self.axis, self.start + lo, self.start + hi), leaf)
        own = (self.stop - self.start) / self.src.shape[self.axis]
        theirs = (region[2] - region[1]) / self.shape[region[0]]
        if own <= theirs:          # read the smaller of the two parts, cut the other out of it
            return _take(self.src.read((self.axis, self.start, self.stop), leaf), region)
        return _take(self.src.read(region, leaf), (self.axis, self.start, self.stop))


@dataclass
class _Reshape(Node):
    src: Node
    dtype: str
    shape: tuple
    origin: str

    def read(self, region, leaf: Leaf) -> np.ndarray:
        return _take(self.src.read(None, leaf).reshape(self.shape), region)


@dataclass
class _Concat(Node):
    srcs: tuple
    axis: int
    dtype: str
    shape: tuple
    origin: str

    def read(self, region, leaf: Leaf) -> np.ndarray:
        if region is not None and region[0] != self.axis:
            return np.concatenate([s.read(region, leaf) for s in self.srcs], axis=self.axis)
        lo, hi = (0, self.shape[self.axis]) if region is None else region[1:]
        parts, offset = [], 0
        for s in self.srcs:
            n = s.shape[self.axis]
            a, b = max(lo, offset), min(hi, offset + n)
            if a < b:
                parts.append(s.read((self.axis, a - offset, b - offset), leaf))
            offset += n
        return np.ascontiguousarray(np.concatenate(parts, axis=self.axis))


def _axis(axis: int, ndim: int) -> int | None:
    return axis + ndim if -ndim <= axis < 0 else (axis if 0 <= axis < ndim else None)


def plan_transforms(transforms: Sequence[Transform], infos: Mapping[str, Mapping[str, Any]],
                    failed: set | None = None) -> tuple[dict[str, Node], list[str]]:
    """The table of tensors the transforms leave: name -> :class:`Node`, in the file's order with each
    consumed tensor's outputs in its place, and the problems (:mod:`the module docstring <core.weight_transforms>`)
    found from ``infos`` (the file's header: name -> ``{"dtype", "shape"}``) alone, so before any data is read.
    A transform that fails on a tensor still consumes it; ``failed`` (a set) receives the names of the
    outputs it would have made, so that the loader does not report them missing a second time."""
    table: dict[str, Node] = {name: FileNode(name, info["dtype"], tuple(int(d) for d in info["shape"]))
                              for name, info in infos.items()}
    problems: list[str] = []
    for t in transforms:
        first = t.sources[0]
        head = first.head
        matches = [values for values in (first.match(name.split(".")) for name in table if name.startswith(head))
                   if values is not None]
        if not matches:
            problems.append(f"{t.label} matches no tensor of the file"
                            + (" (left by the transforms before it)" if t.index else ""))
            continue
        made: dict[str, list] = {}        # first input -> its outputs [(name, node)]
        consumed: set[str] = set()
        new_names: set[str] = set()
        for values in matches:
            names = [p.fill(values) for p in t.sources]
            if len(set(names)) != len(names):
                problems.append(f"{t.label}: the inputs {', '.join(shorten(n, 80) for n in names)} name one "
                                "tensor twice")
                consumed.update(names)
                if failed is not None:
                    failed.update(p.fill(values) for p in t.targets)
                continue
            missing = [n for n in names if n not in table or n in consumed]
            if missing:
                problems.append(f"{t.label}: input {shorten(missing[0], 80)} is not in the file (or another "
                                f"match of this transform used it), for {shorten(names[0], 80)}")
                continue
            outs, bad = _apply(t, names, [table[n] for n in names])
            targets = [p.fill(values) for p in t.targets]
            if bad:
                problems.append(f"{t.label}: {bad}")
                consumed.update(names)
                if failed is not None:
                    failed.update(targets)
                continue
            clash = [n for n in targets if (n in table and n not in names) or n in new_names]
            if clash or len(set(targets)) != len(targets):
                problems.append(f"{t.label}: output {shorten((clash or targets)[0], 80)} would replace another "
                                "tensor of the same name")
                continue
            consumed.update(names)
            new_names.update(targets)
            made[names[0]] = list(zip(targets, outs))
        rebuilt: dict[str, Node] = {}
        for name, node in table.items():
            if name in made:
                rebuilt.update(made[name])
            elif name not in consumed:
                rebuilt[name] = node
        table = rebuilt
    return table, problems


def _shape_text(shape: Sequence[int]) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _apply(t: Transform, names: list[str], srcs: list[Node]) -> tuple[list[Node], str]:
    """The output nodes of ``t`` on the inputs ``srcs`` (named ``names``), or ``([], problem)``."""
    src, shape = srcs[0], srcs[0].shape
    what = f"{shorten(names[0], 80)} has shape {_shape_text(shape)}"
    origin = f" (made by {t.label} from {shorten(names[0], 80)} {_shape_text(shape)})"
    if t.op == "transpose":
        perm = t.args["perm"]
        if perm is None:
            if len(shape) != 2:
                return [], f"{what}; transpose: true swaps the axes of a 2-D tensor (give a permutation)"
            perm = (1, 0)
        if len(perm) != len(shape):
            return [], f"{what}, which has {len(shape)} axes; the permutation {list(perm)} has {len(perm)}"
        return [_Transpose(src, perm, src.dtype, tuple(shape[p] for p in perm), origin)], ""
    if t.op == "reshape":
        want = list(t.args["shape"])
        total = math.prod(shape)
        if -1 in want:
            rest = math.prod(d for d in want if d != -1)
            if total % rest:
                return [], f"{what} ({total} elements), which the shape {want} cannot hold"
            want[want.index(-1)] = total // rest
        if math.prod(want) != total:
            return [], f"{what} ({total} elements); the shape {_shape_text(want)} holds {math.prod(want)}"
        return [_Reshape(src, src.dtype, tuple(want), origin)], ""
    axis = _axis(t.args["axis"], len(shape))
    if axis is None:
        return [], f"{what}, which has no axis {t.args['axis']}"
    if t.op == "slice":
        start, stop = t.args["start"], t.args["stop"]
        if stop > shape[axis]:
            return [], f"{what}; slice [{start}, {stop}) along axis {axis} runs past its length {shape[axis]}"
        out = shape[:axis] + (stop - start,) + shape[axis + 1:]
        return [_Range(src, axis, start, stop, src.dtype, out, origin)], ""
    if t.op == "split":
        sizes = t.args["sizes"]
        if sum(sizes) != shape[axis]:
            return [], (f"{what}; split sizes {list(sizes)} along axis {axis} add up to {sum(sizes)}, not its "
                        f"length {shape[axis]}")
        outs, start = [], 0
        for size in sizes:
            out = shape[:axis] + (size,) + shape[axis + 1:]
            outs.append(_Range(src, axis, start, start + size, src.dtype, out, origin))
            start += size
        return outs, ""
    # concatenate
    for name, other in zip(names[1:], srcs[1:]):
        rest = other.shape[:axis] + other.shape[axis + 1:] if len(other.shape) == len(shape) else None
        if rest != shape[:axis] + shape[axis + 1:] or other.dtype != src.dtype:
            return [], (f"{what} {src.dtype}, {shorten(name, 80)} {_shape_text(other.shape)} {other.dtype}: "
                        f"concatenate along axis {axis} needs the same dtype and the same sizes on the other axes")
    total = sum(s.shape[axis] for s in srcs)
    if total > MAX_DIM:
        return [], f"concatenating along axis {axis} gives a length {total}, more than {MAX_DIM}"
    out = shape[:axis] + (total,) + shape[axis + 1:]
    joined = ", ".join(shorten(n, 80) for n in names)
    return [_Concat(tuple(srcs), axis, src.dtype, out, f" (made by {t.label} from {joined})")], ""



LAYOUTS = ("in_out", "out_in")
"""The 2-D layouts ``weights.layout`` declares: ``in_out`` (stored (in, out), as GPT-2's Conv1D; a ``Linear``
weight must be transposed on the way), ``out_in`` (stored as ``Linear`` holds it; no transform may swap it)."""


def _lineage(nodes, out: dict[str, bool]) -> None:
    """``out[file tensor name]``: whether some path from it to one of ``nodes`` swaps two axes an odd number
    of times. Each (node, parity) is visited once: split parts share their input, so the nodes form a
    graph whose paths could multiply, and the walk stays linear in its size."""
    seen: set[tuple[int, bool]] = set()
    stack = [(n, False) for n in nodes]
    while stack:
        node, swapped = stack.pop()
        if (id(node), swapped) in seen:
            continue
        seen.add((id(node), swapped))
        if isinstance(node, FileNode):
            out[node.name] = out.get(node.name, False) or swapped
        elif isinstance(node, _Transpose):
            stack.append((node.src, swapped != (node.perm == (1, 0))))
        elif isinstance(node, _Concat):
            stack.extend((s, swapped) for s in node.srcs)
        else:
            stack.append((node.src, swapped))


def layout_problems(table: Mapping[str, Node], layout: Mapping[str, str], infos: Mapping[str, Mapping[str, Any]],
                    match: Callable[[str, str], bool], where: Mapping[str, str] | None = None) -> list[str]:
    """The problems of ``weights.layout`` (glob -> one of :data:`LAYOUTS`) on the planned ``table``: a
    file tensor a glob declares ``in_out`` that reaches a parameter without a 2-D transpose (``transpose:
    true``) on its way, one declared ``out_in`` that is transposed, a declared tensor that is not 2-D, a
    glob that matches no tensor of the file (``infos``: its header; ``match(name, glob)``). The shape of a
    square matrix cannot tell its layout: this declaration is what catches one stored transposed. ``where``:
    glob -> its place in the recipe (``r.yaml:5:13``), named in the messages."""
    problems = []
    seen: dict[str, bool] = {}
    _lineage(table.values(), seen)
    where = where or {}
    for glob, kind in layout.items():
        hits = [n for n in infos if match(n, glob)]
        at = f" at {where[glob]}" if where.get(glob) else ""
        if not hits:
            problems.append(f"weights.layout {shorten(glob, 80)}{at} matches no tensor of the file")
        for name in hits:
            shape = tuple(infos[name]["shape"])
            if len(shape) != 2:
                problems.append(f"{shorten(name, 80)} has shape {_shape_text(shape)}; weights.layout "
                                f"{shorten(glob, 80)}{at} declares a 2-D layout ({kind})")
            elif kind == "in_out" and not seen.get(name, False):
                problems.append(f"{shorten(name, 80)} {_shape_text(shape)} is stored (in, out) (weights.layout "
                                f"{shorten(glob, 80)}{at}: {kind}) but no transform transposes it: add "
                                f"{{from: {shorten(name, 80)}, transpose: true}} to weights.transforms (a square "
                                "matrix would load transposed without a word)")
            elif kind == "out_in" and seen.get(name, False):
                problems.append(f"{shorten(name, 80)} {_shape_text(shape)} is stored (out, in) (weights.layout "
                                f"{shorten(glob, 80)}{at}: {kind}) but a transform transposes it")
    return problems
