"""Every call against reference values with 4 ranks as processes: the test
starts a nexar.Seed, each process joins with nexar.init_from_env()."""

import os
import subprocess
import sys

import nexar

HERE = os.path.dirname(os.path.abspath(__file__))


def test_four_processes():
    with nexar.Seed("127.0.0.1:0", 4) as seed:
        env = dict(os.environ, NEXAR_SEED_ADDR=seed.addr, NEXAR_CLUSTER_TOKEN=seed.token,
                   NEXAR_WORLD_SIZE="4")
        ps = [subprocess.Popen([sys.executable, os.path.join(HERE, "proc_worker.py")], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
              for _ in range(4)]
        outs = []
        for p in ps:
            try:
                out, _ = p.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                for q in ps:
                    q.kill()
                raise
            outs.append((p.returncode, out))
    for rc, out in outs:
        assert rc == 0, out
    ranks = sorted(int(out.split("rank ")[1].split()[0]) for _, out in outs)
    assert ranks == [0, 1, 2, 3], outs


def test_join_wrong_token_is_auth_error():
    with nexar.Seed("127.0.0.1:0", 1, token="right-token") as seed:
        try:
            nexar.join(seed.addr, token="wrong-token", connect_timeout_ms=5000)
            raise AssertionError("joined with a wrong token")
        except nexar.AuthError as e:
            assert e.code == nexar._nexar.ERR_AUTH and str(e)
        with nexar.join(seed.addr, token=seed.token) as c:
            assert (c.rank, c.world_size) == (0, 1)


def test_torchrun_variables():
    """init_from_env with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (rank 0
    hosts the seed) and a shared NEXAR_CLUSTER_TOKEN: each gets RANK."""
    import random
    import socket
    import secrets

    # a port below Linux's ephemeral range (32768-60999) that nothing here
    # has bound now: tests run alongside (ctest -j) pick ports too
    while True:
        port = random.randint(20000, 31999)
        try:
            for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
                with socket.socket(socket.AF_INET, kind) as s:
                    s.bind(("0.0.0.0", port))
            break
        except OSError:
            continue
    tok = secrets.token_hex(16)
    code = ("import nexar, array\n"
            "with nexar.init_from_env() as c:\n"
            "    x = array.array('i', [c.rank])\n"
            "    c.all_reduce(x)\n"
            "    print('rank', c.rank, 'of', c.world_size, 'sum', x[0], flush=True)\n")
    ps = []
    for r in range(3):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
                   WORLD_SIZE="3", NEXAR_CLUSTER_TOKEN=tok)
        env.pop("NEXAR_SEED_ADDR", None)
        ps.append(subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=90)[0] for p in ps]
    for r, (p, out) in enumerate(zip(ps, outs)):
        assert p.returncode == 0 and f"rank {r} of 3 sum 3" in out, out
