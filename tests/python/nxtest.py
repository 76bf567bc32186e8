"""Helpers of the nexar Python tests: buffers of every test dtype with and
without numpy (NEXAR_TEST_NO_NUMPY / the nonumpy sitecustomize), reference
values, and running one function per rank on threads."""

import array
import os
import struct
import sys
import threading

try:
    import numpy as np
except ImportError:
    np = None

import nexar

DTYPES = ["f32", "f64", "f16", "i32", "u8", "bf16"]
_NP = {"f32": "float32", "f64": "float64", "f16": "float16", "i32": "int32", "u8": "uint8",
       "i64": "int64", "u32": "uint32", "u64": "uint64", "i8": "int8"}
_AR = {"f32": "f", "f64": "d", "i32": "i", "i64": "q", "u32": "I", "u64": "Q", "i8": "b"}
_ST = {"f32": "f", "f64": "d", "f16": "e", "i32": "i", "u8": "B", "i64": "q", "u32": "I",
       "u64": "Q", "i8": "b"}
SIZE = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i32": 4, "u8": 1, "i64": 8, "u32": 4,
        "u64": 8, "i8": 1}
INTS = {"i32", "u8", "i64", "u32", "u64", "i8"}


def _bf16_bits(v):
    return struct.unpack("<I", struct.pack("<f", float(v)))[0] >> 16


def _bf16_val(b):
    return struct.unpack("<f", struct.pack("<I", int(b) << 16))[0]


def make(dt, values):
    """(buffer, dtype keyword) holding values as dt. With numpy: an array
    (bf16 as uint16 bits + dtype="bf16"); without: array.array, bytearray
    (u8), or a bytearray + dtype= for f16/bf16 (no array.array code)."""
    values = list(values)
    if dt == "bf16":
        bits = [_bf16_bits(v) for v in values]
        if np is not None:
            return np.array(bits, dtype=np.uint16), "bf16"
        return array.array("H", bits), "bf16"
    if np is not None:
        return np.array(values, dtype=_NP[dt]), None
    if dt == "u8":
        return bytearray(int(v) & 0xFF for v in values), None
    if dt == "f16":
        return bytearray(struct.pack(f"<{len(values)}e", *values)), "f16"
    return array.array(_AR[dt], [type_cast(dt, v) for v in values]), None


def empty(dt, n):
    return make(dt, [0] * n)[0]


def type_cast(dt, v):
    return int(v) if dt in INTS else float(v)


def read(dt, buf):
    """The values in buf as Python numbers."""
    if dt == "bf16":
        return [_bf16_val(b) for b in (buf.tolist() if hasattr(buf, "tolist") else buf)]
    if np is not None and isinstance(buf, np.ndarray):
        return buf.tolist()
    if isinstance(buf, (bytearray, bytes, memoryview)):
        b = bytes(buf)
        return list(struct.unpack(f"<{len(b) // SIZE[dt]}{_ST[dt]}", b))
    return list(buf)


def wrap(dt, v):
    """v as dt holds it (integers wrap)."""
    if dt in INTS:
        bits = SIZE[dt] * 8
        v = int(v) & ((1 << bits) - 1)
        if dt[0] == "i" and v >= 1 << (bits - 1):
            v -= 1 << bits
    return v


def run_ranks(clients, fn, timeout=120):
    """fn(client) on one thread per rank; re-raises the first failure."""
    errs = [None] * len(clients)
    res = [None] * len(clients)

    def body(i, c):
        try:
            res[i] = fn(c)
        except BaseException as e:  # noqa: B902 (reported below)
            errs[i] = e

    ts = [threading.Thread(target=body, args=(i, c), daemon=True) for i, c in enumerate(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout)
        if t.is_alive():
            raise AssertionError(f"a rank did not finish within {timeout} s")
    for i, e in enumerate(errs):
        if e is not None:
            raise AssertionError(f"rank {i} failed: {e!r}") from e
    return res


def world(n, **cfg):
    return nexar.bootstrap_local(n, **cfg)


def close_all(cs):
    for c in cs:
        c.close()
