"""Recipe schema: strict pydantic models of a YAML recipe and a loader that reports every problem at once.

>>> recipe = load_recipe("recipes/llama_mlp.yaml", overrides=["hidden_size=512"])  # doctest: +SKIP
"""

from .dump import dump_recipe
from .errors import RecipeError, RecipeIssue
from .loader import load_recipe, load_recipe_text
from .models import (
    DTYPES,
    LAYER_TYPES,
    LayerEntry,
    QUANTIZATION_KINDS,
    QUANTIZATION_PRESETS,
    STORAGE_BITS,
    FloatDType,
    GroupQuantization,
    NoQuantization,
    PerChannelQuantization,
    Quantization,
    QuantizationSpec,
    register_quantization_preset,
    resolve_quantization,
    GELU,
    Conv1D,
    DType,
    Dim,
    Embedding,
    Identifier,
    InputSpec,
    LayerNorm,
    Linear,
    ModelDef,
    Recipe,
    ReLU,
    RMSNorm,
    SiLU,
    StrictModel,
    WeightsDef,
)
from .layers import layer_union, register_layer_model, unregister_layer_model
from .source import FieldPath, SourceMap, format_path

__all__ = [
    "DTYPES", "LAYER_TYPES", "QUANTIZATION_KINDS", "QUANTIZATION_PRESETS", "STORAGE_BITS", "FloatDType",
    "GroupQuantization", "NoQuantization", "PerChannelQuantization", "Quantization", "QuantizationSpec",
    "register_quantization_preset", "resolve_quantization", "Conv1D", "DType", "Dim", "Embedding", "FieldPath", "GELU",
    "Identifier", "InputSpec", "LayerEntry", "LayerNorm", "Linear", "ModelDef", "RMSNorm", "Recipe", "RecipeError",
    "RecipeIssue", "ReLU", "SiLU", "SourceMap", "StrictModel", "WeightsDef", "format_path", "load_recipe",
    "load_recipe_text", "dump_recipe", "layer_union", "register_layer_model", "unregister_layer_model",
]
