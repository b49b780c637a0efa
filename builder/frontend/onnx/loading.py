"""Loading an ONNX model, an untrusted input: a path, bytes or a ModelProto checked against
:data:`MAX_MODEL_BYTES` before it is parsed and by ``onnx.checker``; external data read from the model's folder
with every location, region and size checked (:func:`_read_external_data`); the default domain's opset
checked against :data:`OPSETS`, older ones (from :data:`OLDEST_CONVERTED_OPSET`) converted by
``onnx.version_converter``.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from .errors import ONNXImportError
from .proto import _onnx


#: Largest accepted model, file or ModelProto: 2 GiB - 1, protobuf's own limit for one message.
MAX_MODEL_BYTES = 2**31 - 1


#: Opsets of the default domain (``""`` / ``"ai.onnx"``) this importer follows.
OPSETS = (13, 24)


#: The oldest default-domain opset converted (to ``OPSETS[0]``, by ``onnx.version_converter``) before import.
OLDEST_CONVERTED_OPSET = 7


def _load(model_or_path):
    """The checked ModelProto of a path or a ModelProto (see the module docstring)."""
    onnx = _onnx()
    if isinstance(model_or_path, (str, os.PathLike)):
        path = Path(model_or_path)
        if not path.is_file():
            raise FileNotFoundError(f"from_onnx: no ONNX file at {str(path)!r}")
        size = path.stat().st_size
        if size > MAX_MODEL_BYTES:
            raise ONNXImportError(f"from_onnx: {path} is {size} bytes, more than the limit of "
                                  f"{MAX_MODEL_BYTES} (MAX_MODEL_BYTES)")
        try:
            model = onnx.load(str(path), load_external_data=False)
        except Exception as e:   # protobuf's DecodeError and friends
            raise ONNXImportError(f"from_onnx: {path} is not a readable ONNX model: {e}") from e
    elif isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
        size = model.ByteSize()
        if size > MAX_MODEL_BYTES:
            raise ONNXImportError(f"from_onnx: the model is {size} bytes, more than the limit of "
                                  f"{MAX_MODEL_BYTES} (MAX_MODEL_BYTES)")
    elif isinstance(model_or_path, (bytes, bytearray, memoryview)):
        size = memoryview(model_or_path).nbytes
        if size > MAX_MODEL_BYTES:
            raise ONNXImportError(f"from_onnx: the model is {size} bytes, more than the limit of "
                                  f"{MAX_MODEL_BYTES} (MAX_MODEL_BYTES)")
        try:
            model = onnx.load_model_from_string(bytes(model_or_path))
        except Exception as e:   # protobuf's DecodeError and friends
            raise ONNXImportError(f"from_onnx: the {size} bytes are not a readable ONNX model: {e}") from e
    else:
        raise TypeError("from_onnx: expected an onnx.ModelProto, its serialized bytes or a path, got "
                        f"{type(model_or_path).__name__}")
    external = [t.name for t in _all_tensors(model.graph)
                if t.data_location == onnx.TensorProto.EXTERNAL]
    if external and not isinstance(model_or_path, (str, os.PathLike)):
        raise ONNXImportError(
            f"from_onnx: tensors stored as external data ({', '.join(external[:5])}"
            f"{', ...' if len(external) > 5 else ''}) in a ModelProto or bytes: pass the model's path instead (its "
            "external files are read from its folder), or load them with onnx.load(path)")
    try:
        # with external data, the checker needs the file's folder to find the data files
        onnx.checker.check_model(str(model_or_path) if external else model)
    except Exception as e:
        raise ONNXImportError(f"from_onnx: the model fails onnx.checker.check_model: {e}") from e
    if external:
        _read_external_data(model, Path(model_or_path).parent)
    return model


def _external_nbytes(tensor, count: int) -> int:
    """Bytes of ``count`` elements of an ONNX tensor's data type as raw data (4-bit types two per byte)."""
    onnx = _onnx()
    from onnx.helper import tensor_dtype_to_np_dtype

    T = onnx.TensorProto
    if tensor.data_type in (T.INT4, T.UINT4, getattr(T, "FLOAT4E2M1", -1)):
        return (count + 1) // 2
    if tensor.data_type in (T.STRING, T.UNDEFINED):
        raise ONNXImportError(f"from_onnx: external data of tensor '{tensor.name}' has data type "
                              f"{tensor.data_type}, which has no raw byte layout")
    try:
        return tensor_dtype_to_np_dtype(tensor.data_type).itemsize * count
    except Exception as e:   # an unknown data type number
        raise ONNXImportError(f"from_onnx: tensor '{tensor.name}' has the unknown data type {tensor.data_type}") from e


def _read_external_data(model, folder: Path) -> None:
    """Read every tensor stored as external data into its ``raw_data`` (ONNX's external data: ``location``
    relative to the model's folder, ``offset`` and ``length`` in bytes), after checking it as untrusted
    input: the location is a relative path inside ``folder`` (no ``..``, no absolute path, no symlink out of
    it) naming a regular file; the region lies within the file and holds exactly the bytes the tensor's dims
    and data type need; all regions together hold no more bytes than the distinct files do (no region
    read twice to multiply memory). Raises ONNXImportError naming the tensor otherwise.

    Memory: before anything is read, the bytes of all the regions together, and before each read that
    tensor's bytes, are checked against the memory available (:func:`runtime.memory.check_allocation`,
    ``MemAvailable`` and ``RLIMIT_AS``): :class:`runtime.memory.MemoryLimitError` (a MemoryError) naming the
    tensor and both sizes, instead of a read that fails with an empty MemoryError or an OOM kill (a sparse
    file of many GiB costs the disk nothing)."""
    from runtime.memory import check_allocation

    from pathlib import PurePosixPath

    onnx = _onnx()
    root = folder.resolve()
    sizes: dict[Path, int] = {}
    total = 0
    regions = []
    for t in _all_tensors(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        where = f"from_onnx: external data of tensor '{t.name}'"
        loc = info.get("location", "")
        rel = PurePosixPath(loc.replace("\\", "/"))
        if not loc or rel.is_absolute() or ".." in rel.parts or ":" in loc or "\0" in loc:
            raise ONNXImportError(f"{where}: location {loc!r} is not a relative path inside the model's folder")
        target = (root / rel).resolve()
        if root not in target.parents or not target.is_file():
            raise ONNXImportError(f"{where}: {loc!r} is not a regular file inside {str(root)!r}")
        if target not in sizes:
            sizes[target] = target.stat().st_size
        size = sizes[target]
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError as e:
            raise ONNXImportError(f"{where}: offset / length are not integers") from e
        if any(d < 0 for d in t.dims):
            raise ONNXImportError(f"{where}: negative dims {list(t.dims)}")
        need = _external_nbytes(t, math.prod(t.dims))
        if offset < 0 or length != need or offset + length > size:
            raise ONNXImportError(f"{where}: bytes [{offset}, {offset + length}) of {loc!r} ({size} bytes) for "
                                  f"{need} bytes of data (dims {list(t.dims)})")
        total += length
        if total > sum(sizes.values()):
            raise ONNXImportError(f"{where}: the external regions read more bytes ({total}) than the files hold")
        regions.append((t, where, loc, target, offset, length))
    if regions:
        check_allocation(total, f"from_onnx: the external data of {len(regions)} tensor(s) in {str(root)!r}")
    for t, where, loc, target, offset, length in regions:
        check_allocation(length, where)
        with open(target, "rb") as fh:
            fh.seek(offset)
            data = fh.read(length)
        if len(data) != length:
            raise ONNXImportError(f"{where}: {loc!r} ended early")
        t.raw_data = data
        del t.external_data[:]
        t.data_location = onnx.TensorProto.DEFAULT


def _all_tensors(graph):
    """Every TensorProto of ``graph``: initializers and tensor attributes, in subgraphs too (walked without
    recursion: a ModelProto built in Python may nest graphs any depth before the checks)."""
    graphs = [graph]
    while graphs:
        g = graphs.pop()
        yield from g.initializer
        for node in g.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                yield from a.tensors
                if a.HasField("g"):
                    graphs.append(a.g)
                graphs.extend(a.graphs)


def _opset(model) -> int:
    """The model's default-domain opset. Raises ONNXImportError when it imports none or one outside :data:`OPSETS`."""
    versions = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions:
        raise ONNXImportError("from_onnx: the model imports no opset of the default ONNX domain")
    v = int(versions[0])
    if not OPSETS[0] <= v <= OPSETS[1]:
        raise ONNXImportError(f"from_onnx: opset {v} is not supported (opsets {OPSETS[0]} to {OPSETS[1]}, and "
                              f"{OLDEST_CONVERTED_OPSET} to {OPSETS[0] - 1} converted)")
    return v


def _upgraded(model):
    """``model`` itself, or, for a default-domain opset in ``[OLDEST_CONVERTED_OPSET, OPSETS[0])`` (the ONNX
    model zoo's ResNet / BERT-SQuAD era), the model converted to ``OPSETS[0]`` by ONNX's own
    ``version_converter`` and checked again. Raises ONNXImportError when the converter cannot convert it."""
    onnx = _onnx()
    versions = [int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")]
    if not versions or not OLDEST_CONVERTED_OPSET <= versions[0] < OPSETS[0]:
        return model
    from onnx import version_converter

    try:
        upgraded = version_converter.convert_version(model, OPSETS[0])
        onnx.checker.check_model(upgraded)
    except Exception as e:
        raise ONNXImportError(f"from_onnx: opset {versions[0]} could not be converted to {OPSETS[0]} by "
                              f"onnx.version_converter: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
    return upgraded
