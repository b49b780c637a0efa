"""Importers from other frameworks into our graph-level IR (``tvm.relax.frontend.torch`` /
``tvm.relax.frontend.onnx``-shaped).

- :func:`from_fx` -- a ``torch.fx.GraphModule`` (``torch.fx.symbolic_trace``) with the input shapes,
  translated node by node through maps of torch functions / Tensor methods / ``torch.nn`` modules
  (the MLC course's ``from_fx``; user maps take precedence);
- :func:`from_exported_program` -- a ``torch.export.ExportedProgram`` (ATen ops, dynamic dims from
  ``torch.export.Dim`` become symbolic dims of the same names);
- :func:`from_onnx` -- an ONNX model.

Each returns an :class:`builder.ir.IRModule` whose ``main`` takes the model's inputs only, the weights
bound inside as named constants, so ``runtime.VirtualMachine(builder.compile(mod))["main"](*inputs)``
runs it. torch (and onnx) are imported only when an importer is called: ``import builder`` works
without them.

Layout: :mod:`.fx` and :mod:`.exported_program` walk the torch graphs with a
:class:`~.translator.GraphTranslator` (:mod:`.translator`), raising the errors of :mod:`.errors`, reading
dtypes through :mod:`.dtypes`, binding weights through :mod:`.weights`, translating torch semantics with
:mod:`.torch_ops` (one module per op family, and the :data:`~.torch_ops.TORCH_OPS` table) and complex values
with :mod:`.complex`; :mod:`.onnx` is the ONNX importer (its own package: loading, the graph walk, the
converters by op family).
"""
from __future__ import annotations

from .errors import FrontendError, UnsupportedNodeError

__all__ = ["FrontendError", "UnsupportedNodeError", "from_exported_program", "from_fx", "from_onnx"]


def from_fx(fx_module, input_shapes, call_function_map=None, call_module_map=None, input_dtypes=None):
    """Translate a ``torch.fx.GraphModule``; see :func:`builder.frontend.fx.from_fx`."""
    from .fx import from_fx as impl

    return impl(fx_module, input_shapes, call_function_map=call_function_map,
                call_module_map=call_module_map, input_dtypes=input_dtypes)


def from_exported_program(exported_program, **kwargs):
    """Translate a ``torch.export.ExportedProgram``; see
    :func:`builder.frontend.exported_program.from_exported_program`."""
    from .exported_program import from_exported_program as impl

    return impl(exported_program, **kwargs)


def from_onnx(*args, **kwargs):
    """Translate an ONNX model (an ``onnx.ModelProto`` or a path) into an IRModule whose ``main``
    takes the graph's inputs; see :func:`builder.frontend.onnx.from_onnx` for the arguments, the
    covered operators and the errors raised. Imports ``onnx`` only when called."""
    from .onnx import from_onnx as impl

    return impl(*args, **kwargs)
