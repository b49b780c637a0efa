"""The typed contract between kernel selection, topi and the code generator.

:class:`builder.transform.SelectKernels` recognises a matmul with its weight and elementwise
epilogue and describes it with these dataclasses; :func:`builder.te.topi.linear_kernel` builds the
reference loops from the same description and puts the :class:`LinearKernelSpec` on the PrimFunc as
``attrs["mb.kernel"]``; the code generator's planner
(:func:`builder.codegen.kernels.linear.plan_linear`) reads it back to choose a GEMV / GEMM kernel.

Indices (``x``, ``out``, ``w``, ``q``, ``scale``) count the PrimFunc's parameters: ``x`` first, the
output last. The epilogue is a tree of :class:`EpilogueLinear` (the ``k``-th matmul's float32 result),
:class:`EpilogueTensor` (another input, broadcast to the output) and :class:`EpilogueOp` (a registered
elementwise op applied to subtrees, with its attributes); the code generator sees it as the output
block's scalar expression.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Union

from .quant_format import QuantFormat

__all__ = ["DenseWeight", "GroupWeight", "Weight", "LinearKernelSpec", "AttentionKernelSpec", "EpilogueLinear", "EpilogueTensor",
           "EpilogueOp", "Epilogue", "KERNEL_ATTR", "WEIGHT_TRANSFORM_ATTR", "PRINT_WHEN_SET", "spec_from_attr"]

KERNEL_ATTR = "mb.kernel"
"""The PrimFunc attribute that holds a kernel spec."""

WEIGHT_TRANSFORM_ATTR = "mb.weight_transform"
"""The PrimFunc attribute (True) of a kernel that computes from model weights only, a layout
transform (:class:`builder.transform.TileWeights`): its executable metadata says
``weight_transform``, and the VM may keep its results across calls while the same read-only
arrays are passed (:class:`runtime.vm.VirtualMachine`)."""


@dataclass(frozen=True)
class DenseWeight:
    """A float weight (float32 / float16 / bfloat16) at parameter ``w``: ``(out, in)``, or with
    ``row_tile = T`` (16) stored in tiles of ``T`` rows, ``(out / T, in, T)`` with ``W[n, k]`` at
    ``[n // T, k, n % T]`` (the layout :class:`builder.transform.SelectKernels` gives a model's
    float weights, :func:`runtime.weights.tile_rows`). ``kn = 1``: stored ``(in, out)``, the
    right operand of ``x @ W`` as it is (ONNX MatMul's ``B``, GPT-2's ``Conv1D``); ``batched = 1``:
    one matrix per batch of ``x`` ``(*B, M, in)`` (a matmul of two activations), ``(*B, out, in)``
    (``q @ k.T`` with ``k`` as stored) or with ``kn`` ``(*B, in, out)`` (``p @ v``)."""

    w: int
    row_tile: int = 0
    batched: int = 0
    kn: int = 0
    format: str = field(default="dense", init=False)


PRINT_WHEN_SET = "mb.print_when_set"
"""Field metadata key: the printer writes a kernel-spec field with it only when its value is not the
default (a field added to a spec does not change the printed form of specs that do not use it)."""

#: GroupWeight field -> the ``R.group_dequantize`` attribute it holds (the fields its printed form has
#: always had); every other attribute travels in ``extra_attrs``.
_GROUP_FIELDS = (("bits", "bits"), ("group_size", "group_size"), ("zero_point", "zero_point"),
                 ("in_features", "in_features"), ("activation", "activation_quantization"), ("row_tile", "row_tile"))
_GROUP_DEFAULTS = {"activation_quantization": "none", "row_tile": 0}


def _frozen(value):
    """``value`` hashable: lists as tuples (a spec field must be, as a :func:`call_te` memo key)."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


@dataclass(frozen=True)
class GroupWeight:
    """A group-quantized weight: ``R.group_dequantize(q, scale, **attrs)`` with the words at parameter
    ``q`` and the scales at ``scale``, and the op's attributes, carried verbatim: the ones every format has
    as fields (``bits``, ``group_size``, ``zero_point``, ``in_features``, ``activation`` for
    ``activation_quantization``: ``"none"`` / ``"int8"``, ``row_tile``: 0 for rows as they are, else 3-D
    tiles of that many rows) and any other (a codebook's name, an attribute a new format adds) in
    ``extra_attrs``, ``((key, value), ...)``, printed only when there are some. Build it from the op's
    attributes with :meth:`of_attrs`; :attr:`op_attrs` gives them back, :meth:`quant_format` the
    :class:`~builder.ir.quant_format.QuantFormat` (layout: :mod:`builder.ir.quant_format`). A kernel that
    does not know an attribute must refuse the weight (the planner does, :mod:`builder.codegen.kernels.linear.plan`)."""

    q: int
    scale: int
    bits: int
    group_size: int
    zero_point: int
    in_features: int
    activation: str = "none"
    row_tile: int = 0
    format: str = field(default="group", init=False)
    extra_attrs: tuple = field(default=(), metadata={PRINT_WHEN_SET: True})

    @classmethod
    def of_attrs(cls, q: int, scale: int, attrs) -> "GroupWeight":
        """The weight of ``R.group_dequantize`` attributes ``attrs`` (a mapping) at parameters ``q`` /
        ``scale``: every attribute kept (``of_attrs(q, s, a).op_attrs == a`` up to defaults). Raises
        KeyError for a missing required one (``bits``, ``group_size``, ``zero_point``, ``in_features``)."""
        kw = {}
        for f, k in _GROUP_FIELDS:
            v = attrs.get(k, _GROUP_DEFAULTS[k]) if k in _GROUP_DEFAULTS else attrs[k]
            kw[f] = str(v) if f == "activation" else int(v)
        named = {k for _, k in _GROUP_FIELDS}
        extra = tuple((k, _frozen(v)) for k, v in attrs.items() if k not in named)
        return cls(q, scale, **kw, extra_attrs=extra)

    @classmethod
    def of_format(cls, q: int, scale: int, fmt: QuantFormat, in_features: int) -> "GroupWeight":
        """The weight of a :class:`~builder.ir.quant_format.QuantFormat` with ``in_features`` columns."""
        return cls.of_attrs(q, scale, fmt.to_attrs(in_features))

    @property
    def op_attrs(self) -> dict:
        """The ``R.group_dequantize`` attributes this weight stands for, in the printed order (the defaults
        ``activation_quantization="none"`` and ``row_tile=0`` left out)."""
        attrs = {}
        for f, k in _GROUP_FIELDS:
            v = getattr(self, f)
            if k not in _GROUP_DEFAULTS or v != _GROUP_DEFAULTS[k]:
                attrs[k] = v
        attrs.update(self.extra_attrs)
        return attrs

    def quant_format(self, storage_dtype: str, scale_dtype: str, name: str = "linear_kernel") -> QuantFormat:
        """The :class:`~builder.ir.quant_format.QuantFormat` of this weight with words of ``storage_dtype``
        and scales of ``scale_dtype`` (:meth:`QuantFormat.from_attrs`; raises as it does)."""
        return QuantFormat.from_attrs(self.op_attrs, storage_dtype, scale_dtype, name)


Weight = Union[DenseWeight, GroupWeight]


@dataclass(frozen=True)
class LinearKernelSpec:
    """``out[..., n] = epilogue(sum_k x[..., k] * W_j[n, k] for each weight j)``: the parameter indices
    of ``x`` and ``out``, one or two ``weights``, and the names of the reduction blocks (``acc``, one
    per weight, float32) in the PrimFunc."""

    x: int
    out: int
    weights: tuple
    acc: tuple
    kind: str = field(default="linear", init=False)


@dataclass(frozen=True)
class EpilogueLinear:
    """The result of matmul number ``index`` (float32, before any cast)."""

    index: int


@dataclass(frozen=True)
class EpilogueTensor:
    """Input tensor number ``index`` of the fused kernel (after ``x`` and the weights' tensors),
    broadcast to the output shape."""

    index: int


@dataclass(frozen=True)
class EpilogueOp:
    """Registered elementwise op ``op`` (``relax.nn.silu``) on ``args``, with attributes ``attrs``
    (``(("dtype", "float16"),)`` for ``relax.astype``)."""

    op: str
    args: tuple
    attrs: tuple = ()


Epilogue = Union[EpilogueLinear, EpilogueTensor, EpilogueOp]


ATTENTION_CAUSAL = ("none", "TopLeft", "BottomRight")


@dataclass(frozen=True)
class AttentionKernelSpec:
    """Scaled dot-product attention in the BSNH layout (:func:`builder.te.topi.attention`, put on
    its PrimFunc when ``nn.attention`` is legalized): ``q`` (B, Sq, H, D), ``k`` (B, Sk, Hk, D),
    ``v`` (B, Sk, Hk, Dv), an optional additive ``bias`` broadcastable to the scores (B, H, Sq, Sk)
    and the output (B, Sq, H, Dv), as parameter indices (``bias`` -1 when absent).
    ``bias_broadcast`` lists the dims of ``bias`` that are 1 where the scores' are not;
    ``causal`` is ``"none"``, ``"TopLeft"`` (keys ``j <= i``) or ``"BottomRight"`` (``j <= i + Sk
    - Sq``); ``group`` is ``H / Hk`` (grouped-query attention); ``scale`` multiplies ``q . k``.

    ``seqstart`` (a parameter index, -1 for none) marks the variable-length form
    (:func:`builder.te.topi.attention_var_len`): ``q`` (T, H, D), ``k`` (T, Hk, D), ``v`` (T, Hk, Dv)
    and the output (T, H, Dv) hold the tokens of several sequences one after another, sequence ``b``
    the rows ``seqstart[b] <= t < seqstart[b + 1]``, each attending within itself (no bias).

    ``window`` (0 for none; needs a causal mask) keeps only keys ``limit - window < j <= limit`` of a
    query whose causal bound is ``limit`` (sliding-window attention); ``softcap`` (0 for none) replaces
    the scaled scores by ``softcap * tanh(s / softcap)`` before the bias and the masks (Gemma 2).

    ``block_table`` and ``lengths`` (parameter indices, -1 for none) mark the paged form
    (:func:`builder.te.topi.paged_attention`): ``k`` / ``v`` are one layer's pools (N, BS, Hk, D) of a
    paged KV cache, row ``b``'s key ``j`` in slot ``j % BS`` of block ``block_table[b, j // BS]``, its
    ``lengths[b]`` keys ending with the ``Sq`` new queries' own (causal ``"BottomRight"`` per row); a bias's
    column is the key's position."""

    q: int
    k: int
    v: int
    bias: int
    out: int
    causal: str
    bias_broadcast: tuple
    group: int
    scale: float
    kind: str = field(default="attention", init=False)
    seqstart: int = -1
    window: int = field(default=0, metadata={PRINT_WHEN_SET: True})
    softcap: float = field(default=0.0, metadata={PRINT_WHEN_SET: True})
    block_table: int = field(default=-1, metadata={PRINT_WHEN_SET: True})
    lengths: int = field(default=-1, metadata={PRINT_WHEN_SET: True})


def spec_from_attr(value: dict) -> "LinearKernelSpec | AttentionKernelSpec":
    """The kernel spec a printed ``"mb.kernel"`` attribute describes (the printer writes a spec as
    the dict of its fields, ``{"x": 0, "out": 3, "weights": [{"w": 1, "format": "dense"}], ...,
    "kind": "linear"}``). Raises ValueError for an unknown kind or format, a missing or extra
    field, or a field of the wrong type."""
    def fields(d, cls, tag: str) -> dict:
        if not isinstance(d, dict):
            raise ValueError(f"{KERNEL_ATTR}: {cls.__name__} must be a dict, got {type(d).__name__}")
        d = dict(d)
        d.pop(tag, None)
        names = [f for f in cls.__dataclass_fields__ if f != tag]
        optional = {f for f in names if cls.__dataclass_fields__[f].default is not MISSING}
        if not set(names) - optional <= set(d) <= set(names):
            raise ValueError(f"{KERNEL_ATTR}: {cls.__name__} takes the fields {names}, got {sorted(d)}")
        return d

    if isinstance(value, dict) and value.get("kind") == "attention":
        return _attention_spec(fields(value, AttentionKernelSpec, "kind"))
    if not isinstance(value, dict) or value.get("kind") != "linear":
        raise ValueError(f"{KERNEL_ATTR}: unknown kernel kind {value.get('kind') if isinstance(value, dict) else value!r}")
    d = fields(value, LinearKernelSpec, "kind")
    weights = []
    for w in d["weights"] if isinstance(d["weights"], (list, tuple)) else [None]:
        fmt = w.get("format") if isinstance(w, dict) else None
        cls = {"dense": DenseWeight, "group": GroupWeight}.get(fmt)
        if cls is None:
            raise ValueError(f"{KERNEL_ATTR}: unknown weight format {fmt!r}")
        wf = fields(w, cls, "format")
        extra = wf.pop("extra_attrs", ())
        if not all(isinstance(v, int) and not isinstance(v, bool) for k, v in wf.items() if k != "activation"):
            raise ValueError(f"{KERNEL_ATTR}: weight fields must be integers, got {wf}")
        if extra:
            if not isinstance(extra, (list, tuple)) or not all(
                    isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) for p in extra):
                raise ValueError(f"{KERNEL_ATTR}: extra_attrs must be [key, value] pairs, got {extra!r}")
            wf["extra_attrs"] = tuple((k, _frozen(v)) for k, v in extra)
        weights.append(cls(**wf))
    if not all(isinstance(d[k], int) and not isinstance(d[k], bool) for k in ("x", "out")) or not all(
            isinstance(a, str) for a in d["acc"]):
        raise ValueError(f"{KERNEL_ATTR}: x / out must be integers and acc block names")
    return LinearKernelSpec(d["x"], d["out"], tuple(weights), tuple(d["acc"]))


def _attention_spec(d: dict) -> AttentionKernelSpec:
    """An :class:`AttentionKernelSpec` from its printed fields; ValueError for a wrong type."""
    def is_int(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    if not all(is_int(d.get(k, -1)) for k in ("q", "k", "v", "bias", "out", "group", "seqstart", "window",
                                              "block_table", "lengths")):
        raise ValueError(f"{KERNEL_ATTR}: attention q / k / v / bias / out / group / seqstart / window / "
                         f"block_table / lengths must be integers, got {d}")
    cap = d.get("softcap", 0.0)
    if not isinstance(cap, (int, float)) or isinstance(cap, bool) or d.get("window", 0) < 0 or cap < 0:
        raise ValueError(f"{KERNEL_ATTR}: attention window and softcap must be numbers >= 0, got "
                         f"{d.get('window')!r}, {cap!r}")
    if d["causal"] not in ATTENTION_CAUSAL:
        raise ValueError(f"{KERNEL_ATTR}: attention causal must be one of {ATTENTION_CAUSAL}, got {d['causal']!r}")
    bb = d["bias_broadcast"]
    if not isinstance(bb, (list, tuple)) or not all(is_int(x) and 0 <= x < 4 for x in bb):
        raise ValueError(f"{KERNEL_ATTR}: attention bias_broadcast must list dims 0..3, got {bb!r}")
    if not isinstance(d["scale"], (int, float)) or isinstance(d["scale"], bool):
        raise ValueError(f"{KERNEL_ATTR}: attention scale must be a number, got {d['scale']!r}")
    return AttentionKernelSpec(d["q"], d["k"], d["v"], d["bias"], d["out"], d["causal"], tuple(bb), d["group"],
                               float(d["scale"]), seqstart=d.get("seqstart", -1),
                               window=d.get("window", 0), softcap=float(cap),
                               block_table=d.get("block_table", -1), lengths=d.get("lengths", -1))
