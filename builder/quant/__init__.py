"""Recipe-declared parameter transforms, applied to the module tree by ``Mutator``\\ s before
export. Today: the plain dtype cast of a recipe's top-level ``dtype:``."""
from .dtype import DTypeCast, apply_transforms

__all__ = ["DTypeCast", "apply_transforms"]
