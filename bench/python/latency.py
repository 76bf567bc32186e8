"""Per-call time of small operations through the Python package, as
processes: build/tools/nexar-run -n 2 -- python3 bench/python/latency.py
(compare: build/tools/nexar-perf all_reduce --procs -n 2 -b 8 -e 8)."""
import array
import sys
import time

import nexar

import threading

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
in_thread = len(sys.argv) > 2 and sys.argv[2] == "thread"  # wait in nexar_wait, not in slices


def main():
  with nexar.init_from_env() as c:
      x = array.array("f", [1.0, 2.0])
      for name, fn in [("all_reduce 8 B", lambda: c.all_reduce(x)),
                       ("barrier", lambda: c.barrier()),
                       ("all_reduce 8 B async+wait", lambda: c.all_reduce(x, async_op=True).wait())]:
          for _ in range(200):
              fn()
          c.barrier()
          t0 = time.perf_counter()
          for _ in range(iters):
              fn()
          dt = (time.perf_counter() - t0) / iters
          ts = c.allgather_obj(dt)
          if c.rank == 0:
              print(f"{name:28s} {'thread' if in_thread else 'main':6s} {max(ts) * 1e6:8.1f} us per call (slowest rank), n={c.world_size}")


if in_thread:
    t = threading.Thread(target=main)
    t.start()
    t.join()
else:
    main()
