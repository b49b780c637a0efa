"""A hand-written ``nn.op`` function may not silently shadow the function an elementwise / broadcast op
record gets made (issue 41: ``nn/op/nn.py``'s ``softsign`` would have hidden a new ``softsign``
record): the collision is an ImportError naming both, unless the function is marked
``@replaces_record``; a stale mark and two families writing the same name fail as well."""
import subprocess
import sys
import textwrap
import types

import pytest

from builder import nn
from builder.ir import relax as rx
from builder.ir.op import OpPattern, register_op, registered_ops
from builder.ir.op.elementwise import infer_unary_float
from builder.nn.op import nn as nn_family
from builder.nn.op.common import replaces_record
from builder.nn.op.elementwise import record_functions


@pytest.fixture
def softsign_record():
    """A ``softsign`` elementwise record, as the reviewer added one (removed afterwards)."""
    op = register_op("softsign", infer_unary_float, pattern=OpPattern.ELEMWISE, frontend="softsign",
                     doc="``x / (1 + |x|)``.")
    yield op
    del rx.Op._registry[op.name]


def test_a_hand_written_function_that_shadows_a_record_is_an_import_error(softsign_record):
    line = nn_family.softsign.__code__.co_firstlineno
    with pytest.raises(ImportError) as err:
        record_functions({"softsign": nn_family.softsign})
    msg = str(err.value)
    assert f"builder.nn.op.nn.softsign:{line}" in msg and "'relax.softsign'" in msg and "replaces_record" in msg


def test_a_marked_function_replaces_the_record(softsign_record):
    @replaces_record
    def softsign(x, name="softsign"):
        return x

    made = record_functions({"softsign": softsign})
    assert "softsign" not in made and "sigmoid" in made


def test_a_stale_mark_is_an_import_error():
    @replaces_record
    def no_such_record(x):
        return x

    with pytest.raises(ImportError, match=r"no_such_record:\d+ marked @replaces_record, but no elementwise"):
        record_functions({"no_such_record": no_such_record})


def test_two_families_writing_one_name_is_an_import_error():
    from builder.nn.op import _hand_written

    def gelu(x):
        return x

    def other(x):
        return x

    first, second = types.ModuleType("fam_a"), types.ModuleType("fam_b")
    for module, fns in ((first, (gelu, other)), (second, (gelu,))):
        for fn in fns:
            fn_copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__)
            fn_copy.__module__ = module.__name__
            setattr(module, fn.__name__, fn_copy)
    assert sorted(_hand_written([first])) == ["gelu", "other"]
    with pytest.raises(ImportError, match=r"fam_b\.gelu and fam_a\.gelu are both hand-written"):
        _hand_written([first, second])


def test_the_existing_replacements_are_marked_and_no_record_is_shadowed():
    marked = sorted(name for name in nn.op.__all__ if getattr(getattr(nn.op, name), "__replaces_record__", False))
    assert marked == ["astype", "broadcast_to", "gelu", "multiply", "where"]
    for name in marked:   # each is a real record's name, and the written function is what nn.op exports
        (op,) = [op for op in registered_ops() if op.frontend == name]
        assert op.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST)
        written = getattr(nn.op, name).__wrapped__
        assert getattr(sys.modules[written.__module__], name) is written


def test_importing_nn_op_with_a_shadowed_record_fails():
    """The real import: a ``softsign`` record registered before ``builder.nn.op`` is imported."""
    code = textwrap.dedent("""
        import sys
        import builder.ir.op as ops
        from builder.ir.op.elementwise import infer_unary_float
        ops.register_op("softsign", infer_unary_float, pattern=ops.OpPattern.ELEMWISE, frontend="softsign")
        for name in [m for m in sys.modules if m == "builder.nn" or m.startswith("builder.nn.")]:
            del sys.modules[name]
        try:
            import builder.nn.op
        except ImportError as e:
            print("ImportError:", e)
        else:
            print("imported")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError: nn.op: the hand-written function builder.nn.op.nn.softsign:")
    assert "'relax.softsign'" in out.stdout
