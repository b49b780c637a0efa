"""Recipe-declared parameter transforms, applied to the module tree by ``Mutator``\\ s before
export: a dtype cast (``dtype:``, or the ``q0f16`` / ``q0f32`` / ``q0bf16`` presets) and weight
quantization (``quantization:`` a preset name such as ``q4f16_1`` or a full spec).

    from builder.quant import resolve, apply_transforms, QuantizeMapping
    mapping = QuantizeMapping()
    module = apply_transforms(module, recipe, mapping)    # Linear -> QuantizedLinear, casts
    mapping.param_map["gate_proj.weight"]                 # ['gate_proj.q_weight', 'gate_proj.q_scale']

Pieces: :mod:`.config` (specs, presets, :class:`QuantLayout`: a weight's
:class:`~builder.ir.quant_format.QuantFormat` and its input features), :mod:`.packing` (numpy
quantize / pack / dequantize), :mod:`.modules` (QuantizedLinear / QuantizedEmbedding),
:mod:`.quantize` (the Mutators), :mod:`.mapping` (the parameter mapping), :mod:`.dtype` (the
cast and :func:`apply_transforms`), :mod:`.constants` (:func:`quantize_constants`: the constant weights of an
imported module).
"""
from .config import (
    KINDS, PRESETS, GroupQuantization, GroupSizeError, NoQuantization, PerChannelQuantization, QuantFormat,
    QuantizationSpec, QuantLayout, describe, is_quantizing, preset_name, register_preset, resolve, spec_format,
)
from .constants import quantize_constants
from .dtype import DTypeCast, apply_transforms, model_dtype
from .mapping import QuantizeMapping
from .modules import QuantizedEmbedding, QuantizedLinear
from .packing import cast_array, dequantize_weight, from_float32, pack_bits, quantize_weight, to_float32, unpack_bits
from .quantize import GroupQuantizeMutator, PerChannelQuantizeMutator, QuantizeMutator, quantize_mutator

__all__ = [
    "quantize_constants",
    "KINDS", "PRESETS", "GroupQuantization", "GroupSizeError", "NoQuantization", "PerChannelQuantization", "QuantizationSpec",
    "QuantLayout", "QuantFormat", "spec_format", "describe", "is_quantizing", "preset_name", "register_preset", "resolve", "DTypeCast",
    "apply_transforms", "model_dtype", "QuantizeMapping", "QuantizedEmbedding", "QuantizedLinear", "cast_array",
    "dequantize_weight", "from_float32", "pack_bits", "quantize_weight", "to_float32", "unpack_bits",
    "GroupQuantizeMutator", "PerChannelQuantizeMutator", "QuantizeMutator", "quantize_mutator",
]
