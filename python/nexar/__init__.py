"""nexar: Python bindings of libnexar, a distributed runtime over QUIC with
point-to-point messaging, RPC and MPI-style collectives.

    import nexar
    with nexar.init_from_env() as c:          # or nexar.join(addr, token), nexar.bootstrap_local(n)
        import numpy as np
        g = np.ones(1024, dtype=np.float32)
        c.all_reduce(g)                        # in place, sum over ranks
        r = c.all_reduce(g, op="max", async_op=True); r.wait()

Every blocking call releases the GIL and wakes for Ctrl-C (see
nexar._client for what an interrupt does to the client). Errors raise
NexarError subclasses; str(e) is the library's sentence about the failure.
``import nexar.torch`` registers the torch.distributed backend "nexar".
"""

from . import _nexar
from ._errors import (
    AbortedError,
    AuthError,
    InvalidArgumentError,
    InvalidRankError,
    MismatchError,
    NexarError,
    NexarIOError,
    NoMemoryError,
    PeerLostError,
    ProtocolError,
    RpcFailedError,
    RpcNoHandlerError,
    SizeMismatchError,
    TimeoutError,
    TLSError,
    UnsupportedError,
)
from ._errors import _from_code
from ._buffers import DTYPES, OPS, _adapt

import threading as _threading

_nexar._set_hooks(_from_code, _adapt, _threading.main_thread().ident)

from ._client import (  # noqa: E402  (the hooks must be set first)
    COLOR_NONE,
    Client,
    Compressor,
    Request,
    Seed,
    bootstrap_local,
    config_defaults,
    init_from_env,
    join,
    wait_all,
)

__version__ = _nexar.version()


def version():
    """Version of the loaded libnexar, "MAJOR.MINOR.PATCH"."""
    return _nexar.version()


def strerror(code):
    """Name and text of a NEXAR_ERR_* code."""
    return _nexar.strerror(int(code))


__all__ = [
    "AbortedError", "AuthError", "COLOR_NONE", "Client", "Compressor", "DTYPES", "InvalidArgumentError",
    "InvalidRankError", "MismatchError", "NexarError", "NexarIOError", "NoMemoryError", "OPS",
    "PeerLostError", "ProtocolError", "Request", "RpcFailedError", "RpcNoHandlerError", "Seed",
    "SizeMismatchError", "TLSError", "TimeoutError", "UnsupportedError", "bootstrap_local",
    "config_defaults", "init_from_env", "join", "strerror", "version", "wait_all",
]
