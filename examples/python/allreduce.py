"""The Python package in a few lines: run as processes with
    build/tools/nexar-run -n 4 -- python3 examples/python/allreduce.py
(nexar-run starts a seed and sets NEXAR_SEED_ADDR for each copy)."""
import array

import nexar

with nexar.init_from_env() as c:
    x = array.array("f", [c.rank + 1.0] * 4)
    c.all_reduce(x)                                    # in place, sum over ranks
    names = c.allgather_obj(f"rank {c.rank}")          # pickled objects
    total = c.bcast_obj(sum(x) if c.rank == 0 else None, root=0)
    if c.rank == 0:
        print(f"{c.world_size} ranks: all_reduce -> {list(x)}, allgather_obj -> {names}, "
              f"bcast_obj -> {total}")
