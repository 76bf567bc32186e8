"""Failures and membership from Python: failed_ranks after a peer aborts,
recover() and rebuild_excluding() give a successor with epoch + 1, split
children keep the epoch, elastic departures and a joiner into a formed world,
agree and revoke."""

import time

import pytest

import nexar
from nxtest import close_all, run_ranks, world

# short enough for a quick test, long enough that a loaded machine is not a false suspicion
FAST = dict(heartbeat_interval_ms=100, heartbeat_timeout_ms=1000, recovery_timeout_ms=20000)


def _wait_dead(c, want, limit=10.0):
    t0 = time.monotonic()
    while c.failed_ranks() != want:
        assert time.monotonic() - t0 < limit, f"failed_ranks {c.failed_ranks()}, want {want}"
        time.sleep(0.02)


@pytest.mark.parametrize("how", ["recover", "rebuild_excluding"])
def test_successor_after_a_rank_aborts(how):
    cs = world(3, **FAST)
    try:
        cs[2].abort()
        for c in cs[:2]:
            _wait_dead(c, [2])
        def dead_barrier(c):
            with pytest.raises(nexar.PeerLostError) as ei:
                c.barrier()
            assert "rank 2" in str(ei.value), str(ei.value)

        run_ranks(cs[:2], dead_barrier)

        def body(c):
            s = c.recover() if how == "recover" else c.rebuild_excluding([2])
            assert (s.rank, s.world_size, s.epoch) == (c.rank, 2, c.epoch + 1)
            b = bytearray([c.rank + 1]) * 3
            s.all_reduce(b, dtype="u8")
            assert b == bytearray([3]) * 3
            cid = s.comm_id
            s.close()
            return cid

        ids = run_ranks(cs[:2], body)
        assert ids[0] == ids[1] != 0
    finally:
        close_all(cs)


def test_rebuild_excluding_oneself_is_invalid():
    cs = world(2, **FAST)
    try:
        with pytest.raises(nexar.InvalidArgumentError):
            cs[0].rebuild_excluding([0])
    finally:
        close_all(cs)


def test_elastic_leave():
    cs = world(3)
    try:
        assert run_ranks(cs, lambda c: c.elastic_checkpoint()) == [None, None, None]
        cs[2].elastic_leave()
        out = run_ranks(cs, lambda c: c.elastic_checkpoint())
        assert out[2] is None and out[0] and out[1]
        for r in (0, 1):
            assert (out[r].rank, out[r].world_size, out[r].epoch) == (r, 2, 1)
            info = out[r].elastic_info()
            assert (info["old_world"], info["new_world"], info["left"], info["old_rank"]) == (3, 2, 1, r)
        assert out[0].comm_id == out[1].comm_id
        with pytest.raises(nexar.AbortedError) as ei:
            cs[2].barrier()
        assert "left at checkpoint" in str(ei.value)
        for s in out[:2]:
            s.close()
    finally:
        close_all(cs)


def test_elastic_join():
    """A joiner into a formed world of 2 gets in at the members' checkpoint."""
    import threading
    with nexar.Seed("127.0.0.1:0", 2) as seed:
        cs = [None, None]

        def member(i):
            cs[i] = nexar.join(seed.addr, seed.token)

        ts = [threading.Thread(target=member, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        got = {}
        jt = threading.Thread(target=lambda: got.setdefault("c", nexar.join(seed.addr, seed.token)))
        jt.start()

        def grow(c):
            for _ in range(500):
                n = c.elastic_checkpoint()
                if n is not None:
                    return n
                time.sleep(0.01)
            raise AssertionError("no joiner admitted")

        out = run_ranks(cs, grow)
        jt.join(60)
        j = got["c"]
        try:
            assert [o.world_size for o in out] + [j.world_size] == [3, 3, 3]
            assert (j.rank, j.epoch, j.elastic_info()["i_am_new"]) == (2, 1, True)
            assert out[0].comm_id == j.comm_id
            import array
            sums = run_ranks(out + [j], lambda c: c.all_reduce(array.array("d", [1.0]))[0])
            assert sums == [3.0, 3.0, 3.0]
        finally:
            for c in out + [j]:
                c.close()
            close_all(cs)


def test_agree_and_revoke():
    cs = world(3, **FAST)
    try:
        assert run_ranks(cs, lambda c: c.agree(0b111 if c.rank != 1 else 0b101)) == [0b101] * 3
        cs[0].revoke()
        def revoked(c):
            with pytest.raises((nexar.AbortedError, nexar.PeerLostError)):
                c.barrier()
            return c.agree(1)
        assert run_ranks(cs, revoked) == [1, 1, 1]
    finally:
        close_all(cs)
