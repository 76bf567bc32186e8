"""Run by test_pinning.py under PYTHONMALLOC=debug: buffers stay exported
(pinned) while a request is pending, and dropping a request waits."""
import gc
import sys
import threading
import time

import nexar

try:
    import numpy as np
except ImportError:
    np = None

a, b = nexar.bootstrap_local(2)

# a bytearray under a pending receive cannot be resized
buf = bytearray(1000)
req = a.recv(buf, 1, tag=1, async_op=True)
try:
    buf.extend(b"x")
    sys.exit("resized a bytearray under a pending receive")
except BufferError:
    pass
del buf  # the request keeps it alive and exported
gc.collect()
b.send(bytes(range(256)) * 3 + bytes(232), 0, tag=1)
out = req.wait()
assert bytes(out[:256]) == bytes(range(256)) and len(out) == 1000, out[:16]
out.extend(b"x")  # released once finished
del req, out

# dropping a pending request waits for it instead of freeing a buffer in use
r = a.recv(bytearray(4096), 1, tag=2, async_op=True)
threading.Timer(0.3, lambda: b.send(b"\x07" * 4096, 0, tag=2)).start()
t0 = time.monotonic()
del r
gc.collect()
waited = time.monotonic() - t0
assert waited >= 0.25, f"dropping a pending request returned after {waited:.3f} s"

# many temporaries under pending operations: what the library writes lands
# in live buffers (the debug allocator poisons freed ones)
for i in range(100):
    reqs = [a.recv(bytearray(8192), 1, tag=3, async_op=True) for _ in range(4)]
    for k in range(4):
        b.send(bytes([k + i % 200]) * 8192, 0, tag=3, async_op=True).wait()
    gc.collect()
    for k, q in enumerate(reqs):
        got = q.wait()
        assert got == bytes([k + i % 200]) * 8192, (i, k, got[:8])

# collectives with temporaries on both ranks
def rank(c, res):
    rq = [c.all_reduce(bytearray([c.rank + 1]) * 4000, dtype="u8", async_op=True)
          for _ in range(50)]
    gc.collect()
    res[c.rank] = all(q.wait() == bytearray([3]) * 4000 for q in rq)

res = [None, None]
ts = [threading.Thread(target=rank, args=(c, res)) for c in (a, b)]
for t in ts:
    t.start()
for t in ts:
    t.join(60)
assert res == [True, True], res

if np is not None:
    arr = np.zeros(10000)
    req = a.recv(arr, 1, tag=4, async_op=True)
    try:
        arr.resize(20000)  # refused: the exported view holds a reference
        sys.exit("resized a numpy array under a pending receive")
    except (ValueError, BufferError):
        pass
    b.send(np.arange(10000, dtype=np.float64), 0, tag=4)
    assert (req.wait() == np.arange(10000)).all()

a.close()
b.close()
print("pinning ok", flush=True)
