"""Every operation of nexar.Client against reference values, run by each
rank (as threads in test_ops.py, as processes in test_procs.py)."""

import functools
import math
import operator

import nexar
from nxtest import DTYPES, INTS, empty, make, np, read, wrap

N = 13  # elements per rank block (odd, so no size lines up by accident)
OPS = ["sum", "prod", "min", "max", "avg"]
BITWISE = ["band", "bor", "bxor"]  # integer dtypes only


def val(op, r, i):
    if op == "prod":
        return 1 + (r + i) % 2
    if op in ("min", "max", "band", "bor", "bxor"):
        return (r * 7 + i * 3) % 11
    return (r + 1) * (i % 5 + 1)


def reduce_ref(dt, op, vals):
    if op == "avg":  # integers truncate (as NCCL); the test values are exact in every float
        return sum(vals) // len(vals) if dt in INTS else sum(vals) / len(vals)
    if op in BITWISE:
        return functools.reduce({"band": operator.and_, "bor": operator.or_,
                                 "bxor": operator.xor}[op], vals)
    if op == "sum":
        v = sum(vals)
    elif op == "prod":
        v = math.prod(vals)
    elif op == "min":
        v = min(vals)
    else:
        v = max(vals)
    return wrap(dt, v)


def eq(dt, got, want, what):
    want = [wrap(dt, w) for w in want]
    assert got == want, f"{what} {dt}: got {got}, want {want}"


def check_dtype(c, dt):
    r, n = c.rank, c.world_size
    # all_reduce, every op, blocking and async
    for op in OPS + (BITWISE if dt in INTS else []):
        b, kw = make(dt, [val(op, r, i) for i in range(N)])
        assert c.all_reduce(b, op=op, dtype=kw) is b
        want = [reduce_ref(dt, op, [val(op, q, i) for q in range(n)]) for i in range(N)]
        eq(dt, read(dt, b), want, f"all_reduce {op}")
        b, kw = make(dt, [val(op, r, i) for i in range(N)])
        req = c.all_reduce(b, op=op, dtype=kw, async_op=True)
        assert isinstance(req, nexar.Request)
        assert req.wait() is b and req.test()
        eq(dt, read(dt, b), want, f"all_reduce async {op}")
    want_sum = [reduce_ref(dt, "sum", [val("sum", q, i) for q in range(n)]) for i in range(N)]
    b, kw = make(dt, [val("sum", r, i) for i in range(N)])
    c.all_reduce_rs_ag(b, dtype=kw)
    eq(dt, read(dt, b), want_sum, "all_reduce_rs_ag")
    b1, kw = make(dt, [val("sum", r, i) for i in range(N)])
    b2, _ = make(dt, [val("sum", r, i) for i in range(5)])
    c.all_reduce_bucketed([b1, b2], dtype=kw)
    eq(dt, read(dt, b1), want_sum, "bucketed[0]")
    eq(dt, read(dt, b2), want_sum[:5], "bucketed[1]")
    # reduce to root 1 % n
    root = 1 % n
    b, kw = make(dt, [val("max", r, i) for i in range(N)])
    c.reduce(b, op="max", root=root, dtype=kw)
    if r == root:
        eq(dt, read(dt, b), [reduce_ref(dt, "max", [val("max", q, i) for q in range(n)])
                             for i in range(N)], "reduce")
    # broadcast from the last rank (async)
    b, kw = make(dt, [val("sum", r, i) for i in range(N)])
    c.broadcast(b, root=n - 1, dtype=kw, async_op=True).wait()
    eq(dt, read(dt, b), [val("sum", n - 1, i) for i in range(N)], "broadcast")
    # scans
    b, kw = make(dt, [val("sum", r, i) for i in range(N)])
    c.scan(b, dtype=kw)
    eq(dt, read(dt, b), [sum(val("sum", q, i) for q in range(r + 1)) for i in range(N)], "scan")
    b, kw = make(dt, [val("sum", r, i) for i in range(N)])
    c.exclusive_scan(b, dtype=kw)
    eq(dt, read(dt, b), [sum(val("sum", q, i) for q in range(r)) for i in range(N)], "exscan")
    b, kw = make(dt, [val("max", r, i) for i in range(N)])
    c.exclusive_scan(b, op="max", dtype=kw)
    if r:
        eq(dt, read(dt, b), [max(val("max", q, i) for q in range(r)) for i in range(N)],
           "exscan max")
    else:
        got = read(dt, b)
        if dt in INTS:
            lo = 0 if dt[0] == "u" else -(1 << (8 * {"i32": 4, "i8": 1, "i64": 8}[dt] - 1))
            eq(dt, got, [lo] * N, "exscan max identity")
        else:
            assert all(g == -math.inf for g in got), got
    # all_gather: given recv and allocated
    s, kw = make(dt, [val("sum", r, i) for i in range(N)])
    rv = empty(dt, N * n)
    assert c.all_gather(s, rv, dtype=kw) is rv
    want = [val("sum", q, i) for q in range(n) for i in range(N)]
    eq(dt, read(dt, rv), want, "all_gather")
    eq(dt, read(dt, c.all_gather(s, dtype=kw, async_op=True).wait()), want, "all_gather alloc")
    # reduce_scatter: block b of rank q holds val(q, b*N + i)
    s, kw = make(dt, [val("sum", r, j) for j in range(N * n)])
    rv = empty(dt, N)
    c.reduce_scatter(s, rv, dtype=kw)
    eq(dt, read(dt, rv), [sum(val("sum", q, r * N + i) for q in range(n)) for i in range(N)],
       "reduce_scatter")
    # all_to_all: block j of rank q is q*100+j+i (kept < 256 for u8)
    s, kw = make(dt, [(r * 10 + j + i) % 50 for j in range(n) for i in range(N)])
    rv = c.all_to_all(s, out=empty(dt, N * n), dtype=kw)
    eq(dt, read(dt, rv), [(q * 10 + r + i) % 50 for q in range(n) for i in range(N)],
       "all_to_all")
    # gather / scatter at root 0
    s, kw = make(dt, [val("sum", r, i) for i in range(N)])
    g = c.gather(s, root=0, dtype=kw)
    if r == 0:
        eq(dt, read(dt, g), [val("sum", q, i) for q in range(n) for i in range(N)], "gather")
    else:
        assert g is None
    src = make(dt, [(q * 3 + i) % 40 for q in range(n) for i in range(N)])[0] if r == 0 else None
    rv = empty(dt, N)
    c.scatter(src, rv, root=0, dtype=kw)
    eq(dt, read(dt, rv), [(r * 3 + i) % 40 for i in range(N)], "scatter")


def check_v(c, dt):
    """The variable-count collectives, with zero counts and displacements."""
    r, n = c.rank, c.world_size
    counts = [q % 3 for q in range(n)]
    off = [sum(counts[:q]) for q in range(n)]
    # all_gather_v packed, then with the blocks in reverse order
    s, kw = make(dt, [val("sum", r, i) for i in range(counts[r])])
    want = [val("sum", q, i) for q in range(n) for i in range(counts[q])]
    eq(dt, read(dt, c.all_gather_v(s, None, counts, dtype=kw)), want, "all_gather_v")
    displs = [sum(counts[q + 1:]) for q in range(n)]
    rv = empty(dt, sum(counts))
    c.all_gather_v(s, rv, counts, displs, dtype=kw, async_op=True).wait()
    want = [val("sum", q, i) for q in reversed(range(n)) for i in range(counts[q])]
    eq(dt, read(dt, rv), want, "all_gather_v displs")
    # reduce_scatter_v
    s, kw = make(dt, [val("sum", r, j) for j in range(sum(counts))])
    rv = c.reduce_scatter_v(s, None, counts, dtype=kw)
    eq(dt, read(dt, rv), [sum(val("sum", q, off[r] + i) for q in range(n))
                          for i in range(counts[r])], "reduce_scatter_v")
    # all_to_all_v: rank a sends (a + b) % 3 elements to rank b
    sc = [(r + j) % 3 for j in range(n)]
    rc = [(i + r) % 3 for i in range(n)]
    s, kw = make(dt, [(10 * r + j + i) % 50 for j in range(n) for i in range(sc[j])])
    rv = c.all_to_all_v(s, sc, None, rc, dtype=kw)
    eq(dt, read(dt, rv), [(10 * q + r + i) % 50 for q in range(n) for i in range(rc[q])],
       "all_to_all_v")
    # gather_v at 1 % n, scatter_v from 0
    root = 1 % n
    s, kw = make(dt, [val("sum", r, i) for i in range(counts[r])])
    g = c.gather_v(s, None, counts, root=root, dtype=kw)
    if r == root:
        eq(dt, read(dt, g), [val("sum", q, i) for q in range(n) for i in range(counts[q])],
           "gather_v")
    else:
        assert g is None
    src = (make(dt, [(q + i) % 40 for q in range(n) for i in range(counts[q])])[0]
           if r == 0 else None)
    rv = empty(dt, counts[r])
    c.scatter_v(src, counts, rv, root=0, dtype=kw)
    eq(dt, read(dt, rv), [(r + i) % 40 for i in range(counts[r])], "scatter_v")


def check_p2p(c):
    r, n = c.rank, c.world_size
    nxt, prv = (r + 1) % n, (r - 1) % n
    out = bytearray(b"%d->%d" % (r, nxt)) + bytearray(7)
    inb = bytearray(len(b"%d->%d" % (prv, r)) + 7)
    req = c.recv(inb, prv, tag=5, async_op=True)
    c.send(out, nxt, tag=5)
    assert req.wait() is inb
    assert bytes(inb[: len(b"%d->%d" % (prv, r))]) == b"%d->%d" % (prv, r)
    # sendrecv around the ring, f64 data
    s, _ = make("f64", [r + 0.5] * 4)
    rv = empty("f64", 4)
    assert c.sendrecv(s, nxt, rv, prv, stag=9, rtag=9) is rv
    assert read("f64", rv) == [prv + 0.5] * 4
    # probe and probe_any report the length without consuming
    c.send(bytes(10 + r), nxt, tag=11)
    assert c.probe(prv, tag=11) == 10 + prv
    assert c.probe_any(tag=11) == (prv, 10 + prv)
    m = bytearray(10 + prv)
    c.recv(m, prv, tag=11)
    # iov: three regions sent, received as two
    c.send_iov([b"ab", bytearray(b"cde"), memoryview(b"f")], nxt, tag=13)
    p1, p2 = bytearray(4), bytearray(2)
    assert c.recv_iov([p1, p2], prv, tag=13) == [p1, p2]
    assert p1 + p2 == b"abcdef"
    # a receive of the wrong length fails and keeps the message
    c.send(b"abcd", nxt, tag=12)
    try:
        c.recv(bytearray(3), prv, tag=12)
        raise AssertionError("a short receive succeeded")
    except nexar.SizeMismatchError:
        pass
    m = bytearray(4)
    c.recv(m, prv, tag=12)
    assert m == b"abcd"
    c.barrier()


def check_misc(c):
    r, n = c.rank, c.world_size
    # RPC: a Python handler; its exception is RPC_FAILED for the caller
    c.rpc_register(7, lambda caller, args: b"%d:%d:" % (r, caller) + args)

    def bad(caller, args):
        raise RuntimeError("handler fails on purpose")

    c.rpc_register(8, bad)
    c.barrier()
    assert c.rpc((r + 1) % n, 7, b"hi") == b"%d:%d:hi" % ((r + 1) % n, r)
    try:
        c.rpc((r + 1) % n, 8, b"")
        raise AssertionError("a failing handler succeeded")
    except nexar.RpcFailedError as e:
        assert e.code == nexar._nexar.ERR_RPC_FAILED and str(e)
    try:
        c.rpc((r + 1) % n, 99)
        raise AssertionError("an unregistered fn_id succeeded")
    except nexar.RpcNoHandlerError:
        pass
    c.barrier()
    c.rpc_register(7, None)
    c.rpc_register(8, None)
    # split into even and odd ranks, reversed by key
    child = c.split(r % 2, key=n - r)
    assert child is not None and child.world_size == (n + 1 - r % 2) // 2
    assert child.epoch == c.epoch
    b, _ = make("i32", [r])
    child.all_reduce(b)
    assert read("i32", b) == [sum(q for q in range(n) if q % 2 == r % 2)]
    child.close()
    assert c.split(None) is None
    # pickled objects; a large numpy array travels out of band
    big = np.arange(200000, dtype=np.float64) if np is not None else bytearray(300000)
    if r == 0:
        c.send_obj({"from": 0, "big": big}, 1 % n, tag=3)
    if r == 1 % n:
        o = c.recv_obj(0, tag=3)
        assert o["from"] == 0 and len(o["big"]) == len(big)
        if np is not None:
            assert (o["big"] == big).all()
    o = c.bcast_obj({"root": r, "big": big} if r == 1 % n else None, root=1 % n)
    assert o["root"] == 1 % n and len(o["big"]) == len(big)
    assert c.allgather_obj(("x", r)) == [("x", q) for q in range(n)]
    assert len(c.allgather_obj(big if r == 0 else r)) == n
    assert c.failed_ranks() == []
    c.barrier()


def check_compressed(c):
    """all_reduce_compressed with ratio 1 keeps everything: the plain sum."""
    r, n = c.rank, c.world_size
    for comp in (nexar.Compressor.topk(1.0), nexar.Compressor.randomk(1.0, seed=5)):
        b, kw = make("f32", [(r + 1) * (i + 1) for i in range(10)])
        res = empty("f32", 10)
        c.all_reduce_compressed(b, res, comp, dtype=kw)
        assert read("f32", b) == [n * (n + 1) // 2 * (i + 1) for i in range(10)]
        assert read("f32", res) == [0.0] * 10
    try:
        nexar.Compressor.topk(1.5)
        raise AssertionError("ratio 1.5 accepted")
    except nexar.InvalidArgumentError:
        pass


def check_large(c):
    """Sizes that take the bulk paths (same-host copies above 256 KiB)."""
    r, n = c.rank, c.world_size
    cnt = 100003
    b, kw = make("f32", [(r + 1) * (i % 7) for i in range(cnt)])
    c.all_reduce(b, dtype=kw)
    tot = n * (n + 1) // 2
    assert read("f32", b)[:20] == [tot * (i % 7) for i in range(20)]
    assert read("f32", b)[-3:] == [tot * (i % 7) for i in range(cnt - 3, cnt)]
    s = bytearray([r]) * 300000
    rv = bytearray(300000 * n)
    c.all_gather(s, rv)
    assert all(rv[q * 300000] == q and rv[q * 300000 + 299999] == q for q in range(n))


def check_all(c, dtypes=DTYPES):
    for dt in dtypes:
        check_dtype(c, dt)
        check_v(c, dt)
    check_p2p(c)
    check_misc(c)
    check_compressed(c)
    check_large(c)
    return "ok"
