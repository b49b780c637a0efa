"""Built-in layers and effects (``tvm.relax.frontend.nn.modules``), with PyTorch's parameter
layouts and names.

Shapes: ``Linear.weight`` (out_features, in_features), ``Conv1D.weight`` (out, in / groups,
kernel), ``ConvTranspose1D.weight`` (in, out / groups, kernel), ``Embedding.weight`` (num,
dim), norms' ``weight`` / ``bias`` (hidden,).

Effects: :class:`IOEffect` (the ``_io`` token of ``debug=True``, used by :func:`print_` and
:func:`debug_func`) and :class:`KVCache`. Both call runtime builtins through
``R.call_pure_packed`` / ``R.call_inplace_packed``, registered here (printed as TVM prints
them; kept as they are by LegalizeOps; run by the VM's builtins, see ``runtime/vm.py``).
"""
from __future__ import annotations

import inspect
import threading
from typing import Sequence

from ..ir import expr as E
from ..ir import relax as rx
from ..ir.block_builder import BlockBuilder
from ..ir.struct_info import ObjectStructInfo, TensorStructInfo
from . import op
from . import tensor_parallel as tp
from .core import Effect, Module, Parameter, Tensor, get_default_dtype

__all__ = ["Linear", "LayerNorm", "RMSNorm", "GroupNorm", "Conv1D", "ConvTranspose1D", "Embedding", "ReLU", "SiLU",
           "GELU", "IOEffect", "KVCache", "debug_func", "print_"]


class IOEffect(Effect):
    """The IO side effect threaded through functions under ``debug=True``: an ``R.Object``
    token named ``_io`` (``name_hint + "_io"``; the exporter passes ``""``), initialized with
    ``R.null_value()``. Printing and debug callbacks consume the token and produce the next
    one, which orders them; see :func:`debug_func`."""

    _tls = threading.local()   # .stack: the IO effect of each export running on this thread (None without debug)

    def __init__(self) -> None:
        self.effect: rx.Var | None = None

    @classmethod
    def current(cls) -> "IOEffect | None":
        """The IO effect of the innermost export running on this thread, or None (no export running, or one
        without ``debug=True``); the exporter enters and exits it (:meth:`enter`, :meth:`exit`)."""
        stack = getattr(cls._tls, "stack", None)
        return stack[-1] if stack else None

    @classmethod
    def enter(cls, effect: "IOEffect | None") -> None:
        """Make ``effect`` (None: an export without one) current until the matching :meth:`exit`."""
        if not hasattr(cls._tls, "stack"):
            cls._tls.stack = []
        cls._tls.stack.append(effect)

    @classmethod
    def exit(cls) -> None:
        """Undo the last :meth:`enter`."""
        cls._tls.stack.pop()

    def emit_init(self, name_hint: str, builder) -> list:
        """``_io: R.Object = R.null_value()``."""
        return [builder.emit(rx.Call(rx.Op.get("null_value"), []), f"{name_hint}_io")]

    def create(self, name_hint: str) -> list:
        """The function input ``_io: R.Object``."""
        return [rx.Var(f"{name_hint}_io", ObjectStructInfo())]

    def set_state(self, state_vars: list) -> None:
        """Adopt the token variable."""
        (self.effect,) = state_vars

    def finalize(self) -> list:
        """The last token (returned by the function); the effect is reset."""
        result, self.effect = self.effect, None
        return [result]

    def print_(self, tensor: Tensor) -> None:
        """Print ``tensor`` at run time through the ``effect.print`` builtin (TVM's
        ``IOEffect.print_``): ``_io1 = R.call_pure_packed("effect.print", _io, x, ...)``."""
        self._consume("effect.print", [tensor._expr])

    def _consume(self, func: str, args: list) -> None:
        if self.effect is None:
            raise RuntimeError("the IO effect is not active: printing needs an exported method "
                               "under debug=True")
        call = _call_packed("call_pure_packed", func, [self.effect, *args], ObjectStructInfo())
        self.effect = BlockBuilder.current().emit(call, self.effect.name_hint)


def debug_func(name: str, *args, _line_info: str | None = None) -> None:
    """Call the runtime function ``name`` with ``args`` when the exported function runs
    (export with ``debug=True``).

    Emits ``_io1 = R.call_pure_packed("vm.builtin.invoke_debug_func", _io, R.str(name),
    R.str(line_info), args..., sinfo_args=(R.Object,))``. ``args``: Tensors, ints (int64),
    floats (float32, as TVM), strings and scalar PrimExprs (e.g. a ``spec.Int`` input). At run
    time the VM calls ``fn(line_info, *args)`` for the function registered under ``name``
    (``runtime.register_extern``); ``"vm.builtin.debug_print"`` is built in. ``line_info`` is
    the caller's ``file:line`` unless given. Raises RuntimeError outside a ``debug=True``
    export, TypeError for an unsupported argument.
    """
    io = IOEffect.current()
    if io is None:
        raise RuntimeError("debug_func / print_ need the IO effect: export with debug=True")
    if _line_info is None:
        _line_info = _caller_line()
    converted = []
    for arg in args:
        if isinstance(arg, Tensor):
            converted.append(arg._expr)
        elif isinstance(arg, bool):
            raise TypeError("debug_func: bool arguments are not supported; pass an int")
        elif isinstance(arg, int):
            converted.append(rx.PrimValue(E.IntImm(arg, "int64"), "int64"))
        elif isinstance(arg, float):
            converted.append(rx.PrimValue(E.FloatImm(arg, "float32"), "float32"))
        elif isinstance(arg, str):
            converted.append(rx.StringImm(arg))
        elif isinstance(arg, E.PrimExpr):
            converted.append(rx.PrimValue(arg, arg.dtype))
        else:
            raise TypeError(f"debug_func: unsupported argument type {type(arg).__name__}")
    io._consume("vm.builtin.invoke_debug_func",
                [rx.StringImm(name), rx.StringImm(_line_info), *converted])


def print_(tensor: Tensor) -> None:
    """Print ``tensor`` (its shape, dtype and values, after the caller's ``file:line``) when the
    exported function runs; needs ``debug=True``. ``debug_func("vm.builtin.debug_print", x)``."""
    debug_func("vm.builtin.debug_print", tensor, _line_info=_caller_line())


def _caller_line() -> str:
    """``file:line`` of the code that called the public function calling this one."""
    frame = inspect.currentframe().f_back.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _call_packed(op: str, func: str, args: list, sinfo, **attrs) -> rx.Call:
    """``R.<op>("func", args..., sinfo_args=(sinfo,))`` for ``call_pure_packed`` /
    ``call_inplace_packed``."""
    return rx.Call(rx.Op.get(op), [rx.ExternFunc(func), *args], attrs, sinfo_args=[sinfo])


class KVCache(Effect):
    """A growable cache of rows of shape ``unit_shape`` (TVM's ``nn.KVCache`` effect), e.g. the
    keys of past tokens: ``[seq, num_heads, head_dim]`` with ``unit_shape = [num_heads, head_dim]``.

    ``KVCache(init_seq_len, unit_shape, dtype=None)``: room for ``init_seq_len`` rows at first
    (it grows by doubling), initially empty. In an exported method, ``append(x)`` adds
    ``x`` ((k, *unit_shape), or one row of ``unit_shape``) and ``view(n)`` reads all rows as an
    (n, *unit_shape) tensor; ``n`` must equal the number of rows at run time (a ``spec.Int``
    input, typically). Runtime builtins: ``vm.builtin.attention_kv_cache_create / _append /
    _view``. Raises TypeError when ``append`` gets another dtype.
    """

    def __init__(self, init_seq_len: int, unit_shape: Sequence[int], dtype: str | None = None) -> None:
        self.init_seq_len = int(init_seq_len)
        self.unit_shape = [int(i) for i in unit_shape]
        self.dtype = dtype if dtype is not None else get_default_dtype()
        self.cache: rx.Var | None = None

    def emit_init(self, name_hint: str, builder) -> list:
        """``cache = R.call_pure_packed("vm.builtin.attention_kv_cache_create",
        R.zeros(shape), shape, R.prim_value(0), sinfo_args=(R.Object,))``."""
        shape = rx.ShapeExpr([self.init_seq_len, *self.unit_shape])
        zeros = rx.Call(rx.Op.get("zeros"), [shape], {"dtype": self.dtype})
        call = _call_packed("call_pure_packed", "vm.builtin.attention_kv_cache_create",
                            [zeros, shape, rx.PrimValue(0)], ObjectStructInfo())
        return [builder.emit(call, name_hint)]

    def create(self, name_hint: str) -> list:
        """The function input ``name_hint: R.Object``."""
        return [rx.Var(name_hint, ObjectStructInfo())]

    def set_state(self, state_vars: list) -> None:
        """Adopt the cache variable."""
        (self.cache,) = state_vars

    def finalize(self) -> list:
        """The cache after the method's appends (returned by the function)."""
        result, self.cache = self.cache, None
        return [result]

    def to(self, dtype: str | None = None) -> None:
        """Change the element dtype (``None``: no change)."""
        if dtype is not None:
            self.dtype = dtype

    def view(self, seq_len: int | E.PrimExpr) -> Tensor:
        """All cached rows as a tensor of shape ``(seq_len, *unit_shape)``; ``seq_len`` is an
        int or an int64 PrimExpr."""
        shape = rx.ShapeExpr([seq_len, *self.unit_shape])
        sinfo = TensorStructInfo(shape.values, self.dtype)
        call = _call_packed("call_pure_packed", "vm.builtin.attention_kv_cache_view",
                            [self._state("view"), shape], sinfo)
        return Tensor(_expr=BlockBuilder.current().emit(call))

    def append(self, new_element: Tensor) -> None:
        """Append ``new_element`` ((k, *unit_shape) or unit_shape) in place. Raises TypeError
        for a dtype other than the cache's."""
        if new_element.dtype != self.dtype:
            raise TypeError(f'KVCache has been set to use dtype "{self.dtype}", '
                            f'but got "{new_element.dtype}"')
        call = _call_packed("call_inplace_packed", "vm.builtin.attention_kv_cache_append",
                            [self._state("append"), new_element._expr], ObjectStructInfo(),
                            inplace_indices=[0])
        self.cache = BlockBuilder.current().emit(call)

    def _state(self, what: str) -> rx.Var:
        if self.cache is None:
            raise RuntimeError(f"KVCache.{what} is only available inside an exported method")
        return self.cache


class Linear(Module):
    """``y = x @ weight.T + bias``; weight (out_features, in_features), bias (out_features,).

    ``out_dtype`` sets the matmul result dtype (and the bias dtype). Features may be symbolic
    (a string). Source: PyTorch ``nn.Linear``; TVM ``nn.Linear`` for ``out_dtype``.

    Tensor parallelism (:mod:`builder.nn.tensor_parallel`, Megatron-LM): with
    ``tensor_parallel_shards=N > 1`` and ``tensor_parallel="column"`` this worker's layer keeps
    ``out_features / N`` outputs (weight and bias sharded along dim 0); with ``"row"`` it keeps
    ``in_features / N`` inputs (weight sharded along dim 1), takes the matching slice of its input and
    all-reduces the partial products (``ccl_allreduce(sum)``) before adding the whole bias. The
    attributes ``in_features`` / ``out_features`` are this worker's sizes. Raises
    :class:`~builder.nn.tensor_parallel.ShardError` for a split size that does not divide, ValueError
    for an unknown ``tensor_parallel``.
    """

    def __init__(self, in_features: int | str | E.PrimExpr, out_features: int | str | E.PrimExpr,
                 bias: bool = True, dtype: str | None = None, out_dtype: str | None = None,
                 tensor_parallel: str | None = None, tensor_parallel_shards: int = 1) -> None:
        shards = tp.check_shards(tensor_parallel_shards)
        if tensor_parallel not in (None, *tp.TENSOR_PARALLEL_KINDS):
            raise ValueError(f"Linear: tensor_parallel must be 'column', 'row' or None, got {tensor_parallel!r}")
        if tensor_parallel == "column":
            out_features = tp.split_size(out_features, shards, "out_features", "a column-parallel Linear splits "
                                                                               "its outputs")
        elif tensor_parallel == "row":
            in_features = tp.split_size(in_features, shards, "in_features", "a row-parallel Linear splits its "
                                                                             "inputs")
        self.in_features = in_features
        self.out_features = out_features
        self.out_dtype = out_dtype
        self.tensor_parallel = tensor_parallel if shards > 1 else None
        self.tensor_parallel_shards = shards
        self.weight = Parameter((out_features, in_features), dtype)
        self.bias = Parameter((out_features,), dtype if out_dtype is None else out_dtype) if bias else None
        if self.tensor_parallel == "column":
            tp.shard_parameter(self.weight, 0, shards)
            tp.shard_parameter(self.bias, 0, shards)
        elif self.tensor_parallel == "row":
            tp.shard_parameter(self.weight, 1, shards)

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in_features) -> (..., out_features)."""
        x = op.matmul(x, op.permute_dims(self.weight), out_dtype=self.out_dtype)
        x = tp.reduce_partial_sums(x, self)
        if self.bias is not None:
            x = x + self.bias
        return x

    def to(self, dtype: str | None = None) -> None:
        """Cast the weight (and the bias, unless ``out_dtype`` fixes it)."""
        self.weight.to(dtype)
        if self.bias is not None and self.out_dtype is None:
            self.bias.to(dtype)


class LayerNorm(Module):
    """Layer normalization over the last dim (Ba et al. 2016; PyTorch ``nn.LayerNorm``).

    ``weight`` and ``bias`` (normalized_shape,) when ``elementwise_affine``.
    """

    def __init__(self, normalized_shape: int, eps: float | None = 1e-5, elementwise_affine: bool = True,
                 dtype: str | None = None) -> None:
        self.normalized_shape = normalized_shape
        self.eps = eps
        if elementwise_affine:
            self.weight = Parameter((normalized_shape,), dtype)
            self.bias = Parameter((normalized_shape,), dtype)
        else:
            self.weight = None
            self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        """x (..., normalized_shape) -> same shape."""
        return op.layer_norm(x, self.normalized_shape, self.weight, self.bias,
                             eps=1e-5 if self.eps is None else self.eps)


class RMSNorm(Module):
    """RMS normalization (Zhang & Sennrich 2019; as in LLaMA): ``x / rms(x) * (weight_offset + weight)
    (+ bias)``; Gemma stores ``weight`` as the offset from 1 (``weight_offset=1.0``), the offset added in the
    weight's dtype."""

    def __init__(self, hidden_size: int, axes: int | Sequence[int], epsilon: float = 1e-5,
                 bias: bool = True, dtype: str | None = None, weight_offset: float = 0.0) -> None:
        self.epsilon = epsilon
        self.axes = axes
        self.weight_offset = float(weight_offset)
        self.weight = Parameter((hidden_size,), dtype)
        self.bias = Parameter((hidden_size,), dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """x (..., hidden_size) -> same shape."""
        weight = self.weight if self.weight_offset == 0 else op.add(self.weight, self.weight_offset)
        out = op.rms_norm(x, weight, self.axes, self.epsilon)
        if self.bias is not None:
            out = op.add(out, self.bias)
        return out


class GroupNorm(Module):
    """Group normalization (Wu & He 2018; PyTorch ``nn.GroupNorm``, TVM's ``nn.GroupNorm``)::

        y = (x - mean_g) / sqrt(var_g + eps) * weight[c] + bias[c]

    with mean and biased variance over the channels of each of ``num_groups`` groups and every
    dim after the first two. ``x`` (N, C, *) -> same shape; ``weight`` / ``bias`` (num_channels,)
    when ``affine`` (else ones / zeros constants). Raises ValueError when ``num_channels`` is not
    divisible by ``num_groups`` (or either is < 1).
    """

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True,
                 dtype: str | None = None) -> None:
        if num_groups < 1 or num_channels < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups}), both >= 1")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        if affine:
            self.weight = Parameter((num_channels,), dtype)
            self.bias = Parameter((num_channels,), dtype)
        else:
            self.weight = None
            self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        """x (N, num_channels, *) -> same shape."""
        return op.group_norm(x, self.num_groups, self.weight, self.bias, eps=self.eps)


class _Conv1DBase(Module):
    """What both 1-D convolutions hold (as PyTorch's ``_ConvNd``): their hyper-parameters,
    ``weight`` (out, in / groups, kernel), or (in, out / groups, kernel) when ``transposed``, and
    ``bias`` (out_channels,) when ``bias``. Raises ValueError, naming ``kind``, when the channels
    are not divisible by ``groups``."""

    def __init__(self, kind: str, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 padding: int, dilation: int, groups: int, bias: bool, dtype: str | None,
                 transposed: bool) -> None:
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{kind}: channels ({in_channels} in, {out_channels} out) must be "
                             f"divisible by groups={groups}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups
        if transposed:
            self.weight = Parameter((in_channels, out_channels // groups, kernel_size), dtype)
        else:
            self.weight = Parameter((out_channels, in_channels // groups, kernel_size), dtype)
        self.bias = Parameter((out_channels,), dtype) if bias else None


class Conv1D(_Conv1DBase):
    """1-D convolution, NCW (PyTorch ``nn.Conv1d``): weight (out, in / groups, kernel), bias (out,).

    Raises ValueError when the channels are not divisible by ``groups``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = True,
                 dtype: str | None = None) -> None:
        super().__init__("Conv1D", in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, dtype, transposed=False)

    def forward(self, x: Tensor) -> Tensor:
        """x (N, in_channels, W) -> (N, out_channels, W_out)."""
        return op.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class ConvTranspose1D(_Conv1DBase):
    """1-D transposed convolution, NCW (PyTorch ``nn.ConvTranspose1d``, TVM ``nn.ConvTranspose1D``):
    weight (in_channels, out_channels / groups, kernel), bias (out_channels,).

    x (N, in_channels, W) -> (N, out_channels, (W - 1) * stride - 2 * padding
    + dilation * (kernel - 1) + output_padding + 1). Raises ValueError when the channels are
    not divisible by ``groups``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, output_padding: int = 0, dilation: int = 1, groups: int = 1,
                 bias: bool = True, dtype: str | None = None) -> None:
        super().__init__("ConvTranspose1D", in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias, dtype, transposed=True)
        self.output_padding = output_padding

    def forward(self, x: Tensor) -> Tensor:
        """x (N, in_channels, W) -> (N, out_channels, W_out)."""
        return op.conv1d_transpose(x, self.weight, self.bias, self.stride, self.padding,
                                   self.output_padding, self.dilation, self.groups)


class Embedding(Module):
    """Lookup table: weight (num, dim); integer ids (...) -> (..., dim)."""

    def __init__(self, num: int | str | E.PrimExpr, dim: int | str | E.PrimExpr, dtype: str | None = None) -> None:
        self.num = num
        self.dim = dim
        self.weight = Parameter((num, dim), dtype)

    def forward(self, x: Tensor) -> Tensor:
        """ids (...) -> embeddings (..., dim)."""
        if x.ndim == 1:
            return op.take(self.weight, x, axis=0)
        flat = op.reshape(x, [-1])
        return op.reshape(op.take(self.weight, flat, axis=0), [*x.shape, self.weight.shape[1]])


class ReLU(Module):
    """``max(x, 0)``."""

    def forward(self, x: Tensor) -> Tensor:
        """Elementwise ReLU; any shape, same dtype."""
        return op.relu(x)


class SiLU(Module):
    """``x * sigmoid(x)``."""

    def forward(self, x: Tensor) -> Tensor:
        """Elementwise SiLU; any shape, floating-point dtype."""
        return op.silu(x)


class GELU(Module):
    """GELU: exact ``x * Phi(x)`` (erf form), or with ``approximate="tanh"``
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))`` (PyTorch's names)."""

    def __init__(self, approximate: str = "none") -> None:
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        """Elementwise GELU; any shape, floating-point dtype."""
        return op.gelu(x) if self.approximate == "none" else op.gelu(x, approximate="tanh")



# --- learned tensors and 2-D convolution (recipes' Parameter and Conv2D layers) ----------------------

__all__ += ["ParameterLayer", "Conv2D"]

PARAMETER_INITS = ("normal", "zeros", "ones")
"""The random initializations a :class:`ParameterLayer` may ask for (see its ``init``)."""


class ParameterLayer(Module):
    """One learned tensor ``weight`` of ``shape`` (a recipe's ``Parameter`` layer: ViT's CLS token
    ``(1, 1, hidden)``, a learned position table ``(1, patches + 1, hidden)``).

    The recipe builder puts ``weight`` itself into the module tree under the layer's name, so the
    parameter is named as checkpoints name it (``embeddings.cls_token``). ``init`` (``normal`` with
    ``std``, ``zeros`` or ``ones``) is recorded as ``weight.attrs["init"] = (init, std)`` and read
    where random weights are drawn (``builder.build_model``); loaded weights replace it. ``forward()``
    returns the tensor. Raises ValueError for another ``init`` or a ``std`` that is not > 0.
    """

    def __init__(self, shape: Sequence[int | str | E.PrimExpr], dtype: str | None = None, init: str = "normal",
                 std: float = 0.02) -> None:
        if init not in PARAMETER_INITS:
            raise ValueError(f"Parameter: init must be one of {', '.join(PARAMETER_INITS)}, got {init!r}")
        if not std > 0:
            raise ValueError(f"Parameter: std must be > 0, got {std!r}")
        self.weight = Parameter(tuple(shape), dtype)
        self.weight.attrs["init"] = (init, float(std))

    def forward(self) -> Tensor:
        """The tensor, ``shape`` and dtype as declared."""
        return self.weight


def _pair(value: int | Sequence[int], what: str) -> tuple[int, int]:
    """``(h, w)`` from one int or two; raises ValueError for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value, value
    values = tuple(value)
    if len(values) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"Conv2D: {what} must be an int or two ints, got {value!r}")
    return values


class Conv2D(Module):
    """2-D convolution, NCHW data and OIHW weight (PyTorch ``nn.Conv2d``, TVM ``nn.Conv2D``): weight
    (out_channels, in_channels / groups, kh, kw), bias (out_channels,) when ``bias``.

    ``kernel_size`` / ``stride`` / ``padding`` / ``dilation``: an int or ``(h, w)`` (padding on both
    sides of each dim). x (N, in_channels, H, W) -> (N, out_channels, oH, oW) with
    ``oH = (H + 2 * pH - dH * (kH - 1) - 1) // sH + 1`` (likewise oW). Raises ValueError when the
    channels are not divisible by ``groups`` or a setting is not an int or two.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | Sequence[int],
                 stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0,
                 dilation: int | Sequence[int] = 1, groups: int = 1, bias: bool = True,
                 dtype: str | None = None) -> None:
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2D: channels ({in_channels} in, {out_channels} out) must be "
                             f"divisible by groups={groups}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride = _pair(stride, "stride")
        self.padding = _pair(padding, "padding")
        self.dilation = _pair(dilation, "dilation")
        self.groups = groups
        self.weight = Parameter((out_channels, in_channels // groups, *self.kernel_size), dtype)
        self.bias = Parameter((out_channels,), dtype) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """x (N, in_channels, H, W) -> (N, out_channels, oH, oW)."""
        return op.conv2d(x, self.weight, self.bias, list(self.stride), list(self.padding),
                         list(self.dilation), self.groups)
