"""Passes over IRModules: ``LegalizeOps`` (ops -> call_tir of PrimFuncs) and dead-code
elimination."""
from .legalize import LegalizeOps, call_te, dead_code_elimination

__all__ = ["LegalizeOps", "call_te", "dead_code_elimination"]
