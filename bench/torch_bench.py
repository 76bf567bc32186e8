#!/usr/bin/python3
"""torch.distributed microbenchmark: backend "nexar" against "gloo" in the same
processes (the default group is nexar, a gloo group spans the same ranks; the
two are measured alternately, 3 repetitions, medians), and DDP step time.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_bench.py [--worlds 2,4] [--out DIR]

Each process computes with one thread (OMP_NUM_THREADS, default 1, as
torchrun sets it). Prints markdown tables (time per op in us; ratio = gloo time / nexar time, so
> 1 means nexar is faster) and writes them to DIR/ratio.md when --out is given.
Not a timed test.
"""
import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [8, 64, 512, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
OPS = ["all_reduce", "all_gather", "broadcast", "all_to_all_single"]


def human(b):
    for unit, s in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= s:
            return f"{b // s} {unit}"
    return f"{b} B"


def make_op(name, nbytes, n, group):
    count = max(nbytes // 4, n)  # f32 elements; all_to_all needs one per rank
    count -= count % n
    x = torch.ones(count)
    if name == "all_reduce":
        return lambda: dist.all_reduce(x, group=group)
    if name == "broadcast":
        return lambda: dist.broadcast(x, src=0, group=group)
    if name == "all_gather":
        outs = [torch.empty(count) for _ in range(n)]
        return lambda: dist.all_gather(outs, x, group=group)
    y = torch.empty(count)
    return lambda: dist.all_to_all_single(y, x, group=group)


def timed(fn, nbytes, group):
    fn()  # warm up
    iters = 2 if nbytes >= 16 << 20 else 5 if nbytes >= 1 << 20 else 20 if nbytes >= 64 << 10 else 100
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    t = torch.tensor([(time.perf_counter() - t0) / iters])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)  # the slowest rank's time
    return t.item()


def mlp(hidden):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 4))


def ddp_step_time(group, rank, hidden, steps=50):
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(mlp(hidden), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(steps + 5):
        x = torch.randn(32, 16, generator=g)
        t0 = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), x[:, :4]).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times[5:])])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def worker(rank, n, port, out, reps):
    import nexar.torch  # noqa: F401
    # one compute thread per process, as torchrun sets (OMP_NUM_THREADS=1)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nexar", rank=rank, world_size=n)
    groups = {"nexar": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    res = {}
    for op in OPS:
        for size in SIZES:
            fns = {b: make_op(op, size, n, g) for b, g in groups.items()}
            samples = {b: [] for b in groups}
            for _ in range(reps):
                for b in groups:
                    samples[b].append(timed(fns[b], size, groups[b]))
            res[(op, size)] = {b: statistics.median(v) for b, v in samples.items()}
            if rank == 0:
                r = res[(op, size)]
                print(f"  n={n} {op} {human(size)}: nexar {r['nexar'] * 1e6:.1f} us, gloo {r['gloo'] * 1e6:.1f} us",
                      file=sys.stderr, flush=True)
    for hidden in (64, 1024):
        samples = {b: [] for b in groups}
        for _ in range(reps):
            for b, g in groups.items():
                samples[b].append(ddp_step_time(g, rank, hidden))
        res[("ddp", hidden)] = {b: statistics.median(v) for b, v in samples.items()}
    if rank == 0:
        torch.save(res, out)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    lines = [f"torch {torch.__version__}, {os.cpu_count()} CPUs, f32, times in us (slowest rank, "
             f"median of {a.reps}); ratio = gloo / nexar (> 1: nexar faster)", ""]
    for n in [int(w) for w in a.worlds.split(",")]:
        first = len(lines)
        with tempfile.TemporaryDirectory() as d:
            f = os.path.join(d, "res.pt")
            mp.spawn(worker, args=(n, free_port(), f, a.reps), nprocs=n)
            res = torch.load(f)
        lines += [f"### {n} processes", "", "| op | size | nexar us | gloo us | ratio |", "|---|---|---|---|---|"]
        for op in OPS:
            for size in SIZES:
                r = res[(op, size)]
                lines.append(f"| {op} | {human(size)} | {r['nexar'] * 1e6:.1f} | {r['gloo'] * 1e6:.1f} | "
                             f"{r['gloo'] / r['nexar']:.2f}x |")
        lines += ["", "| DDP step (MLP 16-h-h-4, batch 32) | nexar ms | gloo ms | ratio |", "|---|---|---|---|"]
        for hidden in (64, 1024):
            r = res[("ddp", hidden)]
            lines.append(f"| h = {hidden} | {r['nexar'] * 1e3:.3f} | {r['gloo'] * 1e3:.3f} | "
                         f"{r['gloo'] / r['nexar']:.2f}x |")
        lines.append("")
        text = "\n".join(lines)
        print("\n".join(lines[first:] if first > 2 else lines), flush=True)
        if a.out:  # after every world, so a partial run keeps what it measured
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "ratio.md"), "w") as fh:
                fh.write(text + "\n")


if __name__ == "__main__":
    sys.exit(main())
