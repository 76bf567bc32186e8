"""The GIL is released by blocked calls, and failure callbacks (a library
thread taking the GIL) fire while the main thread is blocked in a
collective, without deadlock."""

import random
import threading
import time

import pytest

import nexar
from nxtest import close_all, run_ranks, world


def test_gil_released_while_two_ranks_block_in_recv():
    cs = world(3)
    try:
        done = [False]
        count = [0]

        def counter():
            n = 0
            while not done[0]:
                n += 1
            count[0] = n

        got = [None, None]

        def receiver(i):
            b = bytearray(4)
            t0 = time.monotonic()
            cs[i].recv(b, 2, tag=1)
            got[i] = (bytes(b), time.monotonic() - t0)

        rs = [threading.Thread(target=receiver, args=(i,)) for i in (0, 1)]
        for t in rs:
            t.start()
        ct = threading.Thread(target=counter)
        ct.start()
        time.sleep(2.0)
        done[0] = True
        ct.join()
        assert all(g is None for g in got), "a receive returned before anything was sent"
        cs[2].send(b"data", 0, tag=1)
        cs[2].send(b"data", 1, tag=1)
        for t in rs:
            t.join(30)
        assert [g[0] for g in got] == [b"data", b"data"]
        assert min(g[1] for g in got) >= 1.9
        print("counter iterations while two ranks blocked 2 s:", count[0])
        assert count[0] >= 1_000_000, f"the counter thread advanced only {count[0]} times"
    finally:
        close_all(cs)


def test_failure_callback_while_blocked_in_all_reduce_50_runs():
    rng = random.Random(14)
    for run in range(50):
        cs = world(2)
        try:
            seen = []
            fired = threading.Event()

            def cb(dead, c=cs[0]):
                # a library thread holding the GIL; queries are allowed here
                seen.append((list(dead), c.failed_ranks()))
                fired.set()

            cs[0].on_failure(cb)
            t = threading.Timer(rng.uniform(0.0, 0.02), cs[1].abort)
            t.start()
            t0 = time.monotonic()
            with pytest.raises((nexar.AbortedError, nexar.PeerLostError)):
                cs[0].all_reduce(bytearray(4096), dtype="f32")
            assert time.monotonic() - t0 < 10, f"run {run}: all_reduce returned late"
            assert fired.wait(10), f"run {run}: the failure callback did not fire"
            assert seen[0][0] == [1], seen
            t.join()
            cs[0].on_failure(None)
        finally:
            close_all(cs)


def test_callback_exception_goes_to_unraisablehook():
    import sys

    cs = world(2)
    caught = []
    old = sys.unraisablehook
    sys.unraisablehook = lambda u: caught.append(u.exc_value)
    try:
        ev = threading.Event()

        def cb(dead):
            ev.set()
            raise RuntimeError("callback fails on purpose")

        cs[0].on_failure(cb)
        cs[1].abort()
        assert ev.wait(10)
        for _ in range(100):
            if caught:
                break
            time.sleep(0.02)
        assert caught and isinstance(caught[0], RuntimeError)
    finally:
        sys.unraisablehook = old
        close_all(cs)


def test_close_while_another_thread_is_blocked():
    cs = world(2)
    try:
        err = []

        def blocked():
            try:
                cs[0].recv(bytearray(4), 1, tag=3)
            except nexar.NexarError as e:
                err.append(e)

        t = threading.Thread(target=blocked)
        t.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        cs[0].close()  # aborts the blocked receive, then deletes the client
        t.join(10)
        assert not t.is_alive() and time.monotonic() - t0 < 5
        assert len(err) == 1 and isinstance(err[0], nexar.AbortedError), err
        assert cs[0].closed
    finally:
        close_all(cs)


def test_many_async_ops_from_threads_then_close():
    cs = world(2)
    try:
        def body(c):
            reqs = [c.all_reduce(bytearray([c.rank]) * 64, dtype="u8", async_op=True)
                    for _ in range(200)]
            return sum(r.wait() == bytearray([1]) * 64 for r in reqs)

        assert run_ranks(cs, body) == [200, 200]
        # requests still pending at close end with AbortedError, never a crash
        r = cs[0].recv(bytearray(8), 1, tag=9, async_op=True)
        cs[0].close()
        with pytest.raises(nexar.AbortedError):
            r.wait()
    finally:
        close_all(cs)


def test_gil_released_while_the_main_thread_blocks_in_recv():
    """The same with one receiver on the main thread (the sliced wait that
    looks for Ctrl-C)."""
    cs = world(3)
    try:
        done = [False]
        count = [0]

        def counter():
            n = 0
            while not done[0]:
                n += 1
            count[0] = n

        def later():
            time.sleep(2.0)
            done[0] = True
            cs[2].send(b"data", 0, tag=1)
            cs[2].send(b"data", 1, tag=1)

        other = []
        t1 = threading.Thread(target=lambda: other.append(bytes(cs[1].recv(bytearray(4), 2, tag=1))))
        ct = threading.Thread(target=counter)
        lt = threading.Thread(target=later)
        for t in (t1, ct, lt):
            t.start()
        t0 = time.monotonic()
        got = cs[0].recv(bytearray(4), 2, tag=1)
        waited = time.monotonic() - t0
        for t in (t1, ct, lt):
            t.join(30)
        assert got == b"data" and other == [b"data"] and waited >= 1.9
        assert count[0] >= 1_000_000, f"the counter thread advanced only {count[0]} times"
    finally:
        close_all(cs)
