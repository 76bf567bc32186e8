"""Random, mostly wrong arguments to every operation on a world of one
rank: each call returns or raises a Python exception (NexarError, TypeError,
ValueError, OverflowError, BufferError), never crashes or hangs, and the
client still works afterwards. Seeded, so a failure reproduces."""

import array
import random

import pytest

import nexar

OPS = ["all_reduce", "all_reduce_rs_ag", "broadcast", "reduce", "scan", "exclusive_scan",
       "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "all_gather_v",
       "reduce_scatter_v", "all_to_all_v", "gather_v", "scatter_v", "send", "sendrecv",
       "all_reduce_bucketed", "barrier"]


def _value(rng):
    k = rng.randrange(12)
    if k == 0:
        return None
    if k == 1:
        return b"\x01" * rng.randrange(0, 17)
    if k == 2:
        return bytearray(rng.randrange(0, 33))
    if k == 3:
        return array.array(rng.choice("fdiqbBhHIL"), [1] * rng.randrange(0, 9))
    if k == 4:
        return memoryview(bytearray(rng.randrange(0, 33)))[::2]  # not contiguous
    if k == 5:
        return rng.choice([-1, 0, 1, 2, 2**32, 2**64, 7])
    if k == 6:
        return rng.choice(["sum", "avg", "bxor", "nope", "f32", "bf16", 99])
    if k == 7:
        return [rng.randrange(-1, 5) for _ in range(rng.randrange(0, 3))]
    if k == 8:
        return object()
    if k == 9:
        return memoryview(bytearray(rng.randrange(0, 16))).cast("B")
    if k == 10:
        return "text"
    return bytearray(4 * rng.randrange(0, 5))


def _arity(op):
    import inspect

    ps = list(inspect.signature(getattr(nexar.Client, op)).parameters.values())[1:]
    return sum(p.default is inspect.Parameter.empty and p.kind == p.POSITIONAL_OR_KEYWORD
               for p in ps)


@pytest.mark.parametrize("seed", range(4))
def test_random_arguments_never_crash(seed):
    rng = random.Random(seed)
    (c,) = nexar.bootstrap_local(1, collective_timeout_ms=200, barrier_timeout_ms=200)
    allowed = (nexar.NexarError, TypeError, ValueError, OverflowError, BufferError)
    try:
        for _ in range(1500):
            op = rng.choice(OPS)
            # half the calls with the right number of positional arguments
            need = _arity(op)
            n = need if rng.random() < 0.5 else rng.randrange(0, 5)
            args = [_value(rng) for _ in range(n)]
            kw = {}
            if rng.random() < 0.3:
                kw["dtype"] = rng.choice(["f32", "u8", "bf16", "i64", None, "x", -3])
            if rng.random() < 0.2:
                kw["async_op"] = True
            try:
                res = getattr(c, op)(*args, **kw)
                if isinstance(res, nexar.Request):
                    try:
                        res.wait()
                    except allowed:
                        pass
            except allowed:
                pass
        # still in working order
        x = array.array("f", [2.0])
        c.all_reduce(x)
        c.barrier()
        assert x[0] == 2.0
    finally:
        c.close()
