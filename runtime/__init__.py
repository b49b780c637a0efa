"""Load and run compiled models without the compiler: ``Executable``, ``VirtualMachine`` and
safetensors weights, artifact folders (``load_artifact``: ``build --save-exe DIR``'s) and the KV cache of
autoregressive decoding (``PagedKVCache``, ``ContiguousKVCache``). Imports numpy, llvmlite and safetensors only
(never ``builder``)."""
from . import distributed  # registers the collectives' VM externs (mpi4py is imported on use)
from .artifact import Artifact, ArtifactError, load_artifact
from .executable import Executable
from .externs import register_extern
from .kv_cache import ContiguousKVCache, KVCacheFullError, PagedKVCache
from .vm import VirtualMachine
from .weights import WeightsError, load_params, save_params

__all__ = ["Artifact", "ArtifactError", "ContiguousKVCache", "Executable", "KVCacheFullError", "PagedKVCache",
           "VirtualMachine", "WeightsError", "distributed", "load_artifact", "load_params", "register_extern",
           "save_params"]
