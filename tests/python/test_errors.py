"""Exceptions: the class for each code, builtin bases, messages; argument
checks of the binding; buffers through __array_interface__ and torch."""

import array
import ctypes
import threading

import pytest

import nexar
from nxtest import close_all, np, run_ranks, world


@pytest.fixture(scope="module")
def w2():
    cs = world(2, collective_timeout_ms=400)
    yield cs
    close_all(cs)


def test_hierarchy():
    assert issubclass(nexar.TimeoutError, TimeoutError)
    assert issubclass(nexar.InvalidArgumentError, ValueError)
    for cls in (nexar.PeerLostError, nexar.MismatchError, nexar.AbortedError, nexar.AuthError,
                nexar.SizeMismatchError, nexar.TimeoutError, nexar.InvalidArgumentError):
        assert issubclass(cls, nexar.NexarError)
    e = nexar.NexarError(-5, "x")
    assert (e.code, e.message, str(e), e.name) == (-5, "x", "x", "TIMEOUT")
    assert nexar.strerror(-6).startswith("NEXAR_ERR_PEER_LOST")


def test_timeout_is_builtin_timeout(w2):
    with pytest.raises(TimeoutError) as ei:
        w2[0].recv(bytearray(4), 1, tag=77)
    e = ei.value
    assert isinstance(e, nexar.TimeoutError) and e.code == nexar._nexar.ERR_TIMEOUT
    assert "rank 1" in str(e), str(e)  # the library's sentence names the peer


def test_mismatch_on_every_rank(w2):
    def body(c):
        with pytest.raises(nexar.MismatchError) as ei:
            c.all_reduce(array.array("f", [1.0] * (3 + c.rank)))
        assert "all_reduce" in str(ei.value), str(ei.value)
        c.barrier()  # still in step afterwards
        return True

    assert run_ranks(w2, body) == [True, True]


def test_argument_errors(w2):
    c = w2[0]
    with pytest.raises(nexar.InvalidArgumentError, match="unknown reduction op"):
        c.all_reduce(bytearray(4), op="bogus")
    with pytest.raises(ValueError, match="dtype="):
        c.all_reduce(array.array("h", [1, 2]))  # int16: no nexar dtype
    with pytest.raises(nexar.InvalidArgumentError, match="multiple"):
        c.all_reduce(bytearray(6), dtype="f32")
    with pytest.raises(nexar.InvalidArgumentError, match="writable"):
        c.recv(b"read-only", 1)
    with pytest.raises(nexar.InvalidArgumentError, match="differ"):
        c.all_gather(array.array("f", [1.0]), array.array("i", [0, 0]))
    with pytest.raises(nexar.SizeMismatchError):
        c.all_gather(bytearray(4), bytearray(4))  # needs 8 bytes on 2 ranks
    with pytest.raises(nexar.InvalidRankError):
        c.send(b"x", -1)
    with pytest.raises(nexar.InvalidArgumentError, match="tag"):
        c.send(b"x", 1, tag=2**32)
    with pytest.raises(nexar.InvalidArgumentError, match="unknown field"):
        nexar.bootstrap_local(1, no_such_field=1)
    with pytest.raises(nexar.InvalidArgumentError, match="unknown dtype"):
        c.all_reduce(bytearray(4), dtype="f128")
    if np is not None:
        with pytest.raises(nexar.InvalidArgumentError, match="contiguous"):
            c.all_reduce(np.zeros((4, 4), dtype=np.float32)[:, 1])


def test_rank_errors_from_the_library(w2):
    with pytest.raises(nexar.InvalidRankError):
        w2[0].send(b"x", 5)


class ArrayInterface:
    """Memory exposed only through __array_interface__ (no buffer protocol)."""

    def __init__(self, n):
        self.mem = (ctypes.c_float * n)()
        self.__array_interface__ = {"data": (ctypes.addressof(self.mem), False),
                                    "shape": (n,), "typestr": "<f4", "version": 3}


def test_array_interface_objects(w2):
    def body(c):
        x = ArrayInterface(5)
        for i in range(5):
            x.mem[i] = c.rank + i
        c.all_reduce(x)
        return list(x.mem)

    assert run_ranks(w2, body) == [[1.0, 3.0, 5.0, 7.0, 9.0]] * 2


def test_memoryview_and_array_buffers(w2):
    def body(c):
        m = memoryview(bytearray(16)).cast("d")
        m[0], m[1] = c.rank, 2.5
        c.all_reduce(m, op="max")
        a = array.array("q", [c.rank, -c.rank])
        c.all_reduce(a, op="min")
        return m.tolist(), a.tolist()

    assert run_ranks(w2, body) == [([1.0, 2.5], [0, -1])] * 2


def test_torch_cpu_tensors(w2):
    torch = pytest.importorskip("torch")

    def body(c):
        t = torch.full((3,), float(c.rank + 1), dtype=torch.bfloat16)
        c.all_reduce(t)
        return t.tolist()

    assert run_ranks(w2, body) == [[3.0, 3.0, 3.0]] * 2


def test_request_single_waiter(w2):
    r = w2[0].recv(bytearray(1), 1, tag=99, async_op=True)
    assert not r.test() and "pending" in repr(r)
    w2[1].send(b"z", 0, tag=99)
    assert r.wait() == b"z" and r.wait() == b"z" and r.test()


def test_close_inside_a_handler_is_refused(w2):
    seen = []

    def handler(caller, args, c=w2[1]):
        try:
            c.close()
        except nexar.InvalidArgumentError as e:
            seen.append(str(e))
        return b"still open"

    w2[1].rpc_register(3, handler)
    assert w2[0].rpc(1, 3) == b"still open"
    assert seen and "callback" in seen[0] and not w2[1].closed
    w2[1].rpc_register(3, None)


def test_wait_all_waits_every_request_and_raises_the_first_error(w2):
    a, b = w2
    rs = [a.recv(bytearray(2), 1, tag=41, async_op=True),
          a.recv(bytearray(3), 1, tag=42, async_op=True), None]
    b.send(b"xy", 0, tag=41)
    b.send(b"four", 0, tag=42)  # 4 bytes into 3: SizeMismatchError, message kept
    with pytest.raises(nexar.SizeMismatchError):
        nexar.wait_all(rs)
    assert rs[0].test() and rs[0].wait() == b"xy"
    m = bytearray(4)
    a.recv(m, 1, tag=42)
    assert m == b"four"
