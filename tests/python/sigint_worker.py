"""Run by test_sigint.py: blocks, and reports when Ctrl-C (SIGINT from the
parent) interrupts it, on the system-wide monotonic clock."""
import time

import nexar

a, b = nexar.bootstrap_local(2)

# 1. Request.wait(): KeyboardInterrupt leaves the request pending
buf = bytearray(8)
req = a.recv(buf, 1, tag=1, async_op=True)
try:
    print("ready wait", flush=True)  # inside the try: an early signal still counts
    req.wait()
    raise SystemExit("wait returned")
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
assert not req.test()
b.send(b"12345678", 0, tag=1)
assert req.wait() == b"12345678"

# 2. a blocking barrier that rank 1 never enters: aborts the client
try:
    print("ready barrier", flush=True)
    a.barrier()
    raise SystemExit("barrier returned")
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
try:
    a.barrier()
    raise SystemExit("barrier on an aborted client worked")
except nexar.AbortedError:
    pass
t0 = time.monotonic()
try:
    # rank 0 entered this barrier (its token went out) before it aborted:
    # if the token is read before the abort notice, this one completes, as
    # it may; the next one rank 0 never enters, and the notice (which came
    # after the token) fails it at once, not after a timeout
    b.barrier()
    b.barrier()
    raise SystemExit("the peer's barriers worked")
except (nexar.AbortedError, nexar.PeerLostError):
    pass
assert time.monotonic() - t0 < 5
a.close()
b.close()

# 3. a call without an _nb form (probe runs on a helper thread): aborts too
c, d = nexar.bootstrap_local(2)
try:
    print("ready probe", flush=True)
    c.probe(1, tag=5)
    raise SystemExit("probe returned")
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
try:
    c.probe(1, tag=5)
    raise SystemExit("probe on an aborted client worked")
except nexar.AbortedError:
    pass
c.close()
d.close()

# 4. cluster formation (join to a seed whose world never forms): abandoned
seed = nexar.Seed("127.0.0.1:0", 2)
try:
    print("ready join", flush=True)
    nexar.join(seed.addr, token=seed.token)
    raise SystemExit("join returned")
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
print("sigint ok", flush=True)
