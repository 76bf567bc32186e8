"""Every torch.distributed operation of the "nexar" backend against a local
reference. Each rank's input is a function of its rank, so every rank computes
the expected result itself, without communicating.

Run in each process of a world (torchrun, mp.spawn); raises AssertionError
naming the op, dtype and rank on the first wrong result.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

import nexar.torch  # noqa: F401  registers "nexar"

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
ALL = FLOATS + INTS + [torch.bool]
N = 37  # elements: not a multiple of anything


def value(r, dtype, n=N, kind="sum"):
    """Rank r's input: small integers, exact in every dtype's reductions."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i + r) % 3 == 0)
    if kind == "prod":
        v = 1 + ((i + r) % 2)                   # 1 or 2: products stay exact
    elif kind == "bits":
        v = (i * (r + 3) + r) % 128             # fits int8 and uint8
    else:
        v = (i % 7) + r + 1
        if dtype in (torch.int8, torch.uint8):
            v = v % 16
    return v.to(dtype)


def expect_equal(got, want, what):
    if got.dtype.is_floating_point:
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-2 if got.element_size() == 2 else 1e-6,
                                   atol=1e-2 if got.element_size() == 2 else 1e-6, msg=lambda m: f"{what}: {m}")
    else:
        if not torch.equal(got, want):
            raise AssertionError(f"{what}: got {got.tolist()} want {want.tolist()}")


def reference(op, dtype, n, kind):
    vals = [value(r, dtype, kind=kind) for r in range(n)]
    if dtype == torch.bool:
        b = torch.stack(vals)
        if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX, dist.ReduceOp.BOR):
            return b.any(0)
        if op in (dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.BAND):
            return b.all(0)
        if op == dist.ReduceOp.BXOR:
            return (b.to(torch.int64).sum(0) % 2).bool()
    w = torch.stack([v.to(torch.int64) if not dtype.is_floating_point else v.double() for v in vals])
    if op == dist.ReduceOp.SUM:
        out = w.sum(0)
    elif op == dist.ReduceOp.AVG:
        out = w.sum(0) / n if dtype.is_floating_point else torch.div(w.sum(0), n, rounding_mode="trunc")
    elif op == dist.ReduceOp.PRODUCT:
        out = w.prod(0)
    elif op == dist.ReduceOp.MIN:
        out = w.min(0).values
    elif op == dist.ReduceOp.MAX:
        out = w.max(0).values
    else:
        out = w[0].clone()
        for x in w[1:]:
            out = out & x if op == dist.ReduceOp.BAND else out | x if op == dist.ReduceOp.BOR else out ^ x
    return out.to(dtype)


def check_allreduce(rank, n):
    ops = [("sum", dist.ReduceOp.SUM), ("avg", dist.ReduceOp.AVG), ("prod", dist.ReduceOp.PRODUCT),
           ("min", dist.ReduceOp.MIN), ("max", dist.ReduceOp.MAX)]
    bits = [("band", dist.ReduceOp.BAND), ("bor", dist.ReduceOp.BOR), ("bxor", dist.ReduceOp.BXOR)]
    for dtype in ALL:
        todo = list(ops) + (bits if not dtype.is_floating_point else [])
        for name, op in todo:
            if dtype == torch.bool and op == dist.ReduceOp.AVG:
                continue
            kind = "prod" if op == dist.ReduceOp.PRODUCT else "bits" if name in ("band", "bor", "bxor") else "sum"
            t = value(rank, dtype, kind=kind)
            dist.all_reduce(t, op=op)
            expect_equal(t, reference(op, dtype, n, kind), f"all_reduce {name} {dtype} rank {rank}")
    # PREMUL_SUM: each input scaled before the sum
    t = value(rank, torch.float32)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    expect_equal(t, reference(dist.ReduceOp.SUM, torch.float32, n, "sum") * 0.5, f"premul_sum rank {rank}")
    # a non-contiguous tensor is reduced and written back in place
    big = torch.stack([value(rank, torch.float32)] * 3, 1)  # [N, 3]
    col = big[:, 1]
    assert not col.is_contiguous()
    dist.all_reduce(col)
    expect_equal(big[:, 1], reference(dist.ReduceOp.SUM, torch.float32, n, "sum"), f"non-contiguous rank {rank}")
    expect_equal(big[:, 0], value(rank, torch.float32), f"non-contiguous neighbour rank {rank}")
    # coalesced
    ts = [value(rank, torch.float32, kind="sum")[:k].clone() for k in (1, 5, 37)]
    dist.all_reduce_coalesced(ts)
    for t, k in zip(ts, (1, 5, 37)):
        expect_equal(t, reference(dist.ReduceOp.SUM, torch.float32, n, "sum")[:k], f"coalesced rank {rank}")
    # an unsupported dtype is refused, naming it
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int16))
        raise AssertionError("int16 all_reduce was accepted")
    except RuntimeError as e:
        assert "Short" in str(e) and "not supported" in str(e), str(e)


def check_rooted(rank, n):
    for dtype in ALL:
        for root in range(n):
            t = value(rank, dtype)
            dist.broadcast(t, src=root)
            expect_equal(t, value(root, dtype), f"broadcast {dtype} root {root} rank {rank}")
        root = n - 1
        t = value(rank, dtype)
        dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
        if rank == root:
            expect_equal(t, reference(dist.ReduceOp.MAX, dtype, n, "sum"), f"reduce {dtype} rank {rank}")
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        root = n // 2
        x = value(rank, dtype)
        out = [torch.empty_like(x) for _ in range(n)] if rank == root else None
        dist.gather(x, gather_list=out, dst=root)
        if rank == root:
            for r in range(n):
                expect_equal(out[r], value(r, dtype), f"gather {dtype} block {r}")
        y = torch.empty_like(x)
        ins = [value(100 + r, dtype) for r in range(n)] if rank == root else None
        dist.scatter(y, scatter_list=ins, src=root)
        expect_equal(y, value(100 + rank, dtype), f"scatter {dtype} rank {rank}")


def check_gathers(rank, n):
    for dtype in ALL:
        x = value(rank, dtype)
        out = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(out, x)
        for r in range(n):
            expect_equal(out[r], value(r, dtype), f"all_gather {dtype} block {r} rank {rank}")
        flat = torch.empty(n * N, dtype=dtype)
        dist._all_gather_base(flat, x)
        expect_equal(flat, torch.cat([value(r, dtype) for r in range(n)]), f"_all_gather_base {dtype}")
    # uneven: rank r contributes r + 1 elements (Gloo refuses this)
    x = value(rank, torch.float32, n=rank + 1)
    out = [torch.empty(r + 1) for r in range(n)]
    dist.all_gather(out, x)
    for r in range(n):
        expect_equal(out[r], value(r, torch.float32, n=r + 1), f"uneven all_gather block {r}")
    # reduce_scatter: even, uneven, and the flat form
    for dtype in (torch.float32, torch.int32, torch.bfloat16, torch.bool):
        ins = [value(rank * 10 + j, dtype) for j in range(n)]
        out = torch.empty(N, dtype=dtype)
        dist.reduce_scatter(out, ins)
        acc = [value(r * 10 + rank, dtype) for r in range(n)]
        if dtype == torch.bool:
            want = torch.stack(acc).any(0)
        else:
            want = torch.stack([a.double() for a in acc]).sum(0).to(dtype)
        expect_equal(out, want, f"reduce_scatter {dtype} rank {rank}")
        flat_in = torch.cat(ins)
        out2 = torch.empty(N, dtype=dtype)
        dist._reduce_scatter_base(out2, flat_in)
        expect_equal(out2, want, f"_reduce_scatter_base {dtype} rank {rank}")
    ins = [value(rank, torch.float64, n=j + 2) for j in range(n)]
    out = torch.empty(rank + 2, dtype=torch.float64)
    dist.reduce_scatter(out, ins)
    want = sum(value(r, torch.float64, n=rank + 2) for r in range(n))
    expect_equal(out, want, f"uneven reduce_scatter rank {rank}")


def check_alltoall(rank, n):
    # even
    x = torch.arange(n * 4, dtype=torch.float32) + 1000 * rank
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x)
    want = torch.cat([torch.arange(rank * 4, rank * 4 + 4, dtype=torch.float32) + 1000 * r for r in range(n)])
    expect_equal(y, want, f"all_to_all_single even rank {rank}")
    # uneven splits with zeros: rank r sends (r + j) % 3 rows of 2 to rank j
    def rows(src, dst):
        return (src + dst) % 3
    send_splits = [rows(rank, j) for j in range(n)]
    recv_splits = [rows(i, rank) for i in range(n)]
    x = torch.cat([torch.full((rows(rank, j), 2), float(rank * 100 + j)) for j in range(n)])
    y = torch.empty(sum(recv_splits), 2)
    dist.all_to_all_single(y, x, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    want = torch.cat([torch.full((rows(i, rank), 2), float(i * 100 + rank)) for i in range(n)])
    expect_equal(y, want, f"all_to_all_single splits rank {rank}")
    # lists of different sizes
    ins = [torch.full((j + 1,), rank * 10 + j, dtype=torch.int64) for j in range(n)]
    outs = [torch.empty(rank + 1, dtype=torch.int64) for _ in range(n)]
    dist.all_to_all(outs, ins)
    for i in range(n):
        expect_equal(outs[i], torch.full((rank + 1,), i * 10 + rank, dtype=torch.int64), f"all_to_all from {i}")


def check_p2p(rank, n):
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    for dtype in (torch.float32, torch.bfloat16, torch.bool, torch.int8):
        x = value(rank, dtype)
        y = torch.empty_like(x)
        s = dist.isend(x, nxt, tag=7)
        dist.recv(y, prv, tag=7)
        s.wait()
        expect_equal(y, value(prv, dtype), f"send/recv {dtype} rank {rank}")
    # receive from any source: rank 0 takes one message from every other rank
    if rank == 0:
        seen = set()
        for _ in range(n - 1):
            y = torch.empty(3)
            src = dist.recv(y, tag=11)
            expect_equal(y, torch.full((3,), float(src)), f"recv any from {src}")
            seen.add(src)
        assert seen == set(range(1, n)), seen
    else:
        dist.send(torch.full((3,), float(rank)), 0, tag=11)
    dist.barrier()


def check_async(rank, n):
    # many in flight, completed through futures (the poller) and polling
    works, ts = [], []
    for k in range(20):
        t = torch.full((1000,), float(rank + k))
        works.append(dist.all_reduce(t, async_op=True))
        ts.append(t)
    futs = [w.get_future() for w in works[:10]]
    for k, f in enumerate(futs):
        (v,) = f.wait()
        expect_equal(v, torch.full((1000,), float(sum(range(n)) + n * k)), f"future {k}")
    deadline = time.time() + 30
    for k, w in enumerate(works[10:], start=10):
        while not w.is_completed():
            assert time.time() < deadline, "is_completed never became true"
            time.sleep(0.0005)
        assert w.is_success()
        expect_equal(ts[k], torch.full((1000,), float(sum(range(n)) + n * k)), f"polled {k}")
    # no thread per op: 300 in flight with futures, the thread count stays put
    dist.all_reduce(torch.ones(1), async_op=True).get_future().wait()  # the poller is up
    before = len(os.listdir("/proc/self/task"))
    flight = [dist.all_reduce(torch.full((64,), 1.0), async_op=True) for _ in range(300)]
    futs = [w.get_future() for w in flight]
    during = len(os.listdir("/proc/self/task"))
    for f in futs:
        expect_equal(f.wait()[0], torch.full((64,), float(n)), "one of 300 in flight")
    assert during <= before, f"threads: {before} before, {during} with 300 ops in flight"
    # then(): a callback on the future runs once it completes
    t = torch.ones(8)
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    expect_equal(fut.wait(), torch.full((8,), 2.0 * n), "then()")


def check_new_group(rank, n):
    if n < 3:
        return
    members = [0, n - 1]
    g = dist.new_group(members)  # every rank calls it; only members form a world
    if rank in members:
        t = torch.full((5,), float(rank))
        dist.all_reduce(t, group=g)
        expect_equal(t, torch.full((5,), float(sum(members))), f"new_group all_reduce rank {rank}")
        x = torch.empty(2)
        dist.broadcast(x if rank != n - 1 else torch.full((2,), 9.0), src=n - 1, group=g)
        if rank != n - 1:
            expect_equal(x, torch.full((2,), 9.0), "new_group broadcast")
    dist.barrier()


def run_all(rank, n):
    assert dist.get_backend() in ("nexar", "NEXAR"), dist.get_backend()
    assert dist.get_rank() == rank and dist.get_world_size() == n
    check_allreduce(rank, n)
    check_rooted(rank, n)
    check_gathers(rank, n)
    check_alltoall(rank, n)
    check_p2p(rank, n)
    check_async(rank, n)
    check_new_group(rank, n)
    dist.barrier()


def spawn_main(rank, n, init_method):
    """mp.spawn entry."""
    dist.init_process_group("nexar", init_method=init_method, rank=rank, world_size=n)
    run_all(rank, n)
    dist.destroy_process_group()


if __name__ == "__main__":  # under torchrun (env://)
    dist.init_process_group("nexar")
    r, n = dist.get_rank(), dist.get_world_size()
    run_all(r, n)
    print(f"rank {r} of {n}: all ops ok", flush=True)
    dist.destroy_process_group()
    sys.exit(0)
