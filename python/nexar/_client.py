"""nexar.Client: a communicator, with every operation of the C API.

Threading: every method may be called from any thread; blocking calls
release the GIL. As in C, collectives on one client must be issued in the
same order on every rank (when several threads issue them, the application
orders them). A Request is used by one thread at a time.

Ctrl-C: in the main thread (the only one Python delivers KeyboardInterrupt
to), a blocked call waits in ~20 ms slices (testing the request, sleeping
briefly) and looks for signals between them; other threads wait inside the
library directly, which is the fastest wake-up. A KeyboardInterrupt
in a *blocking* call aborts the client (nexar_abort: its peers learn at once
and fail with AbortedError instead of waiting for a timeout; afterwards only
queries and close() work on it), because one rank cannot withdraw from a
collective or a transfer its peers are part of. ``Request.wait()`` instead
leaves its request pending, so it may be waited again. Interrupting
``join``/``bootstrap_local``/``init_from_env`` abandons the formation (the
half-formed client is deleted when it completes).
"""

import array
import atexit
import pickle
import struct
import threading
import weakref

from . import _nexar
from ._buffers import DTYPES, _adapt, dtype_code, like, nbytes, op_code
from ._errors import InvalidArgumentError, NexarError

COLOR_NONE = _nexar.COLOR_NONE
_live = weakref.WeakSet()
_live_lock = threading.Lock()

_ENUMS = {
    "recovery_policy": {"automatic": 0, "auto": 0, "manual": 1, "abort": 2},
    "topology": {"full_mesh": 0, "k_regular": 1, "hypercube": 2},
}


def _config(token=None, config=None):
    """The dict of nexar_config fields the C layer applies over the defaults
    and the NEXAR_* environment."""
    cfg = {}
    for k, v in (config or {}).items():
        if k in _ENUMS and isinstance(v, str):
            s = v.lower()
            if k == "topology" and s.startswith("k_regular:"):
                cfg["topology_degree"] = int(s.split(":", 1)[1])
                s = "k_regular"
            if s not in _ENUMS[k]:
                raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT,
                                           f"config: {k}={v!r} is not one of {sorted(_ENUMS[k])}")
            v = _ENUMS[k][s]
        elif isinstance(v, bool):
            v = int(v)
        cfg[k] = v
    if token is not None:
        cfg["cluster_token"] = token
    return cfg


def bootstrap_local(world_size, **config):
    """All ``world_size`` ranks in this process, connected over loopback
    (tests, one node): a list of Clients sorted by rank. Use each from its
    own thread for collectives. ``config``: nexar_config fields (see
    :func:`config_defaults`). Raises NexarError (e.g. InvalidArgumentError,
    TimeoutError)."""
    return [Client._wrap(c, 0) for c in _nexar.bootstrap_local(int(world_size), _config(None, config))]


def join(addr, token=None, **config):
    """Joins the world of the seed at ``addr`` ("host:port") with the cluster
    ``token`` (default: NEXAR_CLUSTER_TOKEN); returns once the mesh is
    connected. A seed whose world has formed queues the joiner; this returns
    once the members' next elastic_checkpoint() admits it (elastic_info()
    has i_am_new True). Raises AuthError (wrong token), TimeoutError
    (connect_timeout_ms; queued: elastic_checkpoint_timeout_ms),
    PeerLostError (a member died during formation), IOError-like NexarError
    (no seed), InvalidArgumentError."""
    c = _nexar.join(str(addr), _config(token, config))
    return Client._wrap(c, c.epoch)


def init_from_env():
    """Joins as the environment says: NEXAR_SEED_ADDR (+ NEXAR_WORLD_SIZE,
    NEXAR_RANK; what nexar-run sets), or torchrun's MASTER_ADDR,
    MASTER_PORT, RANK, WORLD_SIZE (+ NEXAR_CLUSTER_TOKEN). Raises
    InvalidArgumentError (missing or malformed variables) or the errors of
    :func:`join`."""
    return Client._wrap(_nexar.init_from_env(), 0)


def config_defaults():
    """The effective nexar_config: defaults plus NEXAR_* environment."""
    return _nexar.config_defaults()


class Seed:
    """A discovery seed serving on a background thread (not on the data
    path): ``Seed("127.0.0.1:0", 4)``; workers ``nexar.join(seed.addr,
    seed.token)``. Without a token (argument, config or NEXAR_CLUSTER_TOKEN)
    the seed draws one from the OS. A context manager; close() stops it."""

    def __init__(self, listen="127.0.0.1:0", world_size=1, token=None, **config):
        self._s = _nexar.seed_new(str(listen), int(world_size), _config(token, config))

    @property
    def addr(self):
        """The address the seed listens on, "host:port"."""
        return self._s.addr

    @property
    def token(self):
        """The cluster token workers must present."""
        return self._s.token

    def wait(self, timeout_ms=0):
        """Waits until the world has formed (0: no limit). TimeoutError."""
        self._s.wait(int(timeout_ms))

    def close(self):
        self._s.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Compressor:
    """A gradient compressor for Client.all_reduce_compressed (immutable;
    calls may share one). Compressor.topk(ratio) keeps the ratio*count
    largest-magnitude elements; Compressor.randomk(ratio, seed) keeps
    ratio*count drawn from seed and the call. ratio in (0, 1], else
    InvalidArgumentError."""

    __slots__ = ("_cap", "kind", "ratio")

    def __init__(self, kind, ratio, seed=0):
        if kind not in ("topk", "randomk"):
            raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT,
                                       f"compressor kind {kind!r}: 'topk' or 'randomk'")
        self._cap = _nexar.Comm.compressor(0 if kind == "topk" else 1, float(ratio), int(seed))
        self.kind, self.ratio = kind, float(ratio)

    @classmethod
    def topk(cls, ratio):
        """Keeps the ratio*count largest-magnitude elements."""
        return cls("topk", ratio)

    @classmethod
    def randomk(cls, ratio, seed=0):
        """Keeps ratio*count elements drawn from seed and the call."""
        return cls("randomk", ratio, seed)

    def __repr__(self):
        return f"<nexar.Compressor {self.kind} {self.ratio}>"


def _out(out, recv, send, nbytes_):
    if recv is not None and out is not None:
        raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT, "pass recv or out=, not both")
    r = recv if recv is not None else out
    return like(send, nbytes_) if r is None else r


class Client:
    """A communicator: this process's rank in a world of ranks, and every
    operation on it. Made by :func:`bootstrap_local`, :func:`join`,
    :func:`init_from_env`, :meth:`split` and :meth:`recover`. A context
    manager: ``with nexar.init_from_env() as c: ...`` closes it.

    Buffers are any C-contiguous object with the buffer protocol (numpy
    arrays, bytearray, memoryview, array.array) or a CPU torch tensor; the
    element type comes from the buffer's format ('f' f32, 'd' f64, 'e' f16,
    'b' i8, 'B'/'?' u8, 'i'/'l'/'q' i32/i64 by size, 'I'/'L'/'Q' u32/u64),
    or from ``dtype=`` ("f32", "bf16", ... or a numpy/torch dtype), which
    reads the bytes as that type (bf16 has no format code: pass
    ``dtype="bf16"`` with a uint16 array). Outputs are written in place; ops
    with a separate output take it as ``recv``/``out=`` or allocate one like
    the input. Every operation accepts ``async_op=True`` and then returns a
    :class:`Request` whose ``wait()`` returns what the blocking call would.

    Errors are :class:`NexarError` subclasses. Reduction ops: "sum" "prod"
    "min" "max" (and "avg" "band" "bor" "bxor" where the library has them).
    """

    __slots__ = ("_c", "_epoch", "_obj_send_lock", "_obj_recv_lock", "__weakref__")

    @classmethod
    def _wrap(cls, comm, epoch):
        if comm is None:
            return None
        self = cls.__new__(cls)
        self._c = comm
        self._epoch = epoch
        self._obj_send_lock = threading.Lock()
        self._obj_recv_lock = threading.Lock()
        with _live_lock:
            _live.add(self)
        return self

    def __init__(self, *a, **k):
        raise TypeError("use nexar.bootstrap_local, nexar.join or nexar.init_from_env")

    # ---------------------------------------------------------- queries
    @property
    def rank(self):
        """This process's rank on the communicator."""
        return self._c.rank

    @property
    def world_size(self):
        """Number of ranks."""
        return self._c.world_size

    @property
    def comm_id(self):
        """Identifier of the communicator; 0 for the root one."""
        return self._c.comm_id

    @property
    def epoch(self):
        """The view's epoch (nexar_view_epoch): 0 at formation, the parent's
        for split children, the predecessor's + 1 for a successor (recover,
        rebuild_excluding, a resize by elastic_checkpoint)."""
        return self._c.epoch

    @property
    def closed(self):
        """True once close() has run."""
        return self._c.closed

    def __repr__(self):
        if self._c.closed:
            return "<nexar.Client closed>"
        return (f"<nexar.Client rank {self.rank} of {self.world_size}, comm {self.comm_id}, "
                f"epoch {self._epoch}>")

    def close(self):
        """Graceful close: delivers what this rank sent (until the peer has
        it, is lost, or collective_timeout_ms passes), fails pending requests
        with AbortedError, frees the client. If other threads are inside
        calls on it, it is aborted first so they return. Idempotent."""
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def abort(self):
        """Thread-safe, idempotent, never blocks: every pending and later
        call fails with AbortedError and the peers are told at once (they
        count this rank as failed). close() is still needed."""
        self._c.abort()

    def failed_ranks(self):
        """Sorted ranks believed dead."""
        return self._c.failed_ranks()

    def on_failure(self, callback):
        """``callback(dead: list[int])`` runs on a library thread (with the
        GIL) with the whole dead set each time it grows, and at once if it
        is non-empty; it must not block, and may call abort() and queries.
        None removes it; a new one replaces the old (once this returns the
        old one is not running). An exception in it is reported through
        sys.unraisablehook."""
        self._c.on_failure(callback)

    def peer_stats(self, peer):
        """Traffic counters for one peer (dict)."""
        return self._c.peer_stats(int(peer))

    # --------------------------------------------------- point-to-point
    def send(self, buf, dest, tag=0, *, async_op=False):
        """Sends the bytes of buf to rank dest with tag; returns once buf may
        be reused (not proof of receipt; it may wait until the receiver takes
        a large message). Raises InvalidRankError, PeerLostError,
        TimeoutError (collective_timeout_ms without progress), AbortedError."""
        return self._c.send(buf, dest, tag, async_op)

    def recv(self, buf, src, tag=0, *, async_op=False):
        """Receives a message from src with tag into buf, whose length must
        equal the message's (else SizeMismatchError, and the message stays
        queued). Returns buf. Raises InvalidRankError, TimeoutError,
        PeerLostError, AbortedError."""
        return self._c.recv(buf, src, tag, async_op)

    def send_iov(self, bufs, dest, tag=0):
        """Sends the concatenation of several buffers as one message (the
        receiver may split it differently). Blocking only."""
        self._c.send_iov(list(bufs), dest, tag)

    def recv_iov(self, bufs, src, tag=0):
        """Receives one message scattered into several buffers, whose total
        length must equal the message's (else SizeMismatchError). Returns
        the list of buffers. Blocking only."""
        return self._c.recv_iov(list(bufs), src, tag)

    def probe(self, src, tag=0):
        """Waits for a message from src with tag; returns its length in
        bytes without consuming it. TimeoutError, PeerLostError."""
        return self._c.probe(src, tag)

    def probe_any(self, tag=0):
        """Waits for the earliest unreceived message with tag from any rank;
        returns (src, length) without consuming it."""
        return self._c.probe_any(tag)

    def sendrecv(self, sbuf, dest, rbuf, src, stag=0, rtag=0, *, async_op=False):
        """Sends sbuf to dest and receives rbuf from src at once (as two
        non-blocking operations, so a pair exchanging with each other never
        deadlocks); the buffers must not overlap. Returns rbuf."""
        return self._c.sendrecv(sbuf, dest, stag, rbuf, src, rtag, async_op)

    # ------------------------------------------------------ collectives
    def all_reduce(self, buf, op="sum", *, dtype=None, async_op=False):
        """In place: buf becomes the reduction of every rank's buf (bit-
        identical on all ranks) and is returned.

        op: "sum" "prod" "min" "max" "avg" (the sum divided by the world
        size; integers truncate) "band" "bor" "bxor" (integer dtypes only).
        dtype: None takes the element type from buf's format; "bf16", "f16",
        ... reads buf's bytes as that type. async_op=True returns a Request
        at once (buf stays exported until it finishes; wait() returns buf).
        The GIL is released while it runs.

        Raises MismatchError (ranks disagree on op, dtype or count; on every
        rank), PeerLostError (a member is dead), TimeoutError (no progress
        for collective_timeout_ms), AbortedError (this client or a peer
        aborted), InvalidArgumentError (a bad op for the dtype, a buffer
        that is not writable and C-contiguous, a size that is not a multiple
        of the dtype's)."""
        return self._c.all_reduce(buf, dtype_code(dtype), op_code(op), async_op)

    def all_reduce_rs_ag(self, buf, op="sum", *, dtype=None, async_op=False):
        """all_reduce as reduce_scatter followed by all_gather."""
        return self._c.all_reduce_rs_ag(buf, dtype_code(dtype), op_code(op), async_op)

    def all_reduce_bucketed(self, bufs, op="sum", *, dtype=None, async_op=False):
        """all_reduce of several buffers (one dtype) as one collective.
        Returns the list of buffers."""
        return self._c.all_reduce_bucketed(list(bufs), dtype_code(dtype), op_code(op), async_op)

    def all_reduce_compressed(self, buf, residual, compressor, op="sum", *, dtype=None):
        """Allreduce with gradient compression and error feedback: residual
        (same size as buf, zeroed before the first call, kept between calls)
        carries what compression dropped. op "sum" or "avg" over a float
        dtype (else UnsupportedError; a bitwise op: InvalidArgumentError).
        Blocking only. Returns buf."""
        return self._c.all_reduce_compressed(buf, residual, compressor._cap, dtype_code(dtype),
                                             op_code(op))

    def broadcast(self, buf, root=0, *, dtype=None, async_op=False):
        """root's buf is copied into every rank's buf (same size). Returns
        buf. The root's buffer may be read-only."""
        return self._c.broadcast(buf, dtype_code(dtype), root, async_op)

    def reduce(self, buf, op="sum", root=0, *, dtype=None, async_op=False):
        """The reduction of every rank's buf into root's buf (others' bufs
        are input only and may be read-only). Returns buf."""
        return self._c.reduce(buf, dtype_code(dtype), op_code(op), root, async_op)

    def scan(self, buf, op="sum", *, dtype=None, async_op=False):
        """In place, inclusive prefix: rank r gets op over ranks 0..r."""
        return self._c.scan(buf, dtype_code(dtype), op_code(op), async_op)

    def exclusive_scan(self, buf, op="sum", *, dtype=None, async_op=False):
        """In place, exclusive prefix: rank r gets op over ranks 0..r-1;
        rank 0 the identity (sum 0, prod 1, min +inf/max value, max
        -inf/min value)."""
        return self._c.exclusive_scan(buf, dtype_code(dtype), op_code(op), async_op)

    def all_gather(self, send, recv=None, *, out=None, dtype=None, async_op=False):
        """recv (world_size times send's size) gets block i from rank i.
        Without recv/out, one like send is allocated. Returns recv.
        SizeMismatchError if recv has another size."""
        recv = _out(out, recv, send, nbytes(send) * self.world_size)
        return self._c.all_gather(send, recv, dtype_code(dtype), async_op)

    def reduce_scatter(self, send, recv=None, op="sum", *, out=None, dtype=None, async_op=False):
        """send holds world_size blocks; rank r's recv gets the reduction of
        block r. Returns recv (allocated like send if not given)."""
        n = self.world_size
        recv = _out(out, recv, send, nbytes(send) // n)
        return self._c.reduce_scatter(send, recv, dtype_code(dtype), op_code(op), async_op)

    def all_to_all(self, send, recv=None, *, out=None, dtype=None, async_op=False):
        """send block j goes to rank j; recv block i came from rank i (equal
        blocks). Returns recv (allocated like send if not given)."""
        recv = _out(out, recv, send, nbytes(send))
        return self._c.all_to_all(send, recv, dtype_code(dtype), async_op)

    def gather(self, send, recv=None, root=0, *, out=None, dtype=None, async_op=False):
        """root's recv (world_size times send) gets block i from rank i.
        Returns recv at the root (allocated if not given), None elsewhere."""
        if self.rank == root:
            recv = _out(out, recv, send, nbytes(send) * self.world_size)
        else:
            recv = None
        return self._c.gather(send, recv, dtype_code(dtype), root, async_op)

    def scatter(self, send, recv=None, root=0, *, out=None, dtype=None, async_op=False):
        """Block i of root's send goes to rank i's recv. Non-roots pass recv
        (or out=) and send None; the root may omit recv. Returns recv."""
        if recv is None and out is None:
            if self.rank != root or send is None:
                raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT,
                                           "scatter: pass recv (its size is the block size)")
            recv = like(send, nbytes(send) // self.world_size)
        else:
            recv = _out(out, recv, send, 0)
        return self._c.scatter(send, recv, dtype_code(dtype), root, async_op)

    # -------------------------------------- variable-count collectives
    def all_gather_v(self, send, recv, counts, displs=None, *, dtype=None, async_op=False):
        """Rank i's send (counts[i] elements; counts the same on every rank,
        else MismatchError) lands in recv at displs[i] (packed in rank order
        when displs is None). recv None: allocated like send. Returns recv."""
        counts = _counts(counts, self.world_size, "all_gather_v")
        if recv is None:
            ext = max((d + c for d, c in zip(displs, counts)), default=0) if displs else sum(counts)
            recv = like(send, ext * _elem_size(send, dtype))
        return self._c.all_gather_v(send, recv, counts, displs, dtype_code(dtype), async_op)

    def reduce_scatter_v(self, send, recv, counts, op="sum", *, dtype=None, async_op=False):
        """send holds sum(counts) elements packed in rank order; rank r's recv
        (counts[r] elements) gets the reduction of block r. recv None:
        allocated. Returns recv."""
        counts = _counts(counts, self.world_size, "reduce_scatter_v")
        if recv is None:
            recv = like(send, counts[self.rank] * _elem_size(send, dtype))
        return self._c.reduce_scatter_v(send, recv, counts, dtype_code(dtype), op_code(op),
                                        async_op)

    def all_to_all_v(self, send, send_counts, recv, recv_counts, send_displs=None,
                     recv_displs=None, *, dtype=None, async_op=False):
        """send_counts[j] elements (at send_displs[j], default packed) go to
        rank j; the block from rank i lands at recv_displs[i] and must have
        recv_counts[i] elements (else SizeMismatchError on this rank). recv
        None: allocated (packed). Returns recv."""
        send_counts = _counts(send_counts, self.world_size, "all_to_all_v")
        recv_counts = _counts(recv_counts, self.world_size, "all_to_all_v")
        if recv is None:
            recv = like(send, sum(recv_counts) * _elem_size(send, dtype))
        return self._c.all_to_all_v(send, send_counts, send_displs, recv, recv_counts,
                                    recv_displs, dtype_code(dtype), async_op)

    def gather_v(self, send, recv, counts, root=0, displs=None, *, dtype=None, async_op=False):
        """Rank i's send (counts[i] elements) lands in root's recv at
        displs[i] (packed by default). counts/displs/recv are used at the
        root only (recv None there: allocated). Returns recv at the root,
        None elsewhere."""
        if self.rank != root:
            return self._c.gather_v(send, None, [], None, dtype_code(dtype), root, async_op)
        counts = _counts(counts, self.world_size, "gather_v")
        if recv is None:
            recv = like(send, sum(counts) * _elem_size(send, dtype))
        return self._c.gather_v(send, recv, counts, displs, dtype_code(dtype), root, async_op)

    def scatter_v(self, send, counts, recv, root=0, displs=None, *, dtype=None, async_op=False):
        """Root sends counts[i] elements at displs[i] of send (packed by
        default) to rank i, whose recv must hold exactly that many. send and
        counts are used at the root only. Returns recv."""
        if self.rank != root:
            return self._c.scatter_v(None, recv, [], None, dtype_code(dtype), root, async_op)
        counts = _counts(counts, self.world_size, "scatter_v")
        if recv is None:
            recv = like(send, counts[root] * _elem_size(send, dtype))
        return self._c.scatter_v(send, recv, counts, displs, dtype_code(dtype), root, async_op)

    def barrier(self, *, async_op=False):
        """Returns once every rank has entered (barrier_timeout_ms)."""
        return self._c.barrier(async_op)

    # ---------------------------------------------- sub-communicators
    def split(self, color, key=0):
        """Collective: ranks with equal color form a child ordered by (key,
        parent rank). Returns the child, or None for color None /
        COLOR_NONE."""
        c = self._c.split(COLOR_NONE if color is None else int(color), int(key))
        return Client._wrap(c, self._epoch)

    def recover(self):
        """Collective over the survivors once a failure is known: revokes
        this client, the survivors agree on the dead set (a fault-tolerant
        agreement) and each gets a Client of the same view, ranked densely in
        the old order (epoch + 1). AbortedError with recovery_policy "abort"
        or when no successor forms (no majority, recovery_timeout_ms);
        PeerLostError when the others declared this rank failed."""
        return Client._wrap(self._c.recover(), self._epoch + 1)

    def rebuild_excluding(self, dead):
        """As recover(), with the dead set given (the same on every caller,
        else MismatchError; the caller must not be in it)."""
        return Client._wrap(self._c.rebuild_excluding(list(dead)), self._epoch + 1)

    def elastic_checkpoint(self):
        """Elastic resize point (collective): the resized Client, or None
        (no change, or this rank left). After a resize this Client takes
        only queries and close(). Joiners waiting at the seed are admitted
        (appended after the staying ranks); a joiner that fails before the
        commit raises PeerLostError naming it and this Client stays the view."""
        return Client._wrap(self._c.elastic_checkpoint(), self._epoch + 1)

    def elastic_leave(self):
        """Leave at the next elastic_checkpoint()."""
        self._c.elastic_leave()

    def elastic_info(self):
        """What the resize that made this Client changed, the same on every
        member: dict with epoch, old_world, new_world, joined, left,
        i_am_new, old_rank."""
        return self._c.elastic_info()

    def agree(self, flag):
        """ULFM's agree: every live member calls it; all get the bitwise AND
        of the flags of the members that contributed, even if members die
        meanwhile. Returns that flag; raises PeerLostError (with attribute
        ``flag``, the agreed value) if some member is dead. Works on a
        revoked Client."""
        value, rc, message = self._c.agree(int(flag))
        if rc:
            from ._errors import PeerLostError
            err = PeerLostError(rc, message)
            err.flag = value
            raise err
        return value

    def revoke(self):
        """ULFM's revoke: every member's pending and later operations fail at
        once (PeerLostError where a dead rank is involved, else
        AbortedError); only queries, recover, agree and close work after."""
        self._c.revoke()

    # ------------------------------------------------------------- RPC
    def rpc_register(self, fn_id, fn):
        """Registers ``fn(caller: int, args: bytes) -> bytes-like | None``
        for fn_id (0..65535) on this client; None unregisters. fn runs on a
        library thread with the GIL, possibly several at once; an exception
        in it gives the caller RpcFailedError (traceback printed only with
        NEXAR_DEBUG). Register on every rank, then barrier: a request for an
        unregistered id is answered RpcNoHandlerError."""
        self._c.rpc_register(int(fn_id), fn)

    def rpc(self, target, fn_id, args=b""):
        """Calls fn_id on rank target with args (bytes-like); returns the
        reply bytes. RpcNoHandlerError, RpcFailedError, TimeoutError
        (rpc_timeout_ms), PeerLostError."""
        return self._c.rpc(target, int(fn_id), args)

    # --------------------------------------------------- pickled objects
    # Unpickling runs code chosen by the sender: use these helpers only
    # between members you trust (the cluster token admits them).
    def send_obj(self, obj, dest, tag=0):
        """Sends a picklable object (pickle protocol 5; large buffers such as
        numpy arrays travel out of band, without a copy into the pickle) as
        one header message plus one message per out-of-band buffer, all with
        tag. Concurrent send_obj calls on one client are serialised."""
        bufs = []
        payload = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        raws = [b.raw() for b in bufs]
        hdr = struct.pack(f"<4sI{len(raws)}Q", b"NXO1", len(raws), *[r.nbytes for r in raws])
        with self._obj_send_lock:
            self._c.send(hdr + payload, dest, tag, False)
            for r in raws:
                self._c.send(r, dest, tag, False)

    def recv_obj(self, src, tag=0):
        """Receives an object sent with send_obj from src with tag.
        Unpickling runs code the sender chose: trusted members only. A
        message that is not a send_obj header, or buffers of other sizes
        than announced, raise ProtocolError."""
        with self._obj_recv_lock:
            n = self._c.probe(src, tag)
            msg = bytearray(n)
            self._c.recv(msg, src, tag, False)
            nb, lens, payload = _parse_obj_header(msg, src)
            bufs = []
            for ln in lens:
                # allocate what actually arrived, not what the header claims
                got = self._c.probe(src, tag)
                if got != ln:
                    from ._errors import ProtocolError

                    raise ProtocolError(_nexar.ERR_PROTOCOL,
                                        f"recv_obj: rank {src} announced a {ln}-byte buffer "
                                        f"and sent {got} bytes")
                b = bytearray(got)
                self._c.recv(b, src, tag, False)
                bufs.append(b)
        return pickle.loads(payload, buffers=bufs)

    def bcast_obj(self, obj=None, root=0):
        """Collective: every rank returns root's object (pickle protocol 5,
        out-of-band buffers broadcast without copies into the pickle)."""
        u64 = DTYPES["u64"]
        if self.rank == root:
            bufs = []
            payload = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
            raws = [b.raw() for b in bufs]
            msg = struct.pack(f"<4sI{len(raws)}Q", b"NXO1", len(raws),
                              *[r.nbytes for r in raws]) + payload
            self._c.broadcast(array.array("Q", [len(msg)]), u64, root, False)
            self._c.broadcast(msg, DTYPES["u8"], root, False)
            for r in raws:
                self._c.broadcast(r, DTYPES["u8"], root, False)
            return obj
        n = array.array("Q", [0])
        self._c.broadcast(n, u64, root, False)
        msg = bytearray(n[0])
        self._c.broadcast(msg, DTYPES["u8"], root, False)
        nb, lens, payload = _parse_obj_header(msg, root)
        bufs = []
        for ln in lens:
            b = bytearray(ln)
            self._c.broadcast(b, DTYPES["u8"], root, False)
            bufs.append(b)
        return pickle.loads(payload, buffers=bufs)

    def allgather_obj(self, obj):
        """Collective: the list of every rank's object, in rank order. Small
        objects (no out-of-band buffers on any rank) take one all_gather_v of
        the pickles; otherwise each rank's object is broadcast in turn with
        its buffers out of band."""
        n = self.world_size
        bufs = []
        payload = pickle.dumps(obj, protocol=5, buffer_callback=bufs.append)
        desc = array.array("Q", [len(payload), len(bufs)])
        alld = array.array("Q", bytes(16 * n))
        self._c.all_gather(desc, alld, DTYPES["u64"], False)
        if any(alld[2 * i + 1] for i in range(n)):
            return [self.bcast_obj(obj if i == self.rank else None, root=i) for i in range(n)]
        lens = [alld[2 * i] for i in range(n)]
        everything = bytearray(sum(lens))
        self._c.all_gather_v(payload, everything, lens, None, DTYPES["u8"], False)
        mv = memoryview(everything)
        offs = [sum(lens[:i]) for i in range(n)]
        return [pickle.loads(mv[offs[i]: offs[i] + lens[i]]) for i in range(n)]


def _counts(counts, n, what):
    """counts as a list of n ints (InvalidArgumentError otherwise)."""
    try:
        out = [int(x) for x in counts]
    except (TypeError, ValueError):
        raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT,
                                   f"{what}: counts must be a sequence of integers") from None
    if len(out) != n:
        raise InvalidArgumentError(_nexar.ERR_INVALID_ARGUMENT,
                                   f"{what}: {len(out)} counts for a world of {n}")
    return out


def _elem_size(buf, dtype):
    """Bytes per element of buf as an operation reads it."""
    if dtype is not None:
        return _nexar.dtype_size(dtype_code(dtype))
    try:
        with memoryview(buf) as m:
            return m.itemsize
    except TypeError:
        mv, dt = _adapt(buf)
        return _nexar.dtype_size(dt) if dt >= 0 else 1


def _parse_obj_header(msg, peer):
    from ._errors import ProtocolError

    if len(msg) < 8 or bytes(msg[:4]) != b"NXO1":
        raise ProtocolError(_nexar.ERR_PROTOCOL,
                            f"recv_obj: the message from rank {peer} is not a nexar object")
    (nb,) = struct.unpack_from("<I", msg, 4)
    if 8 + 8 * nb > len(msg):
        raise ProtocolError(_nexar.ERR_PROTOCOL,
                            f"recv_obj: truncated object header from rank {peer}")
    lens = struct.unpack_from(f"<{nb}Q", msg, 8)
    return nb, lens, memoryview(msg)[8 + 8 * nb:]


Request = _nexar.Request


def wait_all(requests):
    """Waits for every request (also after a failure) and returns their
    results as a list; then raises the error of the lowest-index failed one,
    if any (as nexar_wait_all). None entries are skipped (result None)."""
    results, first = [], None
    for r in requests:
        if r is None:
            results.append(None)
            continue
        try:
            results.append(r.wait())
        except NexarError as e:
            results.append(None)
            first = first or e
    if first is not None:
        raise first
    return results


@atexit.register
def _close_all():
    """At exit: close every open client (graceful, so what was sent is
    delivered), then keep library threads out of the interpreter."""
    with _live_lock:
        live = list(_live)
    for c in live:
        try:
            c.close()
        except Exception:
            pass
    _nexar._shutdown()
