"""Timeouts of the "nexar" backend: the group's timeout (a late rank makes the
others raise, and the group stays in step), an operation's own timeout from
its options (raises, the group is aborted), and the monitored barrier naming
the rank that did not arrive, even when another waiting rank gave up first."""
import datetime
import os
import socket
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import nexar.torch  # noqa: F401

ms = lambda v: datetime.timedelta(milliseconds=v)  # noqa: E731


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def expect_raise(fn, *needles):
    t0 = time.time()
    try:
        fn()
    except RuntimeError as e:
        for w in needles:
            assert w in str(e), f"{w!r} not in: {e}"
        return time.time() - t0, str(e)
    raise AssertionError("no error")


def worker(rank, n, init, out):
    dist.init_process_group("nexar", init_method=init, rank=rank, world_size=n)
    log = []
    late = n - 1
    # 1. the group's timeout: the others wait 1.5 s without progress, then raise
    g = dist.new_group(timeout=ms(1500))
    t = torch.ones(4)
    if rank == late:
        time.sleep(3)
    took, msg = expect_raise(lambda: dist.all_reduce(t, group=g), "TIMEOUT")
    if rank != late:
        assert 1.0 < took < 6, took
    log.append(f"group timeout after {took:.2f} s: {msg[:160]}")
    dist.barrier()
    t = torch.ones(4)
    dist.all_reduce(t, group=g)  # still in step: the timed-out one kept its place
    assert torch.equal(t, torch.full((4,), float(n))), t
    # 2. an operation's own timeout (options), shorter than the group's
    h = dist.new_group()
    if rank != late:
        opts = dist.AllreduceOptions()
        opts.timeout = ms(500)
        # the first to time out aborts the group, so the other may see its abort instead
        took, msg = expect_raise(lambda: h.allreduce([torch.ones(4)], opts).wait())
        assert 0.3 < took < 5, took
        log.append(f"op timeout after {took:.2f} s: {msg[:160]}")
    dist.barrier()
    # 3. the monitored barrier (dist.monitored_barrier itself only admits gloo in
    #    torch 1.13, so through the group object): all arrive; then one is late
    pg = dist.group.WORLD
    pg.monitored_barrier(ms(5000))
    if rank == late:
        time.sleep(2.5)
    if rank == 0:
        took, msg = expect_raise(lambda: pg.monitored_barrier(ms(1000), wait_all_ranks=True),
                                 f"Rank {late} failed to pass monitoredBarrier")
        log.append(f"monitored barrier: {msg[:200]}")
    else:
        try:
            pg.monitored_barrier(ms(1000))
        except RuntimeError:
            pass
    dist.barrier()
    # 4. a waiting rank's own shorter timeout must not hide the late one from
    #    rank 0: rank 1 gives up (and abandons the control messages) first,
    #    rank 0 still names the rank that did not arrive
    q = dist.new_group()
    if rank == late:
        time.sleep(2.0)
    if rank == 0:
        took, msg = expect_raise(lambda: q.monitored_barrier(ms(1200), wait_all_ranks=True),
                                 f"Rank {late} failed to pass monitoredBarrier")
        log.append(f"monitored barrier, other gave up first: {msg[:200]}")
    else:
        try:
            q.monitored_barrier(ms(300 if rank == 1 else 1200))
        except RuntimeError:
            pass
    dist.barrier()
    t = torch.ones(2)
    dist.all_reduce(t)  # the group itself is unaffected
    assert torch.equal(t, torch.full((2,), float(n)))
    with open(os.path.join(out, f"r{rank}.txt"), "w") as f:
        f.write("\n".join(log))
    dist.destroy_process_group()


def test_timeouts():
    n = 3
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(n, f"tcp://127.0.0.1:{free_port()}", d), nprocs=n)
        for r in range(n):
            print(open(os.path.join(d, f"r{r}.txt")).read())
