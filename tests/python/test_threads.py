"""The GIL is released by blocked calls, and failure callbacks (a library
thread taking the GIL) fire while the main thread is blocked in a
collective, without deadlock."""

import random
import threading
import time

import pytest

import nexar
from nxtest import close_all, world


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
