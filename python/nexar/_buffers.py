"""Buffer helpers: dtype names, adapting objects without the buffer
protocol (CPU torch tensors, __array_interface__ objects), and allocating
outputs like a given input. numpy is never imported here; it is used only
when the caller's objects already are numpy arrays."""

import array
import sys

from . import _nexar
from ._errors import InvalidArgumentError

# nexar_dtype values (wire format; never renumbered)
DTYPES = {"f32": 0, "f64": 1, "f16": 2, "bf16": 3, "i8": 4, "i32": 5, "i64": 6, "u8": 7,
          "u32": 8, "u64": 9}
_ALIASES = {"float32": "f32", "float": "f32", "float64": "f64", "double": "f64",
            "float16": "f16", "half": "f16", "bfloat16": "bf16", "int8": "i8",
            "int32": "i32", "int64": "i64", "uint8": "u8", "uint32": "u32", "uint64": "u64",
            "bool": "u8"}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3, "avg": 4, "band": 5, "bor": 6, "bxor": 7}
_TORCH = {"torch.float32": 0, "torch.float64": 1, "torch.float16": 2, "torch.bfloat16": 3,
          "torch.int8": 4, "torch.int32": 5, "torch.int64": 6, "torch.uint8": 7,
          "torch.bool": 7}
_TYPESTR = {"f4": 0, "f8": 1, "f2": 2, "i1": 4, "i4": 5, "i8": 6, "u1": 7, "b1": 7, "u4": 8,
            "u8": 9}


def dtype_code(dtype):
    """-1 (from the buffer's format) for None, else the nexar dtype number."""
    if dtype is None:
        return -1
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype in DTYPE_NAMES:
            return dtype
        raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT, f"invalid dtype {dtype}")
    name = str(getattr(dtype, "name", dtype)) if not isinstance(dtype, str) else dtype
    name = name.lower().replace("torch.", "")
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT,
                                   f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return DTYPES[name]


def op_code(op):
    if isinstance(op, int) and not isinstance(op, bool):
        return op
    try:
        return OPS[str(op).lower()]
    except KeyError:
        raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT,
                                   f"unknown reduction op {op!r}; use one of {' '.join(OPS)}") from None


def _adapt(obj):
    """(memoryview, dtype) for an object without the buffer protocol. The C
    layer keeps obj alive as long as the memoryview is in use."""
    mod = type(obj).__module__ or ""
    if mod.startswith("torch") and hasattr(obj, "data_ptr"):
        if obj.device.type != "cpu":
            raise TypeError(f"a {obj.device.type} tensor; nexar takes CPU tensors")
        if not obj.is_contiguous():
            raise TypeError("a non-contiguous tensor")
        dt = _TORCH.get(str(obj.dtype))
        if dt is None:
            raise TypeError(f"tensor dtype {obj.dtype} has no nexar dtype")
        return _nexar.memory_at(obj.data_ptr(), obj.numel() * obj.element_size()), dt
    ai = getattr(obj, "__array_interface__", None)
    if isinstance(ai, dict):
        ptr, ro = ai["data"]
        typestr = ai["typestr"]
        if ai.get("strides") is not None:
            raise TypeError("a strided array")
        if typestr[0] == ">" and typestr[2:] != "1":
            raise TypeError("big-endian data")
        dt = _TYPESTR.get(typestr[1:])
        n = 1
        for d in ai["shape"]:
            n *= d
        return _nexar.memory_at(ptr, n * int(typestr[2:]), bool(ro)), -1 if dt is None else dt
    raise TypeError(f"{type(obj).__name__} supports neither the buffer protocol nor "
                    "__array_interface__")


def nbytes(obj):
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    try:
        with memoryview(obj) as m:
            return m.nbytes
    except TypeError:
        mv, _ = _adapt(obj)
        return mv.nbytes


def like(obj, nbytes_):
    """A new zeroed buffer of nbytes_ bytes of the same kind and element
    type as obj (numpy array, torch tensor, array.array, else bytearray)."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(obj, np.ndarray):
        return np.zeros(nbytes_ // obj.itemsize, dtype=obj.dtype)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return torch.zeros(nbytes_ // obj.element_size(), dtype=obj.dtype)
    if isinstance(obj, array.array):
        return array.array(obj.typecode, bytes(nbytes_))
    if isinstance(obj, memoryview) and obj.format not in ("B", "b", "c"):
        return memoryview(bytearray(nbytes_)).cast(obj.format)
    return bytearray(nbytes_)
