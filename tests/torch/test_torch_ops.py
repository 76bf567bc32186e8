"""Every op of the "nexar" backend against a local reference (nxt_ops), under
mp.spawn with env://, tcp:// and file://, and under torchrun."""
import os
import socket
import subprocess
import sys
import tempfile

import pytest
import torch.multiprocessing as mp

import nxt_ops

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_env(rank, n, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    nxt_ops.spawn_main(rank, n, "env://")


@pytest.mark.parametrize("n", [2, 4])
def test_spawn_env(n):
    mp.spawn(spawn_env, args=(n, free_port()), nprocs=n)


def test_spawn_tcp():
    mp.spawn(nxt_ops.spawn_main, args=(3, f"tcp://127.0.0.1:{free_port()}"), nprocs=3)


def test_spawn_file():
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(nxt_ops.spawn_main, args=(2, "file://" + os.path.join(d, "store")), nprocs=2)


def test_torchrun():
    # --redirects 1 --tee 1: works around Debian's torchrun crash on Python 3.11
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3",
           "--redirects", "1", "--tee", "1", os.path.join(HERE, "nxt_ops.py")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=150)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    for r in range(3):
        assert f"rank {r} of 3: all ops ok" in out, out[-4000:]
