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

/** Shape of the peer graph. FULL_MESH connects every pair. K_REGULAR (degree
 *  K, even, 2 <= K < world) connects rank r to r+-1 .. r+-K/2 (mod world);
 *  HYPERCUBE connects r to r XOR 2^i for every i with r XOR 2^i < world (the
 *  incomplete hypercube for other worlds: still connected, distances at most
 *  ceil(log2 world)). A rank opens connections only to its neighbours;
 *  point-to-point and RPC to any rank are relayed along the shortest path of
 *  live neighbours, ties broken by the lowest rank, signed by their origin
 *  (a relay cannot forge or alter them; forged ones are dropped and counted,
 *  nexar_relay_stats). Collectives on the world's own communicator use
 *  schedules whose steps are between neighbours (except all-to-all, gather,
 *  scatter, scans and the v-forms, which relay); on split or recovered
 *  communicators they relay where needed. A rank lost on a relay's path
 *  fails the operations routed through it with NEXAR_ERR_PEER_LOST naming the
 *  relay; later operations route around the dead. nexar_recover over a live
 *  graph that no longer connects the survivors fails with
 *  NEXAR_ERR_ABORTED ("partitioned"). A K the world cannot have is
 *  NEXAR_ERR_INVALID_ARGUMENT naming config.topology_degree when the world
 *  forms; elastic growth of a sparse world is NEXAR_ERR_UNSUPPORTED. */
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
/** Who may form a successor view after failures (nexar_recover, nexar_agree).
 * MAJORITY: only a side holding a strict majority of the old view (no split
 * brain; a minority gets NEXAR_ERR_ABORTED). SURVIVORS: whoever is reachable,
 * as ULFM's shrink: two sides of a partition each form their own view. */
typedef enum { NEXAR_QUORUM_MAJORITY = 0, NEXAR_QUORUM_SURVIVORS = 1 } nexar_recovery_quorum;

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
  nexar_recovery_quorum recovery_quorum; /* MAJORITY (NEXAR_RECOVERY_QUORUM=majority|survivors) */
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

/** Joins through a seed; returns once the full mesh is connected. A seed whose
 * world has formed queues the joiner (a member id that was never used, a
 * certificate bound to it), and this returns once the members' next
 * nexar_elastic_checkpoint admits it: the communicator of that view, with
 * nexar_elastic_info i_am_new = 1 and a rank at least the number of staying
 * members. Returns 0; NEXAR_ERR_AUTH (wrong cluster token, a certificate for
 * another id); NEXAR_ERR_TIMEOUT (no formation within connect_timeout_ms, or,
 * queued, no admission within elastic_checkpoint_timeout_ms); NEXAR_ERR_ABORTED
 * or NEXAR_ERR_PEER_LOST (the change that admitted it aborted: join again);
 * NEXAR_ERR_IO (the seed is unreachable); NEXAR_ERR_PROTOCOL;
 * NEXAR_ERR_INVALID_ARGUMENT; NEXAR_ERR_NOMEM. */
NEXAR_EXTERN int nexar_join(nexar_client **out, const char *seed_addr, const nexar_config *cfg);
/** Joins as the launcher that started this process says. The first of these
 * that is present decides (NEXAR_DEBUG=info logs which one, and the others it
 * ignored; `nexar-info --launcher` shows it without starting anything):
 *
 * 1. NEXAR_SEED_ADDR (+ optional NEXAR_WORLD_SIZE, NEXAR_RANK to ask for a
 *    rank): join a running seed (nexar-seed); without NEXAR_RANK the seed
 *    assigns ranks.
 * 2. PMIx (PMIX_RANK and PMIX_NAMESPACE: Open MPI's mpirun, srun
 *    --mpi=pmix): libpmix.so.2 is loaded at run time (never linked); rank and
 *    world are PMIx's rank and job size; rank 0 hosts the seed on an
 *    ephemeral port (or NEXAR_SEED_PORT) and publishes "host:port" with
 *    PMIx_Put/Commit, the others read it after a PMIx_Fence. The host is
 *    NEXAR_SEED_HOST, else the host of a non-wildcard NEXAR_BIND_ADDR, else
 *    rank 0's host name. OMPI_COMM_WORLD_RANK/SIZE, when set, must agree.
 *    NEXAR_PMIX_LIB names another libpmix (a path or soname). A build
 *    without PMIx headers, or a host without libpmix, fails with
 *    NEXAR_ERR_UNSUPPORTED saying so, with one documented exception: under
 *    Open MPI (OMPI_COMM_WORLD_RANK and _SIZE set) with both NEXAR_SEED_HOST
 *    and NEXAR_SEED_PORT set, the world forms from OMPI_COMM_WORLD_RANK/SIZE
 *    instead, rank 0 hosting the seed at that address (logged at info as
 *    "launcher Open MPI variables (PMIx unusable: ...)").
 * 3. PMI-1 (PMI_FD, PMI_RANK, PMI_SIZE: MPICH's Hydra mpiexec, srun
 *    --mpi=pmi2, whose server also answers PMI-1): the same
 *    exchange over the launcher's key-value space (put, barrier, get), every reply
 *    parsed as untrusted input (NEXAR_ERR_PROTOCOL when malformed). PMI-1
 *    serves one call per process (then PMI_FD is finalized and closed; a
 *    second call is NEXAR_ERR_UNSUPPORTED: split the communicator instead).
 * 4. Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_ID and
 *    SLURM_STEP_NODELIST or SLURM_JOB_NODELIST: srun): rank SLURM_PROCID of
 *    SLURM_NTASKS; task 0 hosts the seed, which the others find on the first
 *    node of the node list (a Slurm hostlist, "node[01-04,07],gpu-a[1-2]";
 *    task 0 must run there: block or cyclic distribution, else
 *    INVALID_ARGUMENT) at port NEXAR_SEED_PORT, else the first of
 *    SLURM_STEP_RESV_PORTS (srun --resv-ports), else 20000 + (SLURM_JOB_ID
 *    mod 1250) * 16 + SLURM_STEP_ID mod 16. NEXAR_SEED_HOST overrides the
 *    host.
 * 5. torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): the process with
 *    RANK 0 hosts the seed itself at MASTER_ADDR:P, and every process gets
 *    exactly the rank RANK. P is NEXAR_SEED_PORT if set; else MASTER_PORT + 1
 *    when TORCHELASTIC_USE_AGENT_STORE=True (torchrun's agent already
 *    listens on MASTER_PORT); else MASTER_PORT.
 *
 * Every launcher path needs the same cluster token on every process:
 * NEXAR_CLUSTER_TOKEN, or NEXAR_CLUSTER_TOKEN_FILE naming a regular file not
 * accessible by group or others (trailing newline ignored, at most 4096
 * bytes); neither, both, or an unsafe file: NEXAR_ERR_INVALID_ARGUMENT naming
 * both variables. A world size that is inconsistent (NEXAR_WORLD_SIZE set
 * and differing from the launcher's, a rank outside the world, a node list
 * that disagrees with SLURM_STEP_NUM_NODES) is NEXAR_ERR_INVALID_ARGUMENT
 * before any socket; under PMIx and PMI-1 rank 0's refusal reaches every
 * rank through the launcher, and ranks that disagree among themselves get
 * NEXAR_ERR_MISMATCH from the seed, so no rank waits for one that failed.
 * Addresses are "host:port", the host a DNS name, an IPv4 address or a
 * bracketed IPv6 address ("[::1]:29500"). Returns 0, INVALID_ARGUMENT,
 * UNSUPPORTED, PROTOCOL, IO, TIMEOUT (connect_timeout_ms), AUTH, MISMATCH,
 * PEER_LOST (a rank died during formation) or NOMEM. */
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
/** Delivers what was sent, fails pending requests with ABORTED, then frees c.
 * Deleting a process's last communicator waits (at most collective_timeout_ms)
 * until what it sent is acknowledged; in a sparse topology also until the
 * sends it relayed or originated reached their destinations and every other
 * live, reachable rank has closed too, as others may need this rank to
 * forward. So a rank that leaves a running sparse world early waits up to
 * collective_timeout_ms here. Returns nothing; a failure on the way is
 * reported to no one. */
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
/** Collective over the survivors (each calls it once the failure is known):
 * revokes c, then the survivors agree on the dead set with a fault-tolerant
 * agreement (a rotating-coordinator consensus that survives further deaths,
 * the coordinator's included) and each gets a communicator of the same view:
 * same comm_id, epoch (c's + 1), world and rank order (the old order without
 * the dead), inheriting c's RPC handlers and failure callback. A member that
 * does not answer within heartbeat_timeout_ms joins the dead set.
 * AUTOMATIC starts the agreement as soon as a failure is seen, MANUAL here.
 * Returns 0; NEXAR_ERR_ABORTED (policy ABORT, c aborted here, or no
 * successor formed: with NEXAR_QUORUM_MAJORITY a side without a strict
 * majority of c, "no majority: 2 of 4 reachable", or recovery_timeout_ms
 * passed); NEXAR_ERR_PEER_LOST with *out = NULL when the survivors declared
 * this rank failed (a false suspicion: its frames are dropped by the new
 * view); NEXAR_ERR_INVALID_ARGUMENT (NULL, or c was recovered already:
 * recover its successor); NEXAR_ERR_NOMEM. */
NEXAR_EXTERN int nexar_recover(nexar_client *c, nexar_client **out);
/** As nexar_recover, without a vote: every caller passes the same set (else
 * NEXAR_ERR_MISMATCH) and must not be in it (else
 * NEXAR_ERR_INVALID_ARGUMENT; a rank out of range: NEXAR_ERR_INVALID_RANK).
 * The successor has c's epoch + 1. */
NEXAR_EXTERN int nexar_rebuild_excluding(nexar_client *c, const uint32_t *dead, size_t n,
                                         nexar_client **out);
/** The view c stands for: 0 at formation, the predecessor's + 1 for a
 * successor (recover, rebuild_excluding); split children carry their
 * parent's. Every member of one view reports the same (comm_id, epoch,
 * world). 0 for NULL. */
NEXAR_EXTERN uint64_t nexar_view_epoch(const nexar_client *c);
/** ULFM's MPI_Comm_revoke: every member's pending and later operations on c
 * fail at once (NEXAR_ERR_PEER_LOST if they involve a dead rank, else
 * NEXAR_ERR_ABORTED); the notice is flooded (each member forwards it once
 * before acting), so it reaches every live member even if the caller dies
 * right after; split children of c are revoked too. Only queries,
 * nexar_recover, nexar_agree and nexar_client_del work on a revoked
 * communicator. An operation that fails because a member is lost revokes c
 * by itself. Idempotent. Returns 0 or NEXAR_ERR_INVALID_ARGUMENT (NULL). */
NEXAR_EXTERN int nexar_revoke(nexar_client *c);
/** ULFM's MPI_Comm_agree, fault-tolerant: every live member calls it (in the
 * same order relative to its other nexar_agree calls on c); all that return
 * get the same *flag, the bitwise AND of the flags of the members that
 * contributed, even when members (the coordinator included) die during the
 * call. Works on a revoked communicator. Returns 0 if every member
 * contributed; NEXAR_ERR_PEER_LOST (with the agreed *flag) if some member is
 * dead or did not answer within collective_timeout_ms, or (with *flag
 * unchanged) if the others declared this rank failed; NEXAR_ERR_ABORTED
 * (aborted here, or no decision: no majority with NEXAR_QUORUM_MAJORITY, or
 * recovery_timeout_ms passed); NEXAR_ERR_INVALID_ARGUMENT (NULL);
 * NEXAR_ERR_NOMEM. */
NEXAR_EXTERN int nexar_agree(nexar_client *c, uint32_t *flag);
/** Elastic resize point, a collective over c (no _nb op of c may be in
 * flight). Every rank's leave flag is gathered, and rank 0 says whether its
 * seed reported waiting joiners (a checkpoint without a change costs about one
 * small all_gather). With a change the staying ranks get *out, the successor
 * view: epoch + 1, the stayers in their old order, then the joiners the seed
 * admitted (in arrival order, up to elastic_max_world of rank 0 and of the
 * seed), RPC handlers and failure callback inherited, nexar_elastic_info
 * filled; a leaver gets 0 with *out = NULL. Joiners are admitted by a
 * two-phase change: stayers and joiners connect, then agree that everyone is
 * ready; if one is not (it died, cannot connect within
 * elastic_checkpoint_timeout_ms), the change aborts and c stays the view (with
 * leavers, the stayers get the departures-only successor instead). After a
 * resize the old c (a leaver's too) accepts only queries and
 * nexar_client_del: other calls give NEXAR_ERR_ABORTED ("left at checkpoint
 * k" / "resized at checkpoint k"). Without a change *out = NULL. Returns 0;
 * NEXAR_ERR_INVALID_ARGUMENT (NULL, an _nb collective in flight);
 * NEXAR_ERR_ABORTED (the departures would go below elastic_min_world: nothing
 * changes, on every rank); NEXAR_ERR_PEER_LOST (a member of c failed: recover;
 * or a joiner failed before the commit, naming it: then nexar_failed_ranks(c)
 * is empty and c stays usable); NEXAR_ERR_TIMEOUT (the admission could not
 * complete in time: c stays usable); the errors of a collective (MISMATCH);
 * NEXAR_ERR_PROTOCOL (rank 0 sent an invalid joiner list); NEXAR_ERR_NOMEM. */
NEXAR_EXTERN int nexar_elastic_checkpoint(nexar_client *c, nexar_client **out);
/** Marks this rank to leave at the next nexar_elastic_checkpoint. Returns 0,
 * or NEXAR_ERR_INVALID_ARGUMENT (NULL), NEXAR_ERR_ABORTED (c aborted,
 * resized or revoked; PEER_LOST when revoked after a loss). */
NEXAR_EXTERN int nexar_elastic_leave(nexar_client *c);
/** What the resize that made c changed, identical on every member of c. On a
 * communicator not made by a resize: epoch as nexar_view_epoch, old_world =
 * new_world = the world, joined = left = 0, i_am_new = 0, old_rank = the
 * rank. A joiner's communicator has i_am_new = 1 and old_rank = UINT32_MAX. */
typedef struct nexar_elastic_info {
  size_t struct_size; /* written by the getter */
  uint64_t epoch;
  uint32_t old_world, new_world;
  uint32_t joined, left; /* counts; ranks lost to failure count in left */
  int i_am_new;
  uint32_t old_rank;
} nexar_elastic_info;
/** Fills out (at most size bytes). Returns 0 or NEXAR_ERR_INVALID_ARGUMENT
 * (NULL, or size below sizeof(size_t)). Use the macro. */
NEXAR_EXTERN int nexar_elastic_info_get_sized(const nexar_client *c, nexar_elastic_info *out,
                                              size_t size);
#define nexar_elastic_info_get(c, out) nexar_elastic_info_get_sized((c), (out), sizeof(*(out)))

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

/** Device memory access for p2p and collective buffers (nexar_config.adapter).
 *
 * With an adapter set, every p2p and collective data buffer is device memory
 * that the library touches only through these callbacks, on every path
 * (small, large, pipelined, same-host copy, TCP bulk, relayed, compressed,
 * split children, _nb). RPC data, compression residuals, bucket descriptors
 * and count/displacement arrays stay in host memory. Collectives stage the
 * device regions of each schedule step through host segments whose bounds
 * are a pure function of (offset, length) (NEXAR_DEVICE_SEGMENT_BYTES, 1 MiB):
 * a segment is copied out before the first step that reads it (up to
 * NEXAR_DEVICE_PREFETCH segments ahead, on NEXAR_DEVICE_COPY_THREADS copy
 * threads, while earlier segments are on the wire) and copied back once the
 * last step that writes it is done; the algorithm, its messages and its
 * reduction order are those of host buffers, so results are bit-identical.
 * Point-to-point messages are staged whole (copied in segments).
 *
 * Callbacks run on library threads, possibly concurrently, and make their
 * own device context current. A non-zero return (or a failed event) fails
 * the operation with NEXAR_ERR_IO. An adapter without to_host/from_host is
 * NEXAR_ERR_INVALID_ARGUMENT when the config is used.
 *
 * The synchronous adapter is the first four fields (struct_size =
 * offsetof(nexar_device_adapter, to_host_async) keeps working); the
 * asynchronous fields after them are read only when struct_size covers
 * them, and each may be NULL. */
typedef struct nexar_device_adapter {
  size_t struct_size; /* caller sets sizeof(nexar_device_adapter) */
  void *ctx;
  int (*to_host)(void *ctx, void *host_dst, const void *dev_src, size_t len);
  int (*from_host)(void *ctx, void *dev_dst, const void *host_src, size_t len);
  /* --- asynchronous adapter (appended). Used when to_host_async,
   * from_host_async, event_query and event_release are all set: a copy is
   * issued (returns 0 and an event, or non-zero: NEXAR_ERR_IO), the engine
   * polls event_query from its progress loop (1 done, 0 not yet, negative:
   * the copy failed, NEXAR_ERR_IO; it must never block), and releases every
   * event it got exactly once, also after a failure or an abort. Host
   * buffers stay untouched until the event is done. */
  int (*to_host_async)(void *ctx, void *host_dst, const void *dev_src, size_t len, void **event);
  int (*from_host_async)(void *ctx, void *dev_dst, const void *host_src, size_t len, void **event);
  int (*event_query)(void *ctx, void *event);
  void (*event_release)(void *ctx, void *event);
  /* Optional pinned host memory for staging buffers (NULL: malloc); NULL
   * from host_alloc falls back to malloc. */
  void *(*host_alloc)(void *ctx, size_t len);
  void (*host_free)(void *ctx, void *p);
  /* Optional device-side reduction dev_dst = dev_dst op dev_src (count
   * elements). Reserved: this version reduces on host staging (so results
   * are bit-identical to host buffers) and never calls it. */
  int (*reduce)(void *ctx, void *dev_dst, const void *dev_src, size_t count, nexar_dtype dt,
                nexar_op op);
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
  /** Frames from the peer for a revoked communicator (an old view), dropped
   *  unread: they never complete an operation of another view. */
  uint64_t stale_frames;
  /** 1 while this rank keeps a direct connection to the peer (every live
   *  peer in a full mesh; only graph neighbours in a sparse topology), 0
   *  when traffic to it is relayed (or it is gone). */
  int neighbor;
  /** Bytes this rank forwarded to the peer (a neighbour) for other ranks. */
  uint64_t relayed_bytes;
  /** Same-host shared-memory rings with the peer: 0 none, 1 being set up,
   *  2 up (collective frames use them), 3 point-to-point goes by them too. */
  int shm;
  /** Payload bytes that went by the rings (included in bytes_sent/received). */
  uint64_t shm_bytes_sent, shm_bytes_received;
  /** Ring records or segment offers from the peer that were malformed and
   *  refused (the peer is then dropped with NEXAR_ERR_PROTOCOL). */
  uint64_t shm_dropped;
} nexar_peer_stats;
/** Fills out (out_size bytes of it) with the counters for peer. Use the macro. */
NEXAR_EXTERN int nexar_peer_stats_get_sized(nexar_client *c, uint32_t peer, nexar_peer_stats *out,
                                            size_t out_size);
#define nexar_peer_stats_get(c, peer, out)                                                         \
  nexar_peer_stats_get_sized((c), (peer), (out), sizeof(nexar_peer_stats))

/** What this rank's endpoint did as a relay of a sparse topology (all zero
 *  in a full mesh). Fields are only ever appended. */
typedef struct nexar_relay_stats {
  uint64_t forwarded_bytes;     /**< segments forwarded for other ranks */
  uint64_t buffered_bytes;      /**< forwarded segments held now (not yet acknowledged) */
  uint64_t peak_buffered_bytes; /**< the most ever held: at most flows x window x segment */
  uint64_t dropped_ttl;         /**< segments dropped because their TTL ran out */
  uint64_t dropped_auth;        /**< segments for this rank with a bad origin signature,
                                     certificate or sequence (forged or replayed): dropped */
  uint64_t dropped_route;       /**< segments with no live route onwards: dropped */
} nexar_relay_stats;
/** Fills out (out_size bytes of it) for c's endpoint (shared by the
 *  communicators made from one world). 0, or NEXAR_ERR_INVALID_ARGUMENT
 *  for a NULL argument. Use the macro. */
NEXAR_EXTERN int nexar_relay_stats_get_sized(nexar_client *c, nexar_relay_stats *out,
                                             size_t out_size);
#define nexar_relay_stats_get(c, out)                                                              \
  nexar_relay_stats_get_sized((c), (out), sizeof(nexar_relay_stats))

#ifdef __cplusplus
}
#endif
#endif /* NEXAR_NEXAR_H */
