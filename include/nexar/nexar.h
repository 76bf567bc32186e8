/*
 * libnexar: a distributed runtime over QUIC with point-to-point messaging,
 * RPC and collectives. This is the only public header.
 *
 * Threading rule (stated once): every public function may be called from any
 * thread, with three limits: (1) collectives on one communicator are issued in
 * the same order on every rank; (2) nexar_x_del must not overlap or be followed
 * by any other call on that object; (3) a request is used by one thread at a
 * time. Internally, whoever holds the endpoint lock drives it: its progress
 * thread, or an application thread waiting for a request (it runs progress
 * itself, so a reply wakes it directly). Non-blocking operations never take a
 * thread of their own: a collective is a schedule advanced, outside the lock,
 * by whichever of those threads sees its messages complete. Callbacks
 * (failure notices, RPC handlers) run on a small library worker pool.
 *
 * Errors: every fallible call returns 0 (NEXAR_OK) or a negative NEXAR_ERR_*
 * code; nexar_last_error() gives a sentence naming the operation, the peer and
 * the reason.
 */
#ifndef NEXAR_NEXAR_H
#define NEXAR_NEXAR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && defined(NEXAR_BUILDING)
#define NEXAR_EXTERN __attribute__((visibility("default")))
#else
#define NEXAR_EXTERN
#endif

/* ---------------------------------------------------------------- types */

/** A communicator: this process's rank, the world size and its peers. */
typedef struct nexar_client nexar_client;
/** A discovery node: hands out ranks and addresses; never on the data path. */
typedef struct nexar_seed nexar_seed;
/** An operation in flight, finished with nexar_wait (or nexar_wait_all). */
typedef struct nexar_request nexar_request;

/** Element types. Values are part of the wire format; never renumber. */
typedef enum nexar_dtype {
  NEXAR_F32 = 0,
  NEXAR_F64 = 1,
  NEXAR_F16 = 2,
  NEXAR_BF16 = 3,
  NEXAR_I8 = 4,
  NEXAR_I32 = 5,
  NEXAR_I64 = 6,
  NEXAR_U8 = 7,
  NEXAR_U32 = 8,
  NEXAR_U64 = 9
} nexar_dtype;

/** Reduction operators. Values are part of the wire format; never renumber.
 *
 * NEXAR_AVG is the sum divided by the number of ranks of the communicator,
 * divided once, on the final sum (so every rank of an allreduce gets the same
 * bits): floats divide in IEEE arithmetic, f16/bf16 results rounded to nearest
 * even; integers divide the (wrapping) sum and truncate toward zero, as NCCL.
 * It is refused (NEXAR_ERR_INVALID_ARGUMENT) by nexar_scan and
 * nexar_exclusive_scan, where "the number of ranks" has no single meaning.
 *
 * NEXAR_BAND, NEXAR_BOR, NEXAR_BXOR are bitwise and, or, xor, for integer
 * dtypes only (a float dtype gives NEXAR_ERR_INVALID_ARGUMENT naming the op
 * and dtype). Identities (exclusive scan's rank 0): band all ones, bor and
 * bxor 0. */
typedef enum nexar_op {
  NEXAR_SUM = 0,
  NEXAR_PROD = 1,
  NEXAR_MIN = 2,
  NEXAR_MAX = 3,
  NEXAR_AVG = 4,  /* the sum divided by the number of ranks; integers: truncated (as NCCL) */
  NEXAR_BAND = 5, /* integer dtypes only, else INVALID_ARGUMENT */
  NEXAR_BOR = 6,
  NEXAR_BXOR = 7
} nexar_op;

/** Size in bytes of one element of dt; 0 for an invalid value. */
NEXAR_EXTERN size_t nexar_dtype_size(nexar_dtype dt);
/** "f32", "f64", ...; "?" for an invalid value. */
NEXAR_EXTERN const char *nexar_dtype_name(nexar_dtype dt);
/** "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"; "?" for an invalid value. */
NEXAR_EXTERN const char *nexar_op_name(nexar_op op);

/** One region of a scattered buffer. */
typedef struct nexar_iovec {
  void *base;
  size_t len;
} nexar_iovec;
/** One buffer of a bucketed allreduce (count in elements). */
typedef struct nexar_bucket {
  void *buf;
  size_t count;
} nexar_bucket;

/* --------------------------------------------------------------- errors */

/** Every error code, listed once: X(NAME, value, text) makes NEXAR_ERR_NAME =
 * value, and nexar_strerror(value) is "NEXAR_ERR_NAME: text". Values are part
 * of the ABI: never renumber; new codes continue downwards. (libuv's
 * UV_ERRNO_MAP style: the enum below and nexar_strerror both expand it.) */
#define NEXAR_ERRNO_MAP(X)                                                                         \
  /** NULL pointer, bad dtype/op, zero world, bad config field. */                                 \
  X(INVALID_ARGUMENT, -1, "invalid argument")                                                      \
  /** A rank or root outside the communicator. */                                                  \
  X(INVALID_RANK, -2, "rank or root outside the communicator")                                     \
  /** A message or buffer of another length than asked. */                                         \
  X(SIZE_MISMATCH, -3, "message or buffer of another length than asked")                           \
  /** Ranks called different collectives or the same one with other arguments. */                  \
  X(MISMATCH, -4, "ranks called different collectives or arguments")                               \
  /** No progress within the configured timeout. */                                                \
  X(TIMEOUT, -5, "timed out")                                                                      \
  /** A peer the operation needs is dead or unreachable. */                                        \
  X(PEER_LOST, -6, "peer lost")                                                                    \
  /** The communicator was aborted (nexar_abort here or on a peer). */                             \
  X(ABORTED, -7, "communicator aborted")                                                           \
  /** Bad cluster token or certificate. */                                                         \
  X(AUTH, -8, "authentication failed (cluster token or certificate)")                              \
  /** TLS failure (handshake, credentials). */                                                     \
  X(TLS, -9, "TLS failure")                                                                        \
  /** Malformed or unexpected bytes from the network, version mismatch. */                         \
  X(PROTOCOL, -10, "malformed or unexpected bytes from the network")                               \
  /** Operating-system I/O failure (socket, bind, thread). */                                      \
  X(IO, -11, "I/O error")                                                                          \
  /** Out of memory. */                                                                            \
  X(NOMEM, -12, "out of memory")                                                                   \
  /** The remote rank has no handler for this RPC function id. */                                  \
  X(RPC_NO_HANDLER, -13, "no RPC handler for this function id")                                    \
  /** The remote RPC handler returned an error. */                                                 \
  X(RPC_FAILED, -14, "remote RPC handler failed")                                                  \
  /** Not supported by this build or for these arguments. */                                       \
  X(UNSUPPORTED, -15, "unsupported")

/** Return codes: NEXAR_OK (0, success) or a negative NEXAR_ERR_* code. */
typedef enum nexar_error {
  NEXAR_OK = 0,
#define NEXAR_ERRNO_ENUM_(name, value, text) NEXAR_ERR_##name = (value),
  NEXAR_ERRNO_MAP(NEXAR_ERRNO_ENUM_)
#undef NEXAR_ERRNO_ENUM_
} nexar_error;

/** Name of an error code ("NEXAR_ERR_TIMEOUT: ..."); never NULL. */
NEXAR_EXTERN const char *nexar_strerror(int err);
/** Thread-local sentence about this thread's last failure; never NULL. */
NEXAR_EXTERN const char *nexar_last_error(void);

#define NEXAR_VERSION_MAJOR 0 /* of this header; nexar_version() reports the loaded library */
#define NEXAR_VERSION_MINOR 1
#define NEXAR_VERSION_PATCH 0
#define NEXAR_VERSION_NUM                                                                          \
  (NEXAR_VERSION_MAJOR * 10000 + NEXAR_VERSION_MINOR * 100 + NEXAR_VERSION_PATCH)
/** Version of the loaded library, "MAJOR.MINOR.PATCH". */
NEXAR_EXTERN const char *nexar_version(void);
/** Frees memory the library returned (RPC replies); NULL is a no-op. */
NEXAR_EXTERN void nexar_free(void *p);

/* -------------------------------------------------------- configuration */

/** Shape of the peer graph. */
typedef enum {
  NEXAR_TOPO_FULL_MESH = 0,
  NEXAR_TOPO_K_REGULAR = 1,
  NEXAR_TOPO_HYPERCUBE = 2
} nexar_topology;
/** What happens when a member dies. */
typedef enum {
  NEXAR_RECOVERY_AUTOMATIC = 0,
  NEXAR_RECOVERY_MANUAL = 1,
  NEXAR_RECOVERY_ABORT = 2
} nexar_recovery_policy;

struct nexar_device_adapter;

/** Runtime settings. Fill with nexar_config_default, then edit. Every field
 * has an environment variable: NEXAR_ + the field name in upper case. */
typedef struct nexar_config {
  size_t struct_size;                    /* written by nexar_config_default; do not edit */
  uint32_t collective_timeout_ms;        /* 30000: no progress for this long fails the op */
  uint32_t barrier_timeout_ms;           /* 30000 */
  uint32_t rpc_timeout_ms;               /* 30000 */
  uint32_t connect_timeout_ms;           /* 60000: cluster formation */
  size_t large_msg_bytes;                /* 8 MiB: pipelined allreduce from here */
  size_t pipeline_segment_bytes;         /* 2 MiB */
  uint32_t ring_max_world;               /* 8: ring vs halving-doubling */
  int bulk_transport;                    /* 1: large payloads may use the fastest safe path */
  int encrypt_bulk;                      /* 1: that path is encrypted and authenticated */
  size_t compressed_allreduce_max_bytes; /* 4 GiB, 0 = no limit */
  uint32_t heartbeat_interval_ms;        /* 1000 */
  uint32_t heartbeat_timeout_ms;         /* 5000: silence this long marks a peer dead */
  uint32_t recovery_timeout_ms;          /* 30000 */
  nexar_recovery_policy recovery_policy; /* AUTOMATIC */
  nexar_topology topology;               /* FULL_MESH */
  uint32_t topology_degree;              /* K for K_REGULAR (even, >= 2) */
  uint32_t elastic_min_world, elastic_max_world; /* 1, 0 = unlimited */
  uint32_t elastic_checkpoint_timeout_ms;        /* 60000 */
  const char *cluster_token;                     /* NULL: none, or NEXAR_CLUSTER_TOKEN */
  const char *bind_addr;                         /* NULL: all interfaces, ephemeral port */
  const struct nexar_device_adapter *adapter;    /* NULL: host memory */
  size_t unexpected_budget_bytes; /* 256 MiB: unexpected messages buffered before senders wait */
} nexar_config;

/** Fills cfg with defaults, then applies NEXAR_* environment variables. A
 * malformed variable is NEXAR_ERR_INVALID_ARGUMENT naming it. Use the macro. */
NEXAR_EXTERN int nexar_config_default_sized(nexar_config *cfg, size_t struct_size);
#define nexar_config_default(cfg) nexar_config_default_sized((cfg), sizeof(nexar_config))

/* ---------------------------------------------------- forming a cluster */

/** All world_size ranks in this process, connected over loopback QUIC. */
NEXAR_EXTERN int nexar_bootstrap_local(nexar_client **clients, uint32_t world_size,
                                       const nexar_config *cfg);

/** Starts a seed (discovery only) serving on a background thread. */
NEXAR_EXTERN int nexar_seed_new(nexar_seed **out, const char *listen_addr, uint32_t world_size,
                                const nexar_config *cfg);
/** The address the seed listens on, "host:port". */
NEXAR_EXTERN const char *nexar_seed_addr(const nexar_seed *s);
/** The cluster token workers must present (given, from the environment, or drawn). */
NEXAR_EXTERN const char *nexar_seed_token(const nexar_seed *s);
/** Waits until the world has formed (every rank welcomed). */
NEXAR_EXTERN int nexar_seed_wait(nexar_seed *s, uint32_t timeout_ms);
/** Stops the seed and frees it; its strings die with it. */
NEXAR_EXTERN void nexar_seed_del(nexar_seed *s);

/** Joins through a seed; returns once the full mesh is connected. */
NEXAR_EXTERN int nexar_join(nexar_client **out, const char *seed_addr, const nexar_config *cfg);
/** Joins as NEXAR_SEED_ADDR or the torchrun variables say (see the API guide). */
NEXAR_EXTERN int nexar_init_from_env(nexar_client **out);

/** This process's rank on c. */
NEXAR_EXTERN uint32_t nexar_rank(const nexar_client *c);
/** Number of ranks of c. */
NEXAR_EXTERN uint32_t nexar_world_size(const nexar_client *c);
/** Identifier of c; 0 for the root communicator. */
NEXAR_EXTERN uint64_t nexar_comm_id(const nexar_client *c);
/** Thread-safe, idempotent, non-blocking: every pending and later call on c
 * fails NEXAR_ERR_ABORTED and c's peers are told. */
NEXAR_EXTERN void nexar_abort(nexar_client *c);
/** Delivers what was sent, fails pending requests with ABORTED, then frees c. */
NEXAR_EXTERN void nexar_client_del(nexar_client *c);

/* ------------------------------------------------------- point-to-point */

/** Sends len bytes to dest with tag; returns once buf may be reused. */
NEXAR_EXTERN int nexar_send(nexar_client *c, const void *buf, size_t len, uint32_t dest,
                            uint32_t tag);
/** Receives exactly len bytes from src with tag (else SIZE_MISMATCH, message kept). */
NEXAR_EXTERN int nexar_recv(nexar_client *c, void *buf, size_t len, uint32_t src, uint32_t tag);
/** Waits for a message from src with tag and reports its length; does not consume. */
NEXAR_EXTERN int nexar_probe(nexar_client *c, uint32_t src, uint32_t tag, size_t *len);
/** Waits for the earliest unreceived message with tag from any rank; does not consume. */
NEXAR_EXTERN int nexar_probe_any(nexar_client *c, uint32_t tag, uint32_t *src, size_t *len);
/** nexar_send of the concatenation of n regions. */
NEXAR_EXTERN int nexar_send_iov(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t dest,
                                uint32_t tag);
/** nexar_recv scattered into n regions (the layout may differ from the send's). */
NEXAR_EXTERN int nexar_recv_iov(nexar_client *c, const nexar_iovec *iov, size_t n, uint32_t src,
                                uint32_t tag);
/** Non-blocking send; finish with nexar_wait. */
NEXAR_EXTERN int nexar_send_nb(nexar_client *c, const void *buf, size_t len, uint32_t dest,
                               uint32_t tag, nexar_request **req);
/** Non-blocking receive; finish with nexar_wait. */
NEXAR_EXTERN int nexar_recv_nb(nexar_client *c, void *buf, size_t len, uint32_t src, uint32_t tag,
                               nexar_request **req);
/** Sends slen bytes of sbuf to dest with stag and receives exactly rlen bytes
 * from src with rtag into rbuf, both at once: it never deadlocks for a pair
 * (or a ring) of ranks exchanging with each other, whatever the sizes. dest
 * and src may be the caller's own rank. Returns once both are done (the send
 * finished even when the receive failed, so sbuf may be reused).
 * Errors: NEXAR_ERR_INVALID_ARGUMENT (NULL buffer with a non-zero length, or
 * the two buffers overlap), NEXAR_ERR_INVALID_RANK (dest or src outside c),
 * NEXAR_ERR_SIZE_MISMATCH (the message from src has another length; it stays
 * queued), NEXAR_ERR_TIMEOUT, NEXAR_ERR_PEER_LOST, NEXAR_ERR_ABORTED; the
 * receive's error wins when both fail. */
NEXAR_EXTERN int nexar_sendrecv(nexar_client *c, const void *sbuf, size_t slen, uint32_t dest,
                                uint32_t stag, void *rbuf, size_t rlen, uint32_t src,
                                uint32_t rtag);

/* ---------------------------------------------------------- collectives */

/* Every collective returns 0 or: NEXAR_ERR_INVALID_ARGUMENT (NULL client or a
 * buffer NULL with a non-zero count, bad dtype or op, a bitwise op on a float
 * dtype, NEXAR_AVG in a scan, overlapping buffers, a size that overflows),
 * NEXAR_ERR_INVALID_RANK (root), NEXAR_ERR_MISMATCH (ranks called different
 * collectives or arguments), NEXAR_ERR_TIMEOUT, NEXAR_ERR_PEER_LOST,
 * NEXAR_ERR_ABORTED, NEXAR_ERR_NOMEM. The reducing ones take every nexar_op
 * (see there). */

/** In place: buf becomes the reduction over all ranks. */
NEXAR_EXTERN int nexar_all_reduce(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                  nexar_op op);
/** root's buf is copied to every rank. */
NEXAR_EXTERN int nexar_broadcast(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                 uint32_t root);
/** recv[count*n]: block i comes from rank i. */
NEXAR_EXTERN int nexar_all_gather(nexar_client *c, const void *send, void *recv, size_t count,
                                  nexar_dtype dt);
/** send[count*n]; rank r receives the reduction of block r. */
NEXAR_EXTERN int nexar_reduce_scatter(nexar_client *c, const void *send, void *recv, size_t count,
                                      nexar_dtype dt, nexar_op op);
/** Reduction into root's buf only. */
NEXAR_EXTERN int nexar_reduce(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op,
                              uint32_t root);
/** send block j goes to rank j; recv block i came from rank i. */
NEXAR_EXTERN int nexar_all_to_all(nexar_client *c, const void *send, void *recv, size_t count,
                                  nexar_dtype dt);
/** recv[count*n] on root only. */
NEXAR_EXTERN int nexar_gather(nexar_client *c, const void *send, void *recv, size_t count,
                              nexar_dtype dt, uint32_t root);
/** send[count*n] on root only. */
NEXAR_EXTERN int nexar_scatter(nexar_client *c, const void *send, void *recv, size_t count,
                               nexar_dtype dt, uint32_t root);
/** Inclusive prefix reduction: rank r gets op over ranks 0..r. */
NEXAR_EXTERN int nexar_scan(nexar_client *c, void *buf, size_t count, nexar_dtype dt, nexar_op op);
/** Exclusive prefix reduction: rank r gets op over 0..r-1, rank 0 the identity. */
NEXAR_EXTERN int nexar_exclusive_scan(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                      nexar_op op);
/** Returns once every rank has entered. */
NEXAR_EXTERN int nexar_barrier(nexar_client *c);
/** Allreduce of n buffers as one collective. */
NEXAR_EXTERN int nexar_all_reduce_bucketed(nexar_client *c, const nexar_bucket *b, size_t n,
                                           nexar_dtype dt, nexar_op op);
/** Allreduce as reduce_scatter followed by all_gather. */
NEXAR_EXTERN int nexar_all_reduce_rs_ag(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                        nexar_op op);

/* Variable-count forms (MPI's *v, torch's uneven splits). counts[] and
 * displs[] have one entry per rank, in elements; a NULL displs means packed in
 * rank order (displs[i] = counts[0] + ... + counts[i-1]). Zero counts are
 * allowed (all zero too); a buffer may be NULL when every count it would hold
 * is 0. Counts shared by every rank (all_gather_v's and reduce_scatter_v's
 * recv_counts) must be equal everywhere: differing ones give
 * NEXAR_ERR_MISMATCH on every rank. A message of another length than the
 * receiver's count gives NEXAR_ERR_SIZE_MISMATCH on the receiving rank (all_to_all_v,
 * gather_v at the root, scatter_v at the non-roots; the other ranks get
 * NEXAR_ERR_MISMATCH, unless their part was done before they heard). Blocks of one output buffer
 * must not overlap each other, nor the input (except the in-place forms named below), and every
 * (displ + count) * element size must fit in size_t: else
 * NEXAR_ERR_INVALID_ARGUMENT. Every one also returns NEXAR_ERR_INVALID_ARGUMENT
 * (NULL client/arrays, bad dtype), NEXAR_ERR_TIMEOUT, NEXAR_ERR_PEER_LOST,
 * NEXAR_ERR_ABORTED, NEXAR_ERR_NOMEM. */

/** Every rank contributes send_count elements; rank i's block lands at
 * recv + recv_displs[i] (recv_counts[i] elements). send_count must equal
 * recv_counts[rank] (else NEXAR_ERR_INVALID_ARGUMENT). In place:
 * send == recv + recv_displs[rank] * size. Also NEXAR_ERR_MISMATCH. */
NEXAR_EXTERN int nexar_all_gather_v(nexar_client *c, const void *send, size_t send_count,
                                    void *recv, const size_t *recv_counts,
                                    const size_t *recv_displs, nexar_dtype dt);
/** send holds sum(recv_counts) elements (packed in rank order); rank r
 * receives the reduction of block r (recv_counts[r] elements) in recv. In
 * place: recv == send + (recv_counts[0] + ... + recv_counts[r-1]) * size.
 * Every op incl. NEXAR_AVG. Also NEXAR_ERR_MISMATCH. */
NEXAR_EXTERN int nexar_reduce_scatter_v(nexar_client *c, const void *send, void *recv,
                                        const size_t *recv_counts, nexar_dtype dt, nexar_op op);
/** send_counts[j] elements at send + send_displs[j] go to rank j; the block
 * from rank i lands at recv + recv_displs[i] and recv_counts[i] must equal
 * what rank i sends here (else NEXAR_ERR_SIZE_MISMATCH on the receiving
 * rank). send and recv must not overlap. */
NEXAR_EXTERN int nexar_all_to_all_v(nexar_client *c, const void *send, const size_t *send_counts,
                                    const size_t *send_displs, void *recv,
                                    const size_t *recv_counts, const size_t *recv_displs,
                                    nexar_dtype dt);
/** Rank i's send_count elements land at root's recv + recv_displs[i]
 * (recv_counts[i] elements, which must equal rank i's send_count, else
 * NEXAR_ERR_SIZE_MISMATCH at the root). recv, recv_counts and recv_displs
 * are read on root only. In place at the root: send == recv +
 * recv_displs[root] * size. Also NEXAR_ERR_INVALID_RANK (root). */
NEXAR_EXTERN int nexar_gather_v(nexar_client *c, const void *send, size_t send_count, void *recv,
                                const size_t *recv_counts, const size_t *recv_displs,
                                nexar_dtype dt, uint32_t root);
/** Root sends send_counts[i] elements at send + send_displs[i] to rank i,
 * which receives recv_count elements (a differing count is
 * NEXAR_ERR_SIZE_MISMATCH on that rank). send, send_counts and send_displs
 * are read on root only. In place at the root: recv == send +
 * send_displs[root] * size. Also NEXAR_ERR_INVALID_RANK (root). */
NEXAR_EXTERN int nexar_scatter_v(nexar_client *c, const void *send, const size_t *send_counts,
                                 const size_t *send_displs, void *recv, size_t recv_count,
                                 nexar_dtype dt, uint32_t root);

/* Non-blocking forms: same arguments plus a trailing request. */
/** Non-blocking nexar_all_reduce. */
NEXAR_EXTERN int nexar_all_reduce_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                     nexar_op op, nexar_request **req);
/** Non-blocking nexar_broadcast. */
NEXAR_EXTERN int nexar_broadcast_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                    uint32_t root, nexar_request **req);
/** Non-blocking nexar_all_gather. */
NEXAR_EXTERN int nexar_all_gather_nb(nexar_client *c, const void *send, void *recv, size_t count,
                                     nexar_dtype dt, nexar_request **req);
/** Non-blocking nexar_reduce_scatter. */
NEXAR_EXTERN int nexar_reduce_scatter_nb(nexar_client *c, const void *send, void *recv,
                                         size_t count, nexar_dtype dt, nexar_op op,
                                         nexar_request **req);
/** Non-blocking nexar_reduce. */
NEXAR_EXTERN int nexar_reduce_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                 nexar_op op, uint32_t root, nexar_request **req);
/** Non-blocking nexar_all_to_all. */
NEXAR_EXTERN int nexar_all_to_all_nb(nexar_client *c, const void *send, void *recv, size_t count,
                                     nexar_dtype dt, nexar_request **req);
/** Non-blocking nexar_gather. */
NEXAR_EXTERN int nexar_gather_nb(nexar_client *c, const void *send, void *recv, size_t count,
                                 nexar_dtype dt, uint32_t root, nexar_request **req);
/** Non-blocking nexar_scatter. */
NEXAR_EXTERN int nexar_scatter_nb(nexar_client *c, const void *send, void *recv, size_t count,
                                  nexar_dtype dt, uint32_t root, nexar_request **req);
/** Non-blocking nexar_scan. */
NEXAR_EXTERN int nexar_scan_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                               nexar_op op, nexar_request **req);
/** Non-blocking nexar_exclusive_scan. */
NEXAR_EXTERN int nexar_exclusive_scan_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                         nexar_op op, nexar_request **req);
/** Non-blocking nexar_barrier. */
NEXAR_EXTERN int nexar_barrier_nb(nexar_client *c, nexar_request **req);
/** Non-blocking nexar_all_reduce_bucketed. */
NEXAR_EXTERN int nexar_all_reduce_bucketed_nb(nexar_client *c, const nexar_bucket *b, size_t n,
                                              nexar_dtype dt, nexar_op op, nexar_request **req);
/** Non-blocking nexar_all_reduce_rs_ag. */
NEXAR_EXTERN int nexar_all_reduce_rs_ag_nb(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                           nexar_op op, nexar_request **req);

/** Non-blocking nexar_all_gather_v (counts and displs are copied: they
 * need not outlive the call; the buffers must, until the request finishes). */
NEXAR_EXTERN int nexar_all_gather_v_nb(nexar_client *c, const void *send, size_t send_count,
                                       void *recv, const size_t *recv_counts,
                                       const size_t *recv_displs, nexar_dtype dt,
                                       nexar_request **req);
/** Non-blocking nexar_reduce_scatter_v (recv_counts is copied). */
NEXAR_EXTERN int nexar_reduce_scatter_v_nb(nexar_client *c, const void *send, void *recv,
                                           const size_t *recv_counts, nexar_dtype dt, nexar_op op,
                                           nexar_request **req);
/** Non-blocking nexar_all_to_all_v (counts and displs are copied). */
NEXAR_EXTERN int nexar_all_to_all_v_nb(nexar_client *c, const void *send, const size_t *send_counts,
                                       const size_t *send_displs, void *recv,
                                       const size_t *recv_counts, const size_t *recv_displs,
                                       nexar_dtype dt, nexar_request **req);
/** Non-blocking nexar_gather_v (counts and displs are copied). */
NEXAR_EXTERN int nexar_gather_v_nb(nexar_client *c, const void *send, size_t send_count, void *recv,
                                   const size_t *recv_counts, const size_t *recv_displs,
                                   nexar_dtype dt, uint32_t root, nexar_request **req);
/** Non-blocking nexar_scatter_v (counts and displs are copied). */
NEXAR_EXTERN int nexar_scatter_v_nb(nexar_client *c, const void *send, const size_t *send_counts,
                                    const size_t *send_displs, void *recv, size_t recv_count,
                                    nexar_dtype dt, uint32_t root, nexar_request **req);

/** Waits for req, frees it, and returns the operation's result. */
NEXAR_EXTERN int nexar_wait(nexar_request *req);
/** Never blocks; *done = 1 once req has finished (failed or not). Does not free. */
NEXAR_EXTERN int nexar_test(nexar_request *req, int *done);
/** Waits for all, frees each and sets reqs[i] = NULL; returns the lowest-index error. */
NEXAR_EXTERN int nexar_wait_all(nexar_request **reqs, size_t n);

/* -------------------------------------- sub-communicators and failures */

#define NEXAR_COLOR_NONE UINT32_MAX
/** Collective: ranks with equal color form a child ordered by (key, parent rank). */
NEXAR_EXTERN int nexar_split(nexar_client *c, uint32_t color, uint32_t key, nexar_client **out);
/** Sorted ranks of c believed dead; *n gets the full count, at most cap written. */
NEXAR_EXTERN int nexar_failed_ranks(nexar_client *c, uint32_t *ranks, size_t cap, size_t *n);
/** Called on a library thread with the whole dead set each time it grows. */
typedef void (*nexar_failure_fn)(void *ctx, const uint32_t *dead, size_t n);
/** Sets (or with NULL removes) c's failure callback. */
NEXAR_EXTERN int nexar_on_failure(nexar_client *c, nexar_failure_fn fn, void *ctx);
/** Collective over the survivors: agree on the dead set and build a new communicator. */
NEXAR_EXTERN int nexar_recover(nexar_client *c, nexar_client **out);
/** As nexar_recover with the dead set given by every caller. */
NEXAR_EXTERN int nexar_rebuild_excluding(nexar_client *c, const uint32_t *dead, size_t n,
                                         nexar_client **out);
/** Elastic resize point (collective). */
NEXAR_EXTERN int nexar_elastic_checkpoint(nexar_client *c, nexar_client **out);
/** Leave at the next elastic checkpoint. */
NEXAR_EXTERN int nexar_elastic_leave(nexar_client *c);

/* ------------------------------------------------------------------ RPC */

/** An RPC handler; *reply from malloc (the library frees it). */
typedef int (*nexar_rpc_fn)(void *ctx, uint32_t caller, const void *args, size_t args_len,
                            void **reply, size_t *reply_len);
/** Registers (or with fn NULL unregisters) the handler for fn_id on c. */
NEXAR_EXTERN int nexar_rpc_register(nexar_client *c, uint16_t fn_id, nexar_rpc_fn fn, void *ctx);
/** Calls fn_id on target and waits for the reply (release with nexar_free). */
NEXAR_EXTERN int nexar_rpc(nexar_client *c, uint32_t target, uint16_t fn_id, const void *args,
                           size_t args_len, void **reply, size_t *reply_len);

/* ---------------------------------------------- compression and devices */

/** A gradient compressor (immutable, shareable between calls). */
typedef struct nexar_compressor nexar_compressor;
/** Keeps the ratio*count largest-magnitude elements. */
NEXAR_EXTERN int nexar_compressor_topk_new(nexar_compressor **out, double ratio);
/** Keeps ratio*count elements drawn from seed and the call. */
NEXAR_EXTERN int nexar_compressor_randomk_new(nexar_compressor **out, double ratio, uint64_t seed);
/** Frees a compressor. */
NEXAR_EXTERN void nexar_compressor_del(nexar_compressor *c);
/** Allreduce with compression and error feedback (residual kept between calls).
 * NEXAR_SUM or NEXAR_AVG over a float dtype (else NEXAR_ERR_UNSUPPORTED; a
 * bitwise op is NEXAR_ERR_INVALID_ARGUMENT). */
NEXAR_EXTERN int nexar_all_reduce_compressed(nexar_client *c, void *buf, size_t count,
                                             nexar_dtype dt, nexar_op op,
                                             const nexar_compressor *comp, void *residual);

/** Device memory access for p2p and collective buffers. */
typedef struct nexar_device_adapter {
  size_t struct_size; /* caller sets sizeof(nexar_device_adapter) */
  void *ctx;
  int (*to_host)(void *ctx, void *host_dst, const void *dev_src, size_t len);
  int (*from_host)(void *ctx, void *dev_dst, const void *host_src, size_t len);
} nexar_device_adapter;

/* -------------------------------------------------------- observability */

/** Traffic counters for one peer. Fields are only ever appended (the sized
 *  getter fills what the caller's struct has). */
typedef struct nexar_peer_stats {
  uint64_t bytes_sent, bytes_received, messages_sent, messages_received;
  uint64_t packets_lost;
  double smoothed_rtt_us;
  /** Payload bytes that took the bulk path instead of QUIC: a same-host copy,
   *  or the TCP stream to another host (included in bytes_sent/received). */
  uint64_t bulk_bytes_sent, bulk_bytes_received;
  /** 1 while a TCP bulk stream to the peer is up, 2 if it is TLS-protected
   *  (encrypt_bulk), 0 without one (same host, or QUIC only). */
  int bulk_stream;
} nexar_peer_stats;
/** Fills out (out_size bytes of it) with the counters for peer. Use the macro. */
NEXAR_EXTERN int nexar_peer_stats_get_sized(nexar_client *c, uint32_t peer, nexar_peer_stats *out,
                                            size_t out_size);
#define nexar_peer_stats_get(c, peer, out)                                                         \
  nexar_peer_stats_get_sized((c), (peer), (out), sizeof(nexar_peer_stats))

#ifdef __cplusplus
}
#endif
#endif /* NEXAR_NEXAR_H */
