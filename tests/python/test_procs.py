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
