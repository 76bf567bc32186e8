"""DDP training under "nexar" against Gloo in the same processes, the
SyncBatchNorm statistics exchange over _all_gather_base, and a rank killed
during training."""
import multiprocessing
import os
import signal
import socket
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import nexar.torch  # noqa: F401

STEPS = 50


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mlp():
    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts them anyway)
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 4))


def batches(rank, steps):
    g = torch.Generator().manual_seed(1234 + rank)
    for _ in range(steps):
        x = torch.randn(32, 16, generator=g)
        yield x, (x[:, :4] * 2 - x[:, 4:8]).detach()


def train(pg, rank, steps, on_step=None):
    model = DDP(mlp(), process_group=pg)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for k, (x, y) in enumerate(batches(rank, steps)):
        if on_step:
            on_step(k)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def sync_bn_stats(rank, n, pg):
    """The exchange of torch's SyncBatchNorm (its CUDA-only module cannot run on
    CPU in torch 1.13): every rank's [mean, invstd, count] gathered with
    _all_gather_base, combined into the global statistics, against BatchNorm
    over the whole batch."""
    C = 5
    xs = [torch.randn(4 + 3 * r, C, generator=torch.Generator().manual_seed(r)) for r in range(n)]
    x = xs[rank]
    eps = 1e-5
    mean, var = x.mean(0), x.var(0, unbiased=False)
    combined = torch.cat([mean, torch.rsqrt(var + eps), torch.tensor([float(x.shape[0])])])
    flat = torch.empty(n * combined.numel())
    dist._all_gather_base(flat, combined, group=pg)
    allst = flat.view(n, 2 * C + 1)
    means, invstd, counts = allst[:, :C], allst[:, C:2 * C], allst[:, 2 * C:]
    vars_ = invstd.pow(-2) - eps
    total = counts.sum()
    gmean = (means * counts).sum(0) / total
    gvar = ((vars_ + (means - gmean).pow(2)) * counts).sum(0) / total
    full = torch.cat(xs)
    torch.testing.assert_close(gmean, full.mean(0), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gvar, full.var(0, unbiased=False), rtol=1e-4, atol=1e-4)
    bn = torch.nn.BatchNorm1d(C, affine=False, momentum=None)
    ref = bn(full)[sum(len(a) for a in xs[:rank]):][:len(x)]
    torch.testing.assert_close((x - gmean) * torch.rsqrt(gvar + eps), ref, rtol=1e-4, atol=1e-4)


def ddp_worker(rank, n, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nexar", rank=rank, world_size=n)
    gloo = dist.new_group(backend="gloo")
    sync_bn_stats(rank, n, dist.group.WORLD)
    t0 = time.perf_counter()
    p_nexar = train(dist.group.WORLD, rank, STEPS)
    t1 = time.perf_counter()
    p_gloo = train(gloo, rank, STEPS)
    t2 = time.perf_counter()
    torch.save({"nexar": p_nexar, "gloo": p_gloo, "t": (t1 - t0, t2 - t1)}, os.path.join(out, f"r{rank}.pt"))
    dist.destroy_process_group()


def test_ddp_matches_gloo():
    n = 2
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(ddp_worker, args=(n, free_port(), d), nprocs=n)
        res = [torch.load(os.path.join(d, f"r{r}.pt")) for r in range(n)]
    for r in range(1, n):  # bit-identical on every rank
        for a, b in zip(res[0]["nexar"], res[r]["nexar"]):
            assert torch.equal(a, b), f"rank {r} parameters differ from rank 0's"
    for a, b in zip(res[0]["nexar"], res[0]["gloo"]):  # the same training as Gloo's
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # training moved the parameters (the test can fail)
    assert any(not torch.equal(a, b) for a, b in zip(res[0]["nexar"], list(mlp().parameters())))
    print("ddp %d steps: nexar %.3f s, gloo %.3f s" % (STEPS, *res[0]["t"]))


def killed_worker(rank, n, port, out, victim):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nexar", rank=rank, world_size=n)
    died = [0.0]

    def on_step(k):
        if k == 5:
            dist.barrier()  # everyone is at step 5
            died[0] = time.time()
            if rank == victim:
                os.kill(os.getpid(), signal.SIGKILL)

    try:
        train(dist.group.WORLD, rank, 1000, on_step)
        msg = "no error"
    except RuntimeError as e:
        msg = "RuntimeError: " + str(e)
    with open(os.path.join(out, f"r{rank}.txt"), "w") as f:
        f.write("%.3f\n%s" % (time.time() - died[0], msg))
    os._exit(0)  # the group cannot be torn down gracefully with a dead member


def test_killed_rank_raises():
    n, victim = 3, 2
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        ps = [ctx.Process(target=killed_worker, args=(r, n, port, d, victim)) for r in range(n)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(90)
        for p in ps:
            if p.is_alive():
                p.kill()
                raise AssertionError("a survivor hung after the kill")
        assert ps[victim].exitcode == -signal.SIGKILL
        for r in range(n):
            if r == victim:
                continue
            assert ps[r].exitcode == 0, f"rank {r} exit code {ps[r].exitcode}"
            with open(os.path.join(d, f"r{r}.txt")) as f:
                took, msg = f.read().split("\n", 1)
            assert msg.startswith("RuntimeError"), f"rank {r}: {msg}"
            assert f"rank {victim}" in msg, f"rank {r}: the error does not name rank {victim}: {msg}"
            # heartbeat timeout 1.5 s (conftest): well within 10 s
            assert float(took) < 10, f"rank {r} took {took} s to notice"
            print(f"rank {r}: {float(took):.2f} s: {msg[:300]}")
