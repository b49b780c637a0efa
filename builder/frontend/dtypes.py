"""torch dtypes as ours (read by name: torch is never imported here) and torch's type promotion.
"""
from __future__ import annotations

from ..ir import expr as E
from ..ir.struct_info import DTYPES
from ..nn import op
from ..nn.core import Tensor
from .errors import FrontendError


_TORCH_DTYPES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64", "int": "int32",
                 "short": "int16", "uint8": "uint8", "bool": "bool", "bfloat16": "bfloat16"}


def torch_dtype(dtype) -> str:
    """Our dtype name for a ``torch.dtype`` (or a dtype string): ``torch.float32`` -> ``"float32"``.
    Raises FrontendError for a dtype we do not have (complex, float8, ...)."""
    name = str(dtype).removeprefix("torch.")
    name = _TORCH_DTYPES.get(name, name)
    if name not in DTYPES:
        raise FrontendError(f"dtype {dtype} has no equivalent here (supported: {', '.join(DTYPES)})")
    return name


def is_float(dtype: str) -> bool:
    """Whether our dtype name is a floating-point one (``float16`` / ``float32`` / ``float64`` / ``bfloat16``)."""
    return dtype.startswith(("float", "bfloat"))


def torch_promote(a: str, b: str) -> str:
    """The dtype two tensors of dtypes ``a`` and ``b`` meet at in a torch binary op (``torch.result_type``
    of two tensors): a float over an integer or bool, an integer over bool, else the wider of the two
    (:func:`builder.ir.expr.promote_dtype`)."""
    if a == b:
        return a
    if is_float(a) != is_float(b):
        return a if is_float(a) else b
    if a == "bool":
        return b
    if b == "bool":
        return a
    return E.promote_dtype(a, b)


def scalar_dtype(v) -> str:
    """The dtype a Python number takes as a tensor operand: bool, ``float32`` for a float (torch's default dtype),
    ``int64`` for an int."""
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, float):
        return "float32"
    return "int64"


def as_dtype(x: Tensor, dtype: str) -> Tensor:
    """``x`` cast to ``dtype`` (:func:`builder.nn.op.astype`), or ``x`` itself when it has that dtype already; same
    shape."""
    return x if x.dtype == dtype else op.astype(x, dtype)


def dtype_or(dtype, default: str) -> str:
    """Our name of the torch dtype ``dtype`` (:func:`torch_dtype`), ``default`` when it is None. Raises FrontendError
    for a dtype we do not have."""
    return default if dtype is None else torch_dtype(dtype)


def is_dtype(v) -> bool:
    """Whether ``v`` is a ``torch.dtype`` (told by its class name and text: torch is not imported here)."""
    return type(v).__name__ == "dtype" and str(v).startswith("torch.")
