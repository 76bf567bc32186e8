"""Failures and membership from Python: failed_ranks after a peer aborts,
recover() and rebuild_excluding() give a successor with epoch + 1, split
children keep the epoch, elastic calls report what the library supports."""

import time

import pytest

import nexar
from nxtest import close_all, run_ranks, world

FAST = dict(heartbeat_interval_ms=50, heartbeat_timeout_ms=300, recovery_timeout_ms=10000)


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


def test_elastic_calls_report_unsupported():
    cs = world(1)
    try:
        with pytest.raises(nexar.UnsupportedError):
            cs[0].elastic_checkpoint()
        with pytest.raises(nexar.UnsupportedError):
            cs[0].elastic_leave()
    finally:
        close_all(cs)
