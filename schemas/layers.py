"""The layer entries of recipes: :class:`LayerEntry`, the built-in layer models and the registry of layer types.

A layer type is a :class:`LayerEntry` subclass with a ``type: Literal["Name"] = "Name"`` field and its own
settings, registered with :func:`register_layer_model` (a class decorator, as the built-in ones below use it).
``layers:`` entries are validated by :func:`layer_union`, a union told apart by ``type`` that reads the registry
(:data:`LAYER_TYPES`): a registered model is a valid ``type`` at once (the recipe models that hold layers rebuild
themselves, :func:`on_layer_types_changed`), and any other ``type`` names a block of the recipe
(:class:`BlockLayer`). The ``builder.nn`` module a layer type builds is tied to its model on the builder side
(``builder.layers.register_layer``, which registers the model here too): ``schemas`` never imports ``builder``.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal, Optional, Union, get_args, get_origin

from pydantic import Discriminator, Field, Tag, model_validator
from pydantic_core import PydanticCustomError

from core.limits import MAX_DIM, MAX_NDIM

from .fields import Axes, Dim, DType, Identifier, StrictModel, is_identifier

__all__ = ["LayerEntry", "BlockLayer", "ENTRY_FIELDS", "LAYER_TYPES", "register_layer_model", "unregister_layer_model",
           "on_layer_types_changed", "layer_type_name", "layer_union", "Linear", "LayerNorm", "RMSNorm", "Conv1D",
           "ConvTranspose1D", "Embedding", "GroupNorm", "RopeScaling", "Attention", "ReLU", "SiLU", "GELU"]

MAX_REPEAT = 4096
"""The most copies one ``repeat:`` may make (a 4096-layer model is far beyond any real one)."""

Repeat = Annotated[int, Field(ge=1, le=MAX_REPEAT)]
"""``repeat:`` of a layer entry: how many copies its ``nn.ModuleList`` holds."""


class LayerEntry(StrictModel):
    """Fields every entry of ``layers:`` has besides its type's own: ``repeat: N`` makes an
    ``nn.ModuleList`` of N independent copies (parameters ``name.0.*`` ... ``name.{N-1}.*``, as
    PyTorch names them); ``forward:`` calls it as a chain (``h = layers(h, mask)``: each copy takes the
    previous one's result as its first argument and the other arguments unchanged) or indexes one
    copy (``layers[0](h)``)."""

    repeat: Optional[Repeat] = None


ENTRY_FIELDS = ("type", "repeat")
"""The fields of a layer entry that are not settings of its layer (what ``builder.layers`` does not pass on)."""

LAYER_TYPES: dict[str, type[LayerEntry]] = {}
"""The registered layer models by their ``type`` name, in registration order (the built-in ones first); any
other ``type`` of a layer entry names a block of the recipe. Change it only with :func:`register_layer_model` /
:func:`unregister_layer_model`."""

_RESERVED_TYPE_NAMES = frozenset({"block"})   # the union's tag of block instances
_LISTENERS: list[Callable[[], None]] = []


def layer_type_name(model: Any) -> str:
    """The ``type`` name of the layer model ``model``: the one value of its ``type: Literal["Name"] = "Name"``
    field. Raises TypeError when ``model`` is not a :class:`LayerEntry` subclass or has no such field."""
    if not (isinstance(model, type) and issubclass(model, LayerEntry)):
        raise TypeError(f"a layer model must be a schemas.LayerEntry subclass, got {model!r}")
    field = model.model_fields.get("type")
    args = get_args(field.annotation) if field is not None and get_origin(field.annotation) is Literal else ()
    if len(args) != 1 or not isinstance(args[0], str) or field.default != args[0]:
        raise TypeError(f"layer model {model.__name__} needs a field `type: Literal[\"Name\"] = \"Name\"` naming "
                        "its layer type")
    return args[0]


def register_layer_model(model: type[LayerEntry]) -> type[LayerEntry]:
    """Make ``model`` a layer type of recipes under its ``type`` name (:func:`layer_type_name`); returns
    ``model``, so it is usable as a class decorator. Registering the same model again does nothing.

    Raises TypeError for a model without a one-name ``type`` Literal (see :func:`layer_type_name`), ValueError
    for a name that is not an identifier, is reserved (``block``) or is taken by another model.
    """
    name = layer_type_name(model)
    if not is_identifier(name) or name in _RESERVED_TYPE_NAMES:
        raise ValueError(f"layer type name {name!r} of {model.__name__} must be an identifier other than "
                         f"{', '.join(sorted(_RESERVED_TYPE_NAMES))}")
    taken = LAYER_TYPES.get(name)
    if taken is model:
        return model
    if taken is not None:
        raise ValueError(f"layer type {name!r} is already registered by {taken.__module__}.{taken.__qualname__}; "
                         f"cannot register {model.__module__}.{model.__qualname__} under the same name")
    LAYER_TYPES[name] = model
    try:
        _changed()
    except Exception:
        del LAYER_TYPES[name]
        _changed()
        raise
    return model


def unregister_layer_model(name: str) -> type[LayerEntry]:
    """Remove the layer type ``name`` (a test's own layer, say); returns its model. Raises KeyError for a name
    that is not registered."""
    if name not in LAYER_TYPES:
        raise KeyError(f"no layer type {name!r} is registered")
    model = LAYER_TYPES.pop(name)
    _changed()
    return model


def on_layer_types_changed(callback: Callable[[], None]) -> None:
    """Call ``callback()`` after every change of :data:`LAYER_TYPES` (the recipe models holding layers
    rebuild their validators with it)."""
    _LISTENERS.append(callback)


def _changed() -> None:
    for callback in _LISTENERS:
        callback()


#: Sizes and settings that must be >= 1 / >= 0, and a norm's epsilon (finite, >= 0).
Positive = Annotated[int, Field(ge=1, le=MAX_DIM)]
NonNegative = Annotated[int, Field(ge=0, le=MAX_DIM)]
Epsilon = Annotated[float, Field(ge=0, allow_inf_nan=False)]


@register_layer_model
class Linear(LayerEntry):
    """Fully connected layer ``x @ weight.T + bias`` (``tvm.relax.frontend.nn.Linear``)."""

    type: Literal["Linear"] = "Linear"
    in_features: Dim
    out_features: Dim
    bias: bool = True
    dtype: Optional[DType] = None
    out_dtype: Optional[DType] = None
    tensor_parallel: Optional[Literal["column", "row"]] = None
    """How the layer splits when the recipe sets ``tensor_parallel_shards: N`` (Megatron-LM, Shoeybi et al.
    2019): ``column`` splits ``out_features`` (each worker computes a slice of the outputs: q/k/v, gate /
    up projections), ``row`` splits ``in_features`` and sums the workers' partial products with
    ``ccl_allreduce`` (o_proj, down_proj; takes a column-split input). Unset: every worker holds the whole
    layer (replicated)."""


@register_layer_model
class LayerNorm(LayerEntry):
    """Layer normalisation over the last axis (``tvm.relax.frontend.nn.LayerNorm``)."""

    type: Literal["LayerNorm"] = "LayerNorm"
    normalized_shape: Positive
    eps: Epsilon = 1e-5
    elementwise_affine: bool = True
    dtype: Optional[DType] = None


@register_layer_model
class RMSNorm(LayerEntry):
    """Root-mean-square normalisation (``tvm.relax.frontend.nn.RMSNorm``); ``weight_offset`` scales by
    ``(weight_offset + weight)`` (Gemma's ``1 + weight``: ``weight_offset: 1.0``)."""

    type: Literal["RMSNorm"] = "RMSNorm"
    hidden_size: Positive
    axes: Axes = -1
    epsilon: Epsilon = 1e-5
    bias: bool = False
    weight_offset: Annotated[float, Field(allow_inf_nan=False)] = 0.0
    dtype: Optional[DType] = None


def _groups_divide_channels(conv: "LayerEntry") -> "LayerEntry":
    """``conv`` (a convolution entry) when ``groups`` divides both channel counts; raises the ``conv_groups``
    validation error naming the side that it does not divide."""
    for side in ("in_channels", "out_channels"):
        if getattr(conv, side) % conv.groups:
            raise PydanticCustomError(
                "conv_groups", "{side} ({n}) must be a multiple of groups ({g})",
                {"side": side, "n": getattr(conv, side), "g": conv.groups})
    return conv


@register_layer_model
class Conv1D(LayerEntry):
    """1-D convolution over ``(batch, channels, length)`` input (``tvm.relax.frontend.nn.Conv1D``)."""

    type: Literal["Conv1D"] = "Conv1D"
    in_channels: Positive
    out_channels: Positive
    kernel_size: Positive
    stride: Positive = 1
    padding: NonNegative = 0
    dilation: Positive = 1
    groups: Positive = 1
    bias: bool = True
    dtype: Optional[DType] = None

    @model_validator(mode="after")
    def _groups_divide_channels(self) -> "Conv1D":
        return _groups_divide_channels(self)


@register_layer_model
class ConvTranspose1D(Conv1D):
    """1-D transposed convolution over ``(batch, channels, length)`` input (``tvm.relax.frontend.nn.ConvTranspose1D``,
    PyTorch ``nn.ConvTranspose1d``): Conv1D's fields and ``output_padding``."""

    type: Literal["ConvTranspose1D"] = "ConvTranspose1D"
    output_padding: NonNegative = 0


@register_layer_model
class Embedding(LayerEntry):
    """Lookup table of ``num`` vectors of size ``dim`` (``tvm.relax.frontend.nn.Embedding``)."""

    type: Literal["Embedding"] = "Embedding"
    num: Dim
    dim: Dim
    dtype: Optional[DType] = None


@register_layer_model
class GroupNorm(LayerEntry):
    """Group normalisation over ``(batch, channels, ...)`` input (Wu & He 2018; PyTorch ``nn.GroupNorm``,
    ``tvm.relax.frontend.nn.GroupNorm``)."""

    type: Literal["GroupNorm"] = "GroupNorm"
    num_groups: Positive
    num_channels: Positive
    eps: Epsilon = 1e-5
    affine: bool = True
    dtype: Optional[DType] = None

    @model_validator(mode="after")
    def _groups_divide_channels(self) -> "GroupNorm":
        if self.num_channels % self.num_groups:
            raise PydanticCustomError("group_norm", "num_channels ({c}) must be a multiple of num_groups ({g})",
                                      {"c": self.num_channels, "g": self.num_groups})
        return self


class RopeScaling(StrictModel):
    """A scaling of the rotary embeddings' frequencies, in HF transformers' ``rope_parameters`` keys:
    ``linear`` (position interpolation: every frequency divided by ``factor``) or ``llama3`` (Llama 3.1 /
    3.2: long wavelengths divided by ``factor``, short ones kept, the ones between interpolated; needs the
    three other fields). Formulas: ``builder.nn.op.rope_scaled_inv_freq``."""

    rope_type: Literal["linear", "llama3"]
    factor: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    low_freq_factor: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None
    high_freq_factor: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None
    original_max_position_embeddings: Optional[Positive] = None

    @model_validator(mode="after")
    def _check_llama3(self) -> "RopeScaling":
        if self.rope_type == "llama3":
            missing = [k for k in ("low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
                       if getattr(self, k) is None]
            if missing:
                raise PydanticCustomError("rope_scaling", "llama3 scaling needs {missing}",
                                          {"missing": ", ".join(missing)})
            if not self.high_freq_factor > self.low_freq_factor:
                raise PydanticCustomError("rope_scaling", "high_freq_factor ({h}) must exceed low_freq_factor ({lo})",
                                          {"h": self.high_freq_factor, "lo": self.low_freq_factor})
        return self


@register_layer_model
class Attention(LayerEntry):
    """Multi-head or grouped-query self-attention (``builder.nn.Attention``): ``q_proj`` / ``k_proj`` /
    ``v_proj`` / ``o_proj`` Linear layers (HF Llama names), optional RoPE (``rope_theta``), causal or
    bidirectional, an optional padding mask and KV cache at call time.

    ``head_dim`` defaults to ``hidden_size // num_heads`` and ``num_kv_heads`` to ``num_heads``
    (multi-head); fewer KV heads is GQA (Ainslie et al. 2023) and must divide ``num_heads``."""

    type: Literal["Attention"] = "Attention"
    hidden_size: Positive
    num_heads: Positive
    num_kv_heads: Optional[Positive] = None
    head_dim: Optional[Positive] = None
    bias: bool = False
    """Biases on ``q_proj`` / ``k_proj`` / ``v_proj`` (and ``o_proj`` unless ``out_bias`` says otherwise)."""
    out_bias: Optional[bool] = None
    """The bias of ``o_proj`` (default: ``bias``)."""
    key_bias: Optional[bool] = None
    """The bias of ``k_proj`` (default: ``bias``; false in Whisper, whose ``k_proj`` alone has none)."""
    rope_theta: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None
    rope_scaling: Optional[RopeScaling] = None
    """A scaling of the rotary frequencies (Llama 3.1 / 3.2's ``llama3``, ``linear``); needs ``rope_theta``."""
    causal: bool = False
    scale: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None
    """The score multiplier (default ``1 / sqrt(head_dim)``; T5 uses 1.0, Gemma ``query_pre_attn_scalar ** -0.5``)."""
    rotary_dim: Optional[Positive] = None
    """RoPE on the first ``rotary_dim`` dims of each head only (even, at most ``head_dim``; GPT-NeoX
    ``rotary_pct * head_dim``, Phi-2 ``partial_rotary_factor * head_dim``); needs ``rope_theta``."""
    fused_qkv: bool = False
    """One Linear ``qkv_proj`` ((num_heads + 2 * num_kv_heads) * head_dim outputs: q's rows, then k's, then
    v's, HF Phi-3's layout) in place of ``q_proj`` / ``k_proj`` / ``v_proj``; refused with
    ``tensor_parallel_shards`` > 1 unless ``tensor_parallel: false``."""
    qk_norm: Union[bool, Literal["rms"]] = False
    """RMSNorm over ``head_dim`` of each query and key head after the projection, before RoPE (``true`` or
    ``rms``; HF Qwen3's ``q_norm`` / ``k_norm``, weights (head_dim,))."""
    qk_norm_eps: Epsilon = 1e-6
    """The epsilon of ``qk_norm`` (HF ``rms_norm_eps``)."""
    logit_softcap: Optional[Annotated[float, Field(gt=0, allow_inf_nan=False)]] = None
    """Scores become ``cap * tanh(scores / cap)`` before the mask and softmax (Gemma 2's
    ``attn_logit_softcapping``)."""
    sliding_window: Optional[Positive] = None
    """Sliding-window attention (needs ``causal``): query ``i`` sees keys ``i - W < j <= i``, its own
    token included (HF Mistral / Qwen2 / Gemma 2 ``sliding_window``), with or without the KV cache."""
    dtype: Optional[DType] = None
    tensor_parallel: bool = True
    """With ``tensor_parallel_shards: N``, split the heads across the workers (``q/k/v_proj`` by columns,
    ``o_proj`` by rows + ``ccl_allreduce``); ``false`` keeps the whole layer on every worker."""

    @model_validator(mode="after")
    def _check_heads(self) -> "Attention":
        if self.rope_scaling is not None and self.rope_theta is None:
            raise PydanticCustomError("rope_scaling", "rope_scaling needs rope_theta (rotary embeddings)", {})
        if self.rotary_dim is not None:
            head_dim = self.head_dim or self.hidden_size // self.num_heads
            if self.rope_theta is None or self.rotary_dim % 2 or self.rotary_dim > head_dim:
                raise PydanticCustomError(
                    "rotary_dim", "rotary_dim ({r}) must be even, at most head_dim ({d}), and needs rope_theta",
                    {"r": self.rotary_dim, "d": head_dim})
        if self.sliding_window is not None and not self.causal:
            raise PydanticCustomError("sliding_window", "sliding_window needs causal: true (the window ends at "
                                      "the query's own token)", {})
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise PydanticCustomError(
                "attention_heads", "hidden_size ({h}) must be a multiple of num_heads ({n}), or set head_dim",
                {"h": self.hidden_size, "n": self.num_heads})
        kv = self.num_kv_heads if self.num_kv_heads is not None else self.num_heads
        if self.num_heads % kv:
            raise PydanticCustomError(
                "attention_heads", "num_heads ({n}) must be a multiple of num_kv_heads ({kv}): each KV head "
                "serves a whole group of query heads", {"n": self.num_heads, "kv": kv})
        return self


@register_layer_model
class ReLU(LayerEntry):
    """Rectified linear unit activation."""

    type: Literal["ReLU"] = "ReLU"


@register_layer_model
class SiLU(LayerEntry):
    """Sigmoid linear unit activation ``x * sigmoid(x)``."""

    type: Literal["SiLU"] = "SiLU"


@register_layer_model
class GELU(LayerEntry):
    """Gaussian error linear unit activation: exact (erf, ``approximate: none``) or the tanh form
    (``approximate: tanh``, GPT-2's ``gelu_new``, PyTorch's ``approximate="tanh"``)."""

    type: Literal["GELU"] = "GELU"
    approximate: Literal["none", "tanh"] = "none"


def _not_a_layer_type(schema: dict[str, Any]) -> None:
    """The JSON schema of a block instance's ``type``: no registered layer type's name."""
    schema["not"] = {"enum": list(LAYER_TYPES)}


class BlockLayer(LayerEntry):
    """A layer whose ``type`` names one of the recipe's ``blocks:``: an instance of that block (its own
    layers and forward), optionally ``repeat``-ed."""

    type: Annotated[Identifier, Field(json_schema_extra=_not_a_layer_type)]
    types: Optional[list[Identifier]] = None
    """With ``repeat``, the block of each copy (instances of one block with ``args:`` given ``per_layer``
    values, :mod:`schemas.block_args`); ``type`` is the first. Written by the loader, and by hand it works too."""

    @model_validator(mode="after")
    def _types_per_copy(self) -> "BlockLayer":
        if self.types is not None and len(self.types) != (self.repeat or 0):
            raise ValueError(f"types names the block of each copy: {self.repeat or 0} (repeat) of them, "
                             f"got {len(self.types)}")
        return self


def _layer_tag(value: Any) -> Optional[str]:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if not isinstance(kind, str):
        return None
    return kind if kind in LAYER_TYPES else "block"


def layer_union() -> Any:
    """The type of one entry of ``layers:`` for the layer types registered now: a registered layer model
    chosen by its ``type`` key, or an instance of a block (:class:`BlockLayer`) for any other ``type``.
    Validation errors: ``layer_type_missing`` when ``type`` is missing or not a string."""
    choices = tuple(Annotated[cls, Tag(name)] for name, cls in LAYER_TYPES.items())
    return Annotated[
        Union[choices + (Annotated[BlockLayer, Tag("block")],)],
        Discriminator(_layer_tag, custom_error_type="layer_type_missing",
                      custom_error_message="missing required field 'type'"),
    ]


# --- learned tensors and 2-D convolution (issue 42: ViT's patch embedding, CLS token, position table) ----

__all__ += ["Parameter", "Conv2D"]

Pair = Annotated[Union[Positive, Annotated[list[Positive], Field(min_length=2, max_length=2)]],
                 Field(union_mode="left_to_right")]
"""A 2-D setting: one size for both spatial dims, or ``[height, width]``."""

NonNegativePair = Annotated[Union[NonNegative, Annotated[list[NonNegative], Field(min_length=2, max_length=2)]],
                            Field(union_mode="left_to_right")]
"""A 2-D padding: one for every side, or ``[height, width]`` (each on both sides)."""


@register_layer_model
class Parameter(LayerEntry):
    """One learned tensor of ``shape`` (static sizes, at most ``MAX_NDIM`` dims), named by the layer itself
    (a layer ``cls_token`` of block ``embeddings`` is the checkpoint's ``embeddings.cls_token``, not
    ``...cls_token.weight``): ``forward:`` reads it by its name as a value (``cat([cls, h], axis=1)``), it is
    never called. ``init`` says what random weights (no weights file) it gets: ``normal`` (N(0, std^2)),
    ``zeros`` or ``ones``; a checkpoint's tensor replaces it as any parameter's does. ``repeat`` is refused
    (a stack of tensors is one Parameter with one more dim)."""

    type: Literal["Parameter"] = "Parameter"
    shape: Annotated[list[Positive], Field(max_length=MAX_NDIM)]
    dtype: Optional[DType] = None
    init: Literal["normal", "zeros", "ones"] = "normal"
    std: Annotated[float, Field(gt=0, allow_inf_nan=False)] = 0.02
    """The standard deviation of ``init: normal`` (the random weights of every other parameter use 0.02)."""

    @model_validator(mode="after")
    def _no_repeat(self) -> "Parameter":
        if self.repeat is not None:
            raise PydanticCustomError("parameter_repeat", "a Parameter layer cannot be repeated; give its shape "
                                      "one more dim instead", {})
        return self


@register_layer_model
class Conv2D(LayerEntry):
    """2-D convolution over ``(batch, channels, height, width)`` input (``tvm.relax.frontend.nn.Conv2D``,
    PyTorch ``nn.Conv2d``): weight ``(out_channels, in_channels / groups, kh, kw)``, bias ``(out_channels,)``.
    ``kernel_size``, ``stride``, ``padding`` and ``dilation`` are one int or ``[h, w]``."""

    type: Literal["Conv2D"] = "Conv2D"
    in_channels: Positive
    out_channels: Positive
    kernel_size: Pair
    stride: Pair = 1
    padding: NonNegativePair = 0
    dilation: Pair = 1
    groups: Positive = 1
    bias: bool = True
    dtype: Optional[DType] = None

    @model_validator(mode="after")
    def _groups_divide_channels(self) -> "Conv2D":
        return _groups_divide_channels(self)


# --- one slot of the runtime KV cache (issue 42: attention written out in forward:) -------------------------

__all__ += ["KVCache"]


@register_layer_model
class KVCache(LayerEntry):
    """One layer of the runtime KV cache and the attention over it (``builder.nn.KVCacheLayer``, no
    parameters), for attention written out in ``forward:``: ``o = kv(q, k, v, cache=cache,
    total_seq_len=total_seq_len, attn_mask=bias, causal_mask="BottomRight")`` takes the new tokens' q (batch,
    seq, heads, head_dim) and k / v (batch, seq, num_kv_heads, head_dim), appends k / v to the cache and returns
    the attention over every key the row holds, read from the cache's blocks (batch, seq, heads, head_dim);
    without a cache the attention over k / v. ``attn_mask`` (bool, or a float bias added to the scores)
    broadcasts to (batch, heads, seq, seq_kv), column ``j`` the key at position ``j``: ``seq_kv`` is
    ``total_seq_len`` with a cache and ``seq`` without. Also ``scale``, ``window_size``, ``logit_softcap``.
    Its slot is numbered with the ``Attention`` layers'."""

    type: Literal["KVCache"] = "KVCache"
    num_kv_heads: Positive
    head_dim: Positive
