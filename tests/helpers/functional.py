"""A function of tensors as an ``nn.Module`` to export or compile: the op tests' shared harness."""
import inspect

from builder import nn


class Fn(nn.Module):
    """A module whose ``forward(<names>)`` is ``fn(*inputs)`` (the signature names the spec's inputs,
    as the exporter checks them)."""

    def __init__(self, fn, names):
        def forward(*args):
            return fn(*args)

        forward.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names])
        self.forward = forward


def spec_of(**inputs):
    """``{"forward": {name: nn.spec.Tensor(shape, dtype)}}`` from ``name=(shape, dtype)``."""
    return {"forward": {k: nn.spec.Tensor(list(s), d) for k, (s, d) in inputs.items()}}


def jit_kernels(fn, **inputs):
    """``(callable, {kernel name: kernel family})`` of ``fn`` compiled for ``inputs`` (``name=(shape,
    dtype)``): the families say which kernels (``linear/avx512``, ``loops``) the build chose."""
    m = Fn(fn, list(inputs)).jit(spec_of(**inputs))
    return m["forward"], {name: k["kernel"] for name, k in m.exe.kernels.items()}


def jit(fn, **inputs):
    """``fn`` compiled for ``inputs`` (``name=(shape, dtype)``), callable on numpy arrays."""
    return Fn(fn, list(inputs)).jit(spec_of(**inputs))["forward"]


def exported(fn, **inputs):
    """The IRModule of ``fn`` exported for ``inputs``."""
    mod, _ = Fn(fn, list(inputs)).export_tvm(spec_of(**inputs))
    return mod


def export(fn, **inputs) -> str:
    """The printed IRModule of ``fn`` exported for ``inputs``."""
    return exported(fn, **inputs).script()
