"""Load and run compiled models without the compiler: ``Executable``, ``VirtualMachine`` and
safetensors weights. Imports numpy, llvmlite and safetensors only (never ``builder``)."""
from .executable import Executable
from .vm import VirtualMachine, register_extern
from .weights import WeightsError, load_params, save_params

__all__ = ["Executable", "VirtualMachine", "WeightsError", "load_params", "register_extern",
           "save_params"]
