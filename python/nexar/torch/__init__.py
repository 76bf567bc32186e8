"""The torch.distributed backend "nexar".

``import nexar.torch`` registers the backend, after which::

    import torch.distributed as dist
    dist.init_process_group("nexar", ...)   # any init method: env://, tcp://, file://, torchrun

works like "gloo" for CPU tensors. The group's nexar world forms through the
store torch hands the backend: group rank 0 starts a seed on an ephemeral port
and publishes its address and a fresh random token in the store; the others
read them and join. No port or variable beyond torch's own is needed.
``dist.new_group(ranks)`` forms a new world of its members the same way (under
the group's own store prefix).

Supported: allreduce (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR,
PREMUL_SUM), allreduce_coalesced, broadcast, reduce, all_gather (also with
uneven sizes), _all_gather_base, gather, scatter, reduce_scatter (also
uneven), _reduce_scatter_base, all_to_all_single (with split sizes),
all_to_all, send, recv (also from any source), barrier; dtypes float32,
float64, float16, bfloat16, int8, uint8, int32, int64 and bool (SUM is logical
or, PRODUCT logical and). Failures (a dead rank, a timeout) raise
RuntimeError naming the operation, the rank and libnexar's reason.

Environment: every NEXAR_* variable of libnexar applies (for example
NEXAR_HEARTBEAT_TIMEOUT_MS: how soon a dead rank is noticed); the group's
timeout is every operation's no-progress limit. NEXAR_SEED_HOST overrides
the address rank 0 publishes (default MASTER_ADDR, else this host's first
non-loopback IPv4 address).
"""
import torch  # noqa: F401  (loads libtorch before the extension)
import torch.distributed as dist

from . import _C

ProcessGroupNexar = _C.ProcessGroupNexar
BACKEND = "nexar"


def create_process_group(store, rank, world_size, timeout):
    """The creator torch.distributed calls for backend "nexar"."""
    return _C.create_process_group(store, rank, world_size, timeout)


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, create_process_group)

__all__ = ["ProcessGroupNexar", "create_process_group", "BACKEND"]
