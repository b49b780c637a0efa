"""Load and run compiled models without the compiler: ``Executable``, ``VirtualMachine`` and
safetensors weights, and the KV cache of autoregressive decoding
(``ContiguousKVCache``). Imports numpy, llvmlite and safetensors only (never ``builder``)."""
from . import distributed  # registers the collectives' VM externs (mpi4py is imported on use)
from .executable import Executable
from .externs import register_extern
from .kv_cache import ContiguousKVCache
from .vm import VirtualMachine
from .weights import WeightsError, load_params, save_params

__all__ = ["ContiguousKVCache", "Executable", "VirtualMachine", "WeightsError", "distributed", "load_params",
           "register_extern", "save_params"]
