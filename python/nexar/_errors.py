"""Exceptions of the nexar package: one class per NEXAR_ERR_* code.

Every error raised by a nexar call is a :class:`NexarError` (or a
subclass) with ``code`` (the negative NEXAR_ERR_* value), ``name`` (e.g.
``"PEER_LOST"``) and ``message``; ``str(e)`` is the message, which for a
failure inside the library is its ``nexar_last_error()`` sentence (the
operation, its sequence number, the peer rank and the reason).
"""

import builtins

from . import _nexar


class NexarError(Exception):
    """A nexar call failed. Attributes: code, name, message."""

    code = 0
    name = "ERROR"

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message
        self.name = _NAMES.get(code, "UNKNOWN")

    def __str__(self):
        return self.message

    def __reduce__(self):
        return (type(self), (self.code, self.message))


class InvalidArgumentError(NexarError, ValueError):
    """NEXAR_ERR_INVALID_ARGUMENT: a bad argument, dtype, op, size or config field."""


class InvalidRankError(NexarError, ValueError):
    """NEXAR_ERR_INVALID_RANK: a rank or root outside the communicator."""


class SizeMismatchError(NexarError):
    """NEXAR_ERR_SIZE_MISMATCH: a message or buffer of another length than asked."""


class MismatchError(NexarError):
    """NEXAR_ERR_MISMATCH: ranks called different collectives or arguments."""


class TimeoutError(NexarError, builtins.TimeoutError):
    """NEXAR_ERR_TIMEOUT: no progress within the configured timeout."""


class PeerLostError(NexarError):
    """NEXAR_ERR_PEER_LOST: a peer the operation needs is dead or unreachable."""


class AbortedError(NexarError):
    """NEXAR_ERR_ABORTED: the communicator was aborted (here or on a peer)."""


class AuthError(NexarError):
    """NEXAR_ERR_AUTH: bad cluster token or certificate."""


class TLSError(NexarError):
    """NEXAR_ERR_TLS: a TLS failure (handshake, credentials)."""


class ProtocolError(NexarError):
    """NEXAR_ERR_PROTOCOL: malformed or unexpected bytes from the network."""


class NexarIOError(NexarError, OSError):
    """NEXAR_ERR_IO: an operating-system I/O failure."""

    def __init__(self, code, message):
        NexarError.__init__(self, code, message)


class NoMemoryError(NexarError, MemoryError):
    """NEXAR_ERR_NOMEM: out of memory."""


class RpcNoHandlerError(NexarError):
    """NEXAR_ERR_RPC_NO_HANDLER: the remote rank has no handler for this fn_id."""


class RpcFailedError(NexarError):
    """NEXAR_ERR_RPC_FAILED: the remote handler failed (a Python handler raised)."""


class UnsupportedError(NexarError):
    """NEXAR_ERR_UNSUPPORTED: not supported by this build or for these arguments."""


_CLASSES = {
    _nexar.ERR_INVALID_ARGUMENT: InvalidArgumentError,
    _nexar.ERR_INVALID_RANK: InvalidRankError,
    _nexar.ERR_SIZE_MISMATCH: SizeMismatchError,
    _nexar.ERR_MISMATCH: MismatchError,
    _nexar.ERR_TIMEOUT: TimeoutError,
    _nexar.ERR_PEER_LOST: PeerLostError,
    _nexar.ERR_ABORTED: AbortedError,
    _nexar.ERR_AUTH: AuthError,
    _nexar.ERR_TLS: TLSError,
    _nexar.ERR_PROTOCOL: ProtocolError,
    _nexar.ERR_IO: NexarIOError,
    _nexar.ERR_NOMEM: NoMemoryError,
    _nexar.ERR_RPC_NO_HANDLER: RpcNoHandlerError,
    _nexar.ERR_RPC_FAILED: RpcFailedError,
    _nexar.ERR_UNSUPPORTED: UnsupportedError,
}
_NAMES = {code: n[4:] for n in dir(_nexar) if n.startswith("ERR_") for code in [getattr(_nexar, n)]}


def _from_code(code, message):
    """The exception for a NEXAR_ERR_* code (called by the C extension)."""
    return _CLASSES.get(code, NexarError)(code, message)
