"""Every call of nexar.Client against reference values, 4 ranks as threads
(and a world of 1 and 3), every test dtype (f32 f64 f16 i32 u8, bf16
explicit)."""

import pytest

import nexar
import opscheck
from nxtest import DTYPES, close_all, run_ranks, world


@pytest.fixture(scope="module")
def w4():
    cs = world(4)
    yield cs
    close_all(cs)


@pytest.mark.parametrize("dt", DTYPES)
def test_collectives_4_threads(w4, dt):
    run_ranks(w4, lambda c: opscheck.check_dtype(c, dt))


@pytest.mark.parametrize("dt", DTYPES)
def test_variable_count_collectives_4_threads(w4, dt):
    run_ranks(w4, lambda c: opscheck.check_v(c, dt))


def test_bitwise_ops_refuse_floats(w4):
    def body(c):
        with pytest.raises(nexar.InvalidArgumentError):
            c.all_reduce(bytearray(8), op="bxor", dtype="f32")
        c.barrier()

    run_ranks(w4, body)


def test_p2p_4_threads(w4):
    run_ranks(w4, opscheck.check_p2p)


def test_misc_4_threads(w4):
    run_ranks(w4, opscheck.check_misc)


def test_compressed_4_threads(w4):
    run_ranks(w4, opscheck.check_compressed)


def test_large_4_threads(w4):
    run_ranks(w4, opscheck.check_large)


@pytest.mark.parametrize("n", [1, 3])
def test_other_worlds(n):
    cs = world(n)
    try:
        run_ranks(cs, lambda c: opscheck.check_all(c, ["f32", "bf16"]))
    finally:
        close_all(cs)


def test_attributes_and_context_manager():
    cs = world(2)
    for i, c in enumerate(cs):
        assert (c.rank, c.world_size, c.comm_id, c.epoch) == (i, 2, 0, 0)
        assert "rank %d of 2" % i in repr(c)
    with cs[0], cs[1]:
        pass
    assert cs[0].closed and cs[1].closed
    with pytest.raises(nexar.InvalidArgumentError):
        cs[0].barrier()
    cs[0].close()  # idempotent
