"""The parameter mapping of a transform (MLC-LLM's ``QuantizeMapping``, with numpy functions):
each floating-point parameter name of the untransformed model -> the names it becomes and a
function that computes them from its float32 values.

    mapping.param_map["gate_proj.weight"] == ["gate_proj.q_weight", "gate_proj.q_scale"]
    q_weight, q_scale = mapping.map_func["gate_proj.weight"](w_float32)

A dtype cast maps a name to itself (``"norm.weight" -> ["norm.weight"]``). Parameters the
transforms leave alone are not in the mapping.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from runtime.weights import ParamConversion

from .packing import from_float32, to_float32

__all__ = ["QuantizeMapping"]

MapFunc = Callable[[np.ndarray], Sequence[np.ndarray]]


@dataclass
class QuantizeMapping:
    """Float parameter name -> new names (``param_map``) and the numpy function producing them
    from the float32 weight (``map_func``).

    ``source_specs``: float name -> (shape, dtype) in the model before the transforms (the
    checkpoint's layout); ``float_specs``: every parameter of that model, in order, as
    ``(name, shape, dtype)``; ``row_tiles``: transformed parameter name -> ``T`` for the packed
    words and scales stored in row tiles (a file may hold them row-major: :func:`runtime.load_params`).
    """

    param_map: dict[str, list[str]] = field(default_factory=dict)
    map_func: dict[str, MapFunc] = field(default_factory=dict)
    source_specs: dict[str, tuple[tuple, str]] = field(default_factory=dict)
    float_specs: list[tuple[str, tuple, str]] = field(default_factory=list)
    row_tiles: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, new_names: Sequence[str], func: MapFunc, shape: Sequence, dtype: str) -> None:
        """Map float parameter ``name`` (``shape``; ``dtype`` before any transform, taken from
        ``float_specs`` when it lists the name) to ``new_names`` computed by ``func``; replaces an
        earlier entry (a quantization after a dtype cast)."""
        original = {n: d for n, _, d in self.float_specs}
        self.param_map[name] = list(new_names)
        self.map_func[name] = func
        self.source_specs[name] = (tuple(shape), original.get(name, dtype))

    def add_cast(self, name: str, shape: Sequence, src_dtype: str, dst_dtype: str) -> None:
        """Map ``name`` to itself, converted from ``src_dtype`` to ``dst_dtype``."""
        self.add(name, [name], lambda w, _d=dst_dtype: [from_float32(w, _d)], shape, src_dtype)

    @property
    def quantized(self) -> list[str]:
        """Float names that are replaced by other names (quantized), in mapping order."""
        return [n for n, new in self.param_map.items() if new != [n]]

    def conversions(self) -> dict[str, ParamConversion]:
        """The mapping as :func:`runtime.load_params` conversions (float name -> targets + function)."""
        return {name: ParamConversion(tuple(new), self.map_func[name], self.source_specs[name][0])
                for name, new in self.param_map.items()}

    def apply(self, float_params: Mapping[str, np.ndarray], target_specs: Iterable[tuple[str, tuple, str]],
              progress: Callable[[int, int, str], None] | None = None) -> dict[str, np.ndarray]:
        """Transformed parameters from the untransformed ones.

        ``float_params``: name -> array in the dtypes of ``float_specs`` (bfloat16 as uint16
        bits); ``target_specs``: the transformed model's ``(name, shape, dtype)``, in order.
        Mapped names go through their function; the others pass through unchanged. ``progress(done,
        total, name)`` is called after each mapped parameter. Raises ValueError naming the
        parameter when a function returns the wrong number of arrays or a wrong shape / dtype,
        KeyError for a missing input.
        """
        dtypes = {n: d for n, _, d in self.float_specs}
        targets = {n: (tuple(s), d) for n, s, d in target_specs}
        out: dict[str, np.ndarray] = {}
        total, done = len(self.param_map), 0
        for name, new_names in self.param_map.items():
            w = to_float32(float_params[name], dtypes.get(name, self.source_specs[name][1]))
            arrays = list(self.map_func[name](w))
            check_outputs(name, new_names, arrays, targets)
            out.update(zip(new_names, arrays))
            done += 1
            if progress is not None:
                progress(done, total, name)
        for name, (shape, dtype) in targets.items():
            if name not in out:
                out[name] = float_params[name]
        return {name: out[name] for name in targets}


def check_outputs(name: str, new_names: Sequence[str], arrays: Sequence[np.ndarray],
                  targets: Mapping[str, tuple[tuple, str]]) -> None:
    """Raise ValueError unless ``arrays`` match ``targets[new_name]`` (shape, dtype) one to one."""
    if len(arrays) != len(new_names):
        raise ValueError(f"mapping of '{name}' returned {len(arrays)} arrays for {len(new_names)} names "
                         f"{new_names}")
    for new, a in zip(new_names, arrays):
        if new not in targets:
            raise ValueError(f"mapping of '{name}' produces '{new}', which the model does not have")
        shape, dtype = targets[new]
        np_dtype = np.uint16 if dtype == "bfloat16" else np.dtype(dtype)
        if tuple(a.shape) != tuple(shape) or a.dtype != np_dtype:
            raise ValueError(f"mapping of '{name}' produced '{new}' with shape {tuple(a.shape)} {a.dtype}, "
                             f"the model expects {tuple(shape)} {dtype}")
