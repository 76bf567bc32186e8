/* The engine: one endpoint per process-rank, its progress thread, peers,
 * outgoing messages, incoming streams and the matching queues.
 *
 * Locking: ep->mu protects everything in this header. The progress thread
 * holds it while it works and drops it only to sleep in epoll_wait, so
 * application threads that take ep->mu see a consistent state. The QUIC link
 * (transport/quic.h, not thread-safe) is called only under ep->mu by the
 * thread driving the engine; its callbacks are in quic_glue.c. Application
 * threads queue work under ep->mu and wake the progress thread through an
 * eventfd. */
#ifndef NX_RUNTIME_ENGINE_H
#define NX_RUNTIME_ENGINE_H

#include <gnutls/gnutls.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "core/common.h"
#include "core/config.h"
#include "core/frame.h"
#include "transport/pki.h"
#include "transport/quic.h"
#include "transport/udp.h"
#include "proto/pick.h"
#include "proto/route.h"
#include "runtime/work.h"

typedef struct nx_ep nx_ep;
typedef struct nx_peer nx_peer;
typedef struct nx_txmsg nx_txmsg;
typedef struct nx_rxstream nx_rxstream;
typedef struct nx_msg nx_msg;
typedef struct nx_recv nx_recv;
typedef struct nexar_client nx_comm;
typedef struct nx_rndv nx_rndv;
typedef struct nx_bulk nx_bulk;
typedef struct nx_rflow nx_rflow;
typedef struct nx_rin nx_rin;
typedef struct nx_shm nx_shm;
typedef struct nx_rstream nx_rstream;

/* Sends up to this size are copied, so a blocking send returns at once. */
#define NX_EAGER_MAX (256u * 1024u)
/* Collective messages to a same-host peer above this go by rendezvous. */
#define NX_RNDV_COLL_MIN (32u * 1024u)
/* Messages to another host above these go by the bulk TCP stream (below,
 * QUIC is as fast: the CTS round trip and TLS cost about what QUIC does);
 * measured with bench/bulk_sweep.sh, results in bench/results/bulk. */
#define NX_BULK_TLS_MIN (1024u * 1024u)
#define NX_BULK_PLAIN_MIN (256u * 1024u)
/* Stream window before a message is matched: bounds unexpected data. */
#define NX_STREAM_WINDOW (512u * 1024u)
/* Extra window a matched receive gets, for throughput. */
#define NX_STREAM_BOOST (16u * 1024u * 1024u)
/* Total unexpected bytes an endpoint buffers before it stops giving credit
 * (default of nexar_config.unexpected_budget_bytes). Beyond it, bytes of
 * unexpected messages keep their stream and connection credit until a receive
 * matches them, so each peer can add at most NX_CONN_WINDOW more. */
#define NX_UNEXP_BUDGET (256ull << 20)
/* Connection-level flow-control window (fixed: no auto-tuning), and the part
 * of it that user point-to-point data leaves for runtime traffic (collectives,
 * RPC, heartbeats), so they progress while unexpected data holds the rest.
 * Below the reserve, the oldest user message still flows while more than
 * half the reserve is left (the receiver may be waiting for just that one).
 * ngtcp2 0.12 sends MAX_DATA once returned credit exceeds half the transport
 * parameter (which is a quarter of the window; the rest is added at once):
 * half the reserve must exceed that, so runtime traffic alone triggers the
 * next MAX_DATA before it runs out. */
#define NX_CONN_WINDOW (16u * 1024u * 1024u)
#define NX_CONN_PARAM (NX_CONN_WINDOW / 4)
#define NX_CONN_RESERVE (8u * 1024u * 1024u)
_Static_assert(NX_CONN_RESERVE / 2 > NX_CONN_PARAM / 2, "runtime traffic must reach MAX_DATA");
/* Copies of eager sends queued to one peer and not yet acknowledged: beyond
 * this a send with a request waits for its acknowledgement (flow control
 * reaches the sender instead of its memory growing). */
#define NX_EAGER_QUEUE_MAX (2u * NX_CONN_WINDOW)
/* Largest runtime-consumed message (RPC arguments and replies). */
#define NX_INTERNAL_MAX (256ull << 20)
#define NX_MAX_STREAMS 256
/* Streams that user point-to-point messages leave to runtime messages. */
#define NX_STREAM_RESERVE 32

enum nx_peer_state { NX_PEER_INIT = 0, NX_PEER_CONNECTING, NX_PEER_UP, NX_PEER_DEAD };

/* One outgoing message = one QUIC stream: header + payload, then FIN. */
struct nx_txmsg {
  nx_qtx q;                      /* what the QUIC link sees: header, iov, stream, progress */
  nx_txmsg *next;                /* the peer's txq/utxq while it waits for a stream */
  nx_txmsg *all_prev, *all_next; /* every live message of the endpoint */
  nx_ep *ep;
  nx_peer *peer;
  nexar_iovec iov1;
  void *owned;        /* eager copy or owned iov array */
  nexar_request *req; /* completed at full ack (zero-copy sends); NULL if none */
  int cancel;         /* reset requested */
  int cancel_rc;      /* the result its request gets */
  uint64_t eager_len; /* counted in peer->eager_queued (a user eager copy) */
  uint64_t relay_len; /* a segment this rank forwards: counted in ep->relay_buf */
};

/* The receiving side of one remote stream. */
struct nx_rxstream {
  nx_rxstream *all_prev, *all_next; /* every live stream of the endpoint */
  nx_peer *peer;
  int64_t sid;
  uint8_t hdr[NX_FRAME_HDR_LEN];
  size_t hdrlen;
  nx_msg *msg;
  uint64_t held;     /* consumed bytes whose credit is not yet returned */
  int credit_queued; /* on ep->credit list */
  int boost;         /* 1: give NX_STREAM_BOOST once; 2: given */
  int fin;
  int closed;
  nx_rxstream *next_credit;
};

/* A message whose header has arrived. */
struct nx_msg {
  uint64_t wire_len;    /* payload bytes on the stream (a descriptor for rendezvous) */
  nx_msg *next;         /* unexpected queue */
  nx_msg *next_pending; /* waiting for earlier streams of its peer */
  int64_t sid;
  int ordered;
  nx_frame f;
  nx_peer *peer;
  nx_rxstream *rs; /* NULL once the stream is done */
  uint64_t got;    /* payload bytes received */
  uint8_t *buf;    /* unexpected storage */
  uint64_t bufcap;
  nx_recv *rcv; /* matched receive */
  int complete;
  int queued; /* on the unexpected list */
  int discard;
  int answered;  /* rendezvous descriptor: its sender was told the outcome */
  uint64_t held; /* bytes whose connection credit waits for a receive (over budget) */
  int relq;      /* on its peer's relay queue (relay.c frees it) */
};

/* Match key: communicator, kind, source (root rank), tag, round, segment. */
typedef struct nx_key {
  uint64_t comm;
  uint8_t kind;
  uint32_t src;
  uint64_t tag;
  uint32_t round, seg;
} nx_key;

/* A posted receive. */
struct nx_recv {
  nx_recv *next;
  nx_key key;
  const nexar_iovec *iov;
  size_t niov;
  nexar_iovec iov1;
  uint64_t len;
  nx_msg *msg;
  uint64_t got;
  int done;
  int rc;
  nexar_request *req;
  int anylen;      /* take a message of any length (RPC replies) */
  uint8_t *anybuf; /* its payload, handed over on completion */
  uint64_t anysize;
  int32_t status; /* the frame's status field (RPC replies) */
  int reading;    /* a rendezvous copy into it is running: must not be cancelled */
};

struct nx_peer {
  uint32_t rank; /* root rank */
  int state;
  struct sockaddr_storage addr;
  socklen_t addrlen;
  char addrstr[128];
  char host[64];
  nx_qconn *qc;
  nx_txmsg *txq_head, *txq_tail; /* messages with bytes to hand to ngtcp2 */
  /* user point-to-point messages wait apart, in their own order: runtime
   * messages get streams even while a receiver holds back user data */
  nx_txmsg *utxq_head, *utxq_tail;
  int64_t rx_next_sid; /* next remote stream in send order */
  nx_msg *rx_pending;  /* parsed headers waiting for rx_next_sid, by sid */
  int64_t *rx_skip;    /* streams that ended before their header */
  size_t nskip, capskip;
  uint64_t last_heard_ns;
  uint64_t next_hb_ns;
  char why[160];              /* reason it died */
  int dead_code;              /* what its pending operations got */
  int shm_ok;                 /* same host and it can read our memory: large sends by rendezvous */
  int departed;               /* closed gracefully */
  int absent;                 /* an id outside this member's view (never dialed) */
  uint64_t rndv_cancelled[8]; /* its cancels that overtook their descriptor */
  uint64_t rstream_max;       /* the largest id of its streams we asked for */
  nx_pick rpick;              /* its large messages: streamed (0) or single copy (1) (rndv.c) */
  int same_host;              /* it proved it can read our memory */
  struct sockaddr_un lane_addr; /* its same-host lane (lane.c) */
  socklen_t lane_addrlen;
  int lane_known;          /* its hello gave the lane address: its datagrams are accepted */
  int lane_ok;             /* it answered our ping: small collective frames go by the lane */
  pid_t shm_pid;           /* its process id, when on this host */
  nx_shm *shm;             /* shared-memory rings with it (shm.c), NULL if none */
  nx_bulk *bulk;           /* TCP bulk stream (another host), set while dialing */
  int bulk_up;             /* large sends to it may take the bulk stream */
  uint8_t bulk_secret[32]; /* what it must present when it dials our listener */
  unsigned ncancelled;
  uint64_t conn_release; /* held connection credit released, not yet returned */
  uint64_t eager_queued; /* bytes of eager user sends not yet acknowledged */
  /* sparse topologies (relay.c) */
  int relayed;                   /* not a neighbour: no connection, traffic goes by relay */
  uint64_t relay_seq;            /* next relayed message to it */
  int64_t relay_sid;             /* next virtual stream id of a message relayed from it */
  uint64_t rin_seq;              /* relayed messages from it below this have begun */
  nx_rin *rin;                   /* its relayed messages arriving here */
  nx_msg *relq_head, *relq_tail; /* RELAY messages from this neighbour, in stream order */
  int closing; /* it is closing, all it originated delivered: it only forwards now */
  nexar_peer_stats st;
};

struct nx_ep {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast on arrivals, peer state changes */
  nx_udp udp;
  int epfd, evfd;
  int epfd_ctl;                    /* eventfd only: used while application threads poll */
  int epfd_wait;                   /* UDP socket + wfd: where waiting application threads sleep */
  int wfd;                         /* eventfd: a request was completed by another thread */
  atomic_int spinners;             /* application threads driving progress in a wait */
  _Atomic uint64_t last_driver_ns; /* when one last stopped driving */
  _Atomic uint64_t next_due;       /* the deadline the last progress step returned */
  atomic_int local_peers;          /* peers proven on this host */
  int ncpu;                        /* online CPUs */
  nx_knobs knobs;                  /* environment-only knobs, parsed at creation */
  long spin_override;              /* NEXAR_SPIN_US, -1 if unset */
  uint64_t yield_ns;               /* NEXAR_YIELD_US */
  pthread_t thr;
  int thr_started;
  int stop;
  atomic_int refs;
  uint32_t rank, world; /* world: the peer table's length (member ids known) */
  nx_route route;       /* who dials whom, next hops (proto/route.h) */
  nx_peer **peers;      /* by member id; each allocated once, never moved */
  /* the cluster layer's channel to the seed (admissions), freed with ep */
  void *seedlink;
  void (*seedlink_del)(void *seedlink);
  uint8_t cluster_id[16];
  gnutls_certificate_credentials_t creds;
  nx_quic *quic; /* the QUIC link: every connection (transport/quic.h) */
  /* matching */
  nx_msg *unexp_head, *unexp_tail;
  nx_recv *posted_head, *posted_tail;
  uint64_t unexp_bytes;
  uint64_t unexp_budget; /* cfg.unexpected_budget_bytes */
  uint64_t unexp_coll;   /* the part of unexp_bytes that is collective data */
  int conn_credit_dirty; /* some peer has conn_release */
  nx_rxstream *credit_list;
  nx_txmsg *tx_all;
  /* same-host rendezvous (process_vm_readv): sends waiting for their reader */
  nx_rndv *rndv_head;
  uint64_t rndv_next;
  nx_rndv *streams;       /* sends of rndv_head streaming through a ring, oldest first */
  nx_rstream *rstreams;   /* receives filled by such streams, oldest first */
  uint8_t shm_cookie[16]; /* a peer reads it to prove it can read our memory */
  int lane_fd;            /* same-host lane socket (lane.c), -1 if none */
  struct nx_lane_rx *lane_rx;
  int lane_live;                  /* a same-host peer's hello arrived: the lane is read */
  struct nx_lane_owed *lane_owed; /* control datagrams the lane could not take yet (lane.c) */
  _Atomic(nx_shm *) shm_all;      /* every shared-memory segment (shm.c), push-front only */
  uint64_t shm_dropped;           /* segments refused and malformed ring records */
  uint64_t shm_bells;             /* doorbells tried for records (integration.shm reads it) */
  /* inter-host bulk path (bulk.c) */
  int bulk_lfd;
  uint16_t bulk_port;
  pthread_t bulk_thr;
  int bulk_thr_started;
  nx_bulk *bulk_all;
  int bulk_stop;
  int bulk_tcp_local; /* NEXAR_BULK_TCP_LOCAL=1: TCP also between same-host ranks */
  uint64_t bulk_min;  /* larger messages take it (NEXAR_BULK_MIN_BYTES) */
  nx_rxstream *rx_all;
  /* communicators sharing this endpoint */
  nx_comm *comms;
  nexar_config cfg;
  uint64_t hb_interval_ns, hb_timeout_ns;
  int wake_pending;
  int in_progress; /* a progress step is running (possibly in this call chain) */
  uint64_t sleep_until;
  uint64_t dropped_datagrams; /* garbage on the lane socket (QUIC's: nx_quic_dropped) */
  /* deferred work (work.c): its own lock, taken after ep->mu when both are */
  pthread_mutex_t work_mu;
  nx_work *work_head, *work_tail;
  atomic_int work_n;
  nx_work *timers;
  _Atomic uint64_t timer_min;
  /* recovery (comm.c, agreement.c), under ep->mu */
  nx_work agr_timer;        /* drives the agreements of every communicator */
  uint64_t agr_due;         /* when agr_timer is armed for (UINT64_MAX: not) */
  uint64_t revoked_ids[32]; /* revoked comms not created here yet: born revoked */
  unsigned nrevoked_ids;
  unsigned nrevoked_live; /* communicators here that are revoked: frames are checked then */
  uint32_t agr_exit_sent; /* NEXAR_TEST_AGREE_EXIT: messages of the hooked type sent */
  int agr_frozen;         /* ...the hook fired: the process exits soon */
  nx_work agr_exit;
  /* sparse topologies (relay.c), under ep->mu */
  nx_signer *signer; /* signs what this rank originates, checks relayed origins */
  nx_rflow *rflows;  /* relayed messages this rank originates, not yet acknowledged */
  int closing_sent;  /* this rank's closing notice is out (nx_relay_linger_locked) */
  /* every rank of the world is in this process (nexar_bootstrap_local): they
   * all end with it, and one thread deleting them in turn would otherwise
   * wait at each for ranks that can close only after it returns */
  int world_inproc;
  /* the mesh formed (its final barrier passed): only then may others rely
   * on this rank to forward, and only then does closing wait for them */
  int formed;
  uint64_t drain_until;      /* nx_ep_drain's deadline, from its first call (0 none yet) */
  uint64_t relay_buf;        /* bytes of other ranks' segments this rank holds to forward */
  uint64_t relay_buf_peak;   /* the most it ever held */
  uint64_t relay_forwarded;  /* bytes forwarded for other ranks */
  uint64_t relay_drop_ttl;   /* segments dropped: TTL ran out */
  uint64_t relay_drop_auth;  /* segments dropped: signature, certificate or sequence wrong */
  uint64_t relay_drop_route; /* segments dropped: no live route to their destination */
};

/* ---- engine.c */
int nx_ep_new(nx_ep **out, const nexar_config *cfg, const char *bind_host, uint16_t port);
/* The peer table of n zeroed peers (ep->peers, ep->world = n); NOMEM. */
int nx_ep_peers_alloc(nx_ep *ep, uint32_t n);
void nx_ep_peers_free(nx_ep *ep);
/* Fills peer p for member id: this endpoint (self), one at addr "host:port",
 * or (addr NULL or "") an id outside the view, marked absent and dead. */
int nx_ep_peer_init(nx_ep *ep, nx_peer *p, uint32_t id, int self, const char *addr);
/* Admits member id at addr after formation: grows the table (ids between the
 * old end and id become absent), the route and the link's bounds; the peer
 * starts in NX_PEER_INIT, so whichever side the route names dials. 0 if it is
 * known already; INVALID_ARGUMENT for an id that was a member and is gone;
 * NOMEM; IO if addr does not resolve. */
int nx_ep_add_peer_locked(nx_ep *ep, uint32_t id, const char *addr);
#define NX_PEER_ID_MAX 65536u /* member ids stay below (the bootstrap's world limit) */
/* Installs identity and peers; starts the progress thread. addrs[world].
 * The endpoint owns creds once this returns 0; on a failure the caller
 * still does (ep->creds stays NULL). */
int nx_ep_start(nx_ep *ep, uint32_t rank, uint32_t world, const uint8_t cluster_id[16],
                gnutls_certificate_credentials_t creds, char (*addrs)[128]);
/* Connects to every higher rank and waits until every peer is up. */
int nx_ep_connect_mesh(nx_ep *ep, uint64_t deadline_ns);
void nx_ep_ref(nx_ep *ep);
void nx_ep_unref(nx_ep *ep); /* the last reference stops the thread and frees */
/* Closing's wait for what this rank still owes its peers (engine.c says
 * what). Takes ep->mu. */
void nx_ep_drain(nx_ep *ep);
uint16_t nx_ep_port(const nx_ep *ep);
void nx_ep_wake(nx_ep *ep); /* under ep->mu */
/* How long a waiter (a request's or a communicator segment's) polls before
 * it sleeps, when every rank of the host has a CPU (see engine.c). Longer
 * measured faster in a segment's wait, as MPI's busy polling: a sleeper's
 * wake-up (a futex, then a halted virtual CPU woken) can take longer than
 * the peer's next step, and then both ranks keep missing each other. With
 * 20 us, an 8-byte all_reduce between two processes on 2 CPUs averaged 3.5
 * to 15 us over its first 2000 calls (sleeping half of them); with 2 ms, 0.7
 * to 1.5 us. But 2 ms made integration.fault_processes miss its detection
 * bound while other tests polled beside it, and in a request's wait a 4 MiB
 * receive's copy runs on a worker thread that a 2 ms poll delays (4 MiB
 * ping-pong 1.8 ms instead of 1.0). */
#define NX_SPIN_NS 20000ull
/* A point-to-point receive from a same-host ring (p2p.c, recv_now; a
 * request's wait up to NX_RNDV_INLINE_MAX, request.c) polls this long when
 * every rank here has a CPU, serving the sockets and timers every
 * NX_SPIN_NS of it (the progress thread leaves them to spinners). With 20
 * us a peer descheduled a little longer (a tick's preemption, the VM's
 * steal) put the receiver to sleep; the next message then needs a doorbell
 * and a wake-up, which makes the peer's own 20 us run out: a cascade. 8 B
 * ping-pong n = 2, 200 batches of 2000 round trips: the main thread slept
 * 260-505 times, now 9-16 (start-up included); the median of 12
 * alternating runs' means 0.244 -> 0.211 us one-way (worst run 0.75 ->
 * 0.52). */
#define NX_RECV_SPIN_NS 1000000ull
/* How long such a receive polls, given the engine's spin (nx_ep_spin_ns):
 * NX_RECV_SPIN_NS unless ranks share CPUs here or NEXAR_SPIN_US says. */
static inline uint64_t nx_ep_recv_span_ns(const nx_ep *ep, uint64_t spin, int yield) {
  return yield || ep->spin_override >= 0 ? spin : NX_MAX(spin, NX_RECV_SPIN_NS);
}
/* A waiter for n bytes (eager receive, segment collective) polls n / this
 * many ns longer: the bytes' copies take that long (two copies at a few
 * GB/s each, the rate measured between two processes here). */
#define NX_SPIN_BYTES_PER_NS 4u
static inline uint64_t nx_spin_for_bytes(uint64_t n) {
  return n / NX_SPIN_BYTES_PER_NS;
}
#define NX_SPIN_SEND_MAX (4u << 20) /* a waiting send counts this many at most */
/* Spinning waiters with shared-memory rings: ring-only passes per full one.
 * (256 when every peer is on this host was tried: in alternating nexar-perf
 * runs at n = 2 no gain at 8 B, and a same-host rendezvous' answer came by
 * the lane then, so 1 MiB ping-pong took 120 us instead of 114, medians of
 * 8; it comes by the ring now, when the ring has room.) */
#define NX_LIGHT_PASSES 32
/* More ranks than CPUs: poll this long, yielding the CPU between looks. */
#define NX_YIELD_NS 300000ull
/* ... but a wait for a message (p2p.c recv_now, request.c) only once it
 * has spun this long: a peer that runs on another CPU answers within it,
 * and a yield is a system call (1.2 us in this VM) that delays seeing the
 * answer. nexar-perf sendrecv 8 B --procs, alternating: n=4 1.6-1.9 ->
 * 0.76-0.79 us, n=8 2.2-2.6 -> 0.87-1.6 (yielding at once -> after 3 us).
 * 3 -> 20 us: the message a ping-pong waits for is a whole round trip
 * away, often past 3 us (harness ping-pong 1 KiB, alternating runs: n = 4
 * 1.26-1.63 -> 0.80-0.90 us one-way, n = 8 2.2-2.4 -> 1.3-1.8; 8 B at n =
 * 8 1.7-2.2 -> 0.6-1.2; two ranks on one CPU, where every wait must
 * yield, 30-32 us either way). (Segment collectives keep yielding at
 * once: every rank waits there, and spinning first cost n=8 all_reduce 8
 * B 42 -> 55 us.) */
#define NX_YIELD_AFTER_NS 20000ull
/* Between two looks of a wait that began `waited` ns ago. */
static inline void nx_wait_pause(int yield, uint64_t waited) {
  if (yield && waited >= NX_YIELD_AFTER_NS)
    sched_yield();
  else
    nx_cpu_relax();
}
uint64_t nx_ep_spin_ns(nx_ep *ep, int *yield);
/* One progress step (receive, timers, writes) under ep->mu; next deadline. */
uint64_t nx_ep_progress_locked(nx_ep *ep);
/* The same without receiving (do_recv = 0): the send path only writes. */
uint64_t nx_ep_progress2_locked(nx_ep *ep, int do_recv);
/* A spinning waiter's serving pass: one progress step unless another
 * thread holds ep->mu (then UINT64_MAX: that thread is making one). */
static inline uint64_t nx_ep_try_progress(nx_ep *ep) {
  if (pthread_mutex_trylock(&ep->mu)) return UINT64_MAX;
  uint64_t next = nx_ep_progress_locked(ep);
  pthread_mutex_unlock(&ep->mu);
  return next;
}
/* Queues a message to a peer (or delivers it locally); under ep->mu. On
 * success the txmsg belongs to the engine. */
int nx_ep_send_locked(nx_ep *ep, uint32_t dest, const nx_frame *f, const nexar_iovec *iov,
                      size_t niov, nexar_request *req, nx_txmsg **out);
/* Queues a message to neighbour p with payload buf (len bytes), which the
 * engine owns from here (freed on failure too); relay_len: bytes to count as
 * held for other ranks (ep->relay_buf) until the message is acknowledged. */
int nx_ep_send_owned_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, void *buf, size_t len,
                            uint64_t relay_len);
/* Queues a message whose header carries `length` (not the payload size):
 * rendezvous descriptors. Always copied. */
int nx_ep_send_raw_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                          size_t niov, uint64_t length, nx_txmsg **out);
/* Marks a peer dead (under ep->mu) and fails everything waiting on it with
 * code (PEER_LOST, or PROTOCOL when it sent malformed bytes). */
void nx_peer_dead_locked(nx_ep *ep, nx_peer *p, int code, const char *why);
/* A peer closed gracefully (it delivered all it sent): receives from it fail,
 * but it is not counted as failed. */
void nx_peer_departed_locked(nx_ep *ep, nx_peer *p);
/* Cancels a zero-copy send that timed out (under ep->mu). */
void nx_tx_cancel_locked(nx_ep *ep, nx_txmsg *m, int rc);

/* ---- rndv.c: same-host rendezvous */
#define NX_RNDV_MAX_IOV 64
#define NX_RNDV_INLINE_MAX (1u << 20) /* same-host copies up to this run in place */
#define NX_PATH_HELLO_LEN 72          /* SHM_HELLO: cookie proof + bulk port and secret */
/* Sends the descriptor of a large message to a same-host peer (under
 * ep->mu); req completes when the peer has read it. 1 if it took the send,
 * 0 if the rendezvous path does not apply, <0 on error. */
int nx_rndv_send_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                        size_t niov, uint64_t len, nexar_request *req);
/* Receiver: reads a matched rendezvous message into r and tells the sender. */
int nx_rndv_read_locked(nx_ep *ep, nx_msg *m, nx_recv *r);
/* Control frames of the rendezvous protocol (complete messages). */
void nx_rndv_on_frame_locked(nx_ep *ep, nx_msg *m);
/* A timed-out send asks its reader to drop the descriptor (it still waits). */
void nx_rndv_cancel_locked(nx_ep *ep, nexar_request *req);
/* A descriptor dropped unread (late frame, failed collective, cancelled
 * receive, closed communicator): tells its sender, whose request waits. */
void nx_rndv_decline_locked(nx_ep *ep, nx_msg *m);
/* 1 (and m is freed) if m's sender already cancelled it. */
int nx_rndv_drop_cancelled_locked(nx_ep *ep, nx_msg *m);
/* Fails rendezvous sends to a dead peer and drops its queued descriptors. */
void nx_rndv_peer_dead_locked(nx_ep *ep, nx_peer *p, int code, const char *why);
/* 1 while a rendezvous send to a live peer waits for its reader. */
int nx_rndv_pending_locked(nx_ep *ep);
/* Connection up: offer our cookie so a same-host peer can prove it reads us. */
void nx_rndv_hello_locked(nx_ep *ep, nx_peer *p);
/* A receive given up (timeout, cancel) that a stream fills: unlinked, its
 * sender told to stop, its late pieces dropped. 1 if r was one. */
int nx_rndv_stream_cancel_locked(nx_ep *ep, nx_recv *r);
/* 1 if something we write to a ring waits for room (a sleep is capped). */
int nx_shm_room_wanted(nx_ep *ep);
/* Streams (rndv.c): pushes the pieces of streaming sends while their rings
 * have room (every progress pass that has some). */
void nx_rndv_push_locked(nx_ep *ep);
/* A piece (NX_KIND_RNDV_DATA) from p's ring, validated against the receive
 * that asked for it: 0, or PROTOCOL (the caller drops p). */
int nx_rndv_on_piece_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *v,
                            size_t nv);

/* ---- lane.c: same-host datagram lane for small collective frames */
#define NX_LANE_MAX NX_RNDV_COLL_MIN /* larger same-host frames go by rendezvous */
#define NX_LANE_MAX_IOV 16
int nx_lane_open(nx_ep *ep); /* never fails: without a lane QUIC carries all */
void nx_lane_close(nx_ep *ep);
/* A same-host peer's hello (with its cookie, which names its lane): ping it. */
void nx_lane_hello_locked(nx_ep *ep, nx_peer *p, const uint8_t cookie[16]);
/* 1 if the lane took the frame (the data is copied), 0 to use QUIC. */
int nx_lane_send_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                        size_t niov, uint64_t len);
/* One lane datagram that the kernel says process pid sent: validated
 * (header, source rank proven to be that process, length, kind) and handed
 * to matching. 0, or -1 if it was dropped. (Separate for fuzzing.) */
int nx_lane_deliver_locked(nx_ep *ep, const uint8_t *d, size_t n, pid_t pid);
/* Drains the lane socket into matching. */
void nx_lane_recv_locked(nx_ep *ep);
/* For tests: pages of the lane's receive buffers not in memory (mincore),
 * or -1 without a lane or if it cannot tell. */
long nx_lane_rx_absent_locked(const nx_ep *ep);
/* Lane control datagrams (f: kind NX_KIND_LANE, status one of these, no
 * payload), fd passed with SCM_RIGHTS if >= 0. 0, or -1 (errno). */
enum {
  NX_LANE_PING = 0,
  NX_LANE_PONG = 1,
  NX_LANE_SEG = 2,
  NX_LANE_SEG_OK = 3,
  NX_LANE_BELL = 4,
  NX_LANE_CSEG = 5 /* a communicator's collective segment (cseg.c): comm_id, tag = attempt */
};
int nx_lane_send_ctl_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, int fd);
/* As nx_lane_send_ctl_locked for a datagram that must arrive (hand-shakes,
 * segment offers): one the peer's full queue could not take is kept (with a
 * duplicate of fd) and retried by the progress passes while p is not dead.
 * 0 sent or kept; -1 (errno) if it can never go (no such socket: another
 * network namespace). fd stays the caller's. */
int nx_lane_send_ctl_owed_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, int fd);
/* nx_lane_deliver_locked with the fd that came with the datagram: *fd is
 * taken (set to -1) when a segment offer uses it; the caller closes it
 * otherwise. */
int nx_lane_deliver_fd_locked(nx_ep *ep, const uint8_t *d, size_t n, pid_t pid, int *fd);

/* ---- shm.c: same-host shared-memory rings (design in shm.c) */
/* Maps a segment fd (size bytes, shared); once per process, so ranks that
 * are threads of one process see one address (reference counted).
 * populate: with its page tables filled now (MAP_POPULATE), so no access
 * takes a page fault later. */
void *nx_shm_map(int fd, size_t size, int populate);
void nx_shm_unmap(void *base);
#define NX_SHM_RING (2u << 20) /* data bytes per direction */
/* Point-to-point to a same-host peer up to this size goes by the ring (two
 * copies); above, by the single-copy rendezvous. process_vm_readv pins every
 * page it reads (1 MiB alone took 50 us here, memcpy 23), but once a waiting
 * sender polls through its reader's copy (request.c, spin_for) ping-pong
 * measured (nexar-perf sendrecv --procs, n = 2, alternating runs, medians)
 * 1 MiB 128 -> 104 us, 512 KiB 58 -> 49 by the rendezvous; 192-256 KiB the
 * same both ways. Later, with the ring faster, 1 MiB by the ring measured
 * 512 KiB 46-49 -> 34-35 us, 768 KiB 106-114 -> 62-70, 1 MiB mixed (58-64
 * against 70-74 in one hour, 134-159 against 106-151 in another); not
 * taken: two such messages do not fit the ring, the second waits in the
 * sender's backlog, which only the sender's own passes flush (no word from
 * the consumer), and a receiver's ring drain takes unexpected messages
 * without holding back at the unexpected budget, so larger eager messages
 * would need both first. */
#define NX_SHM_EAGER_MAX (256u << 10)
/* Larger point-to-point messages to a peer with rings stream through them
 * once the receive matched (rndv.c): the sender writes pieces of this many
 * bytes while the receiver copies out the ones before, so the two copies
 * overlap and the pieces stay in cache, instead of one process_vm_readv,
 * which pins every page and reads the other core's dirty lines. Measured
 * (a two-process ping-pong through 64 KiB pieces against process_vm_readv,
 * both spinning, one-way): 256 KiB 6.2 against 15.2 us, 1 MiB 24 against
 * 57, 4 MiB 102 against 289. */
#define NX_SHM_PIECE (64u << 10)
/* A stream writes a piece only while the ring holds at most this much
 * unread, so the peer's other messages keep room. */
#define NX_SHM_STREAM_WINDOW (NX_SHM_RING / 2)
/* Up to this many ranks in the world, point-to-point segments are backed
 * and mapped whole when they are set up (shm.c): 4 MiB per pair of ranks,
 * 112 MiB on a host of 8. */
#define NX_SHM_POPULATE_RANKS 8u
/* The lane to p is up: the lower rank offers a segment. */
void nx_shm_lane_up_locked(nx_ep *ep, nx_peer *p);
/* A segment offer from p with its fd (taken: closed here). */
void nx_shm_on_seg_locked(nx_ep *ep, nx_peer *p, int fd);
void nx_shm_on_seg_ok_locked(nx_ep *ep, nx_peer *p);
/* A message by the ring: 1 if taken (req completed, or owned by the
 * rendezvous it became), 0 to use the other paths, <0 on error. */
int nx_shm_send_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                       size_t niov, uint64_t len, nexar_request *req);
/* A point-to-point message (f with src and length set) the ring takes now,
 * copied, so a blocking send needs no request: 1 sent, 0 not now (no ring,
 * ordered behind a backlog, no room, above NX_EAGER_MAX: the caller takes
 * the general path), <0 the peer was dropped. */
int nx_shm_send_now_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                           size_t niov, uint64_t len);
/* A rendezvous descriptor (f encoded with src, length, RNDV): 1 if the ring
 * took it, 0 to use the other paths, <0 on error. Point-to-point ones take
 * it whenever the peer's point-to-point order is the ring's. */
int nx_shm_send_desc_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *v);
/* One record from p's ring: header and payload validated like network bytes,
 * handed to matching. 0, or PROTOCOL (the caller drops p). (Separate for
 * fuzzing.) */
int nx_shm_deliver_locked(nx_ep *ep, nx_peer *p, const uint8_t hdr[NX_FRAME_HDR_LEN], uint32_t hlen,
                          const nexar_iovec *v, size_t nv, uint64_t plen);
/* A blocking receive's look at p's ring, with no request (p2p.c): when the
 * next record is the eager point-to-point message k names (comm, tag) with
 * len bytes, it is copied into iov and consumed: 1. 0 if the ring has
 * nothing; 2 if the next record was another key's, 3 if it was k's but not
 * one to take here (a rendezvous, another length): validated and handed to
 * matching, as a drain does; <0 it was malformed and p is dropped. */
int nx_shm_recv_now_locked(nx_ep *ep, nx_peer *p, const nx_key *k, const nexar_iovec *iov,
                           size_t niov, uint64_t len);
struct nx_ring_watch;
/* 1 if p has a ring to us: *w says where its next record will start and
 * how many of its bytes to prefetch (*pull; only hints: they may be stale
 * once the lock is let go), and its control block, which a waiter may read
 * without the lock (nx_ring_ready) while the endpoint lives; 0 if none. */
int nx_shm_rx_watch_locked(const nx_peer *p, struct nx_ring_watch *w, uint32_t *pull);
/* Every progress pass: drains the inbound rings (but skip's, if not NULL),
 * flushes the backlogs. */
void nx_shm_poll_locked(nx_ep *ep, const nx_peer *skip);
/* A doorbell datagram from p was read: p's next record rings again, and
 * what p published is taken now. */
void nx_shm_bell_heard_locked(nx_ep *ep, nx_peer *p);
/* p died or left: what it published is taken, then its segment is unused. */
void nx_shm_peer_down_locked(nx_ep *ep, nx_peer *p);
/* 1 if p has rings up that a stream may use. */
int nx_shm_streamable_locked(const nx_peer *p);
/* A stream piece (f: RNDV_DATA) into the ring to p when it fits within
 * NX_SHM_STREAM_WINDOW: 1 put, 0 no room now (the reader rings us when it
 * frees some), <0 p was dropped. */
int nx_shm_put_piece_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                            size_t niov, uint64_t len);
/* 1 while something we wrote to a live peer is not consumed yet. */
int nx_shm_pending_locked(nx_ep *ep);
/* Around a sleep (without ep->mu): counts the thread as a waiter on every
 * inbound ring (so writers ring the doorbell); *ready = 1 if a ring already
 * has data (then do not sleep). The token goes to nx_shm_sleep_end. */
void *nx_shm_sleep_begin(nx_ep *ep, int *ready);
void nx_shm_sleep_end(void *token);
void nx_shm_free(nx_ep *ep); /* after the progress thread stopped */
/* 0 no segment with p, 1 mapped, 2 up, 3 point-to-point goes by it. */
int nx_shm_state_locked(const nx_peer *p);
/* Test seam (integration.shm): writes a forged record into our ring to p,
 * as a third process with the segment could: how 0 a corrupt prefix, 1 a
 * frame whose length lies. */
int nx_shm_test_forge(nx_ep *ep, nx_peer *p, int how);

/* ---- relay.c: sparse topologies. Messages to a rank that is not a
 * neighbour go in segments of at most NX_RELAY_SEG bytes along the route
 * (proto/route.h), each signed by its origin; every relay forwards a segment
 * once it has it whole (cut-through at segment granularity), and the origin
 * keeps at most NX_RELAY_WINDOW segments per message unacknowledged by the
 * destination, so a relay holds at most flows x window x segment bytes. */
#define NX_RELAY_SEG (128u * 1024u)
#define NX_RELAY_WINDOW 8u
#define NX_RELAY_CERT_MAX 4096u
#define NX_RELAY_BODY_MAX (NX_RELAY_HDR_LEN + NX_RELAY_CERT_MAX + NX_RELAY_SEG + NX_SIG_MAX)
/* Set up at start: routes over the topology, non-neighbours marked relayed
 * (UP without a connection), the signer from creds. INVALID_ARGUMENT for a
 * topology the world cannot have, NOMEM, TLS. */
int nx_relay_start(nx_ep *ep, gnutls_certificate_credentials_t creds);
/* Queues a message to a non-neighbour (fr encoded with src and length);
 * copies it unless req is given and it is large, then req completes once
 * every segment has been handed to the first hop. PEER_LOST if no route. */
int nx_relay_send_locked(nx_ep *ep, uint32_t dest, const nx_frame *fr, const nexar_iovec *iov,
                         size_t niov, uint64_t len, nexar_request *req);
/* An ordered NX_KIND_RELAY message from neighbour m->peer (matching's hook). */
void nx_relay_arrived_locked(nx_ep *ep, nx_msg *m);
/* One relay payload from neighbour `from`, already complete: forwarded,
 * delivered or dropped (counted). 0, or PROTOCOL when it is malformed (the
 * caller drops the neighbour). (Separate for fuzzing.) */
int nx_relay_deliver_locked(nx_ep *ep, nx_peer *from, const uint8_t *body, size_t len);
/* A zero-copy relayed send given up (timeout, close): its flow stops, the
 * destination is told (RESET), req completes with rc and why. */
void nx_relay_cancel_locked(nx_ep *ep, nexar_request *req, int rc, const char *why);
/* NX_KIND_PEER_GONE from a neighbour. */
void nx_relay_on_gone_locked(nx_ep *ep, nx_peer *from, const nx_frame *f);
/* Closing (the endpoint's drain): 1 while this rank must stay to forward.
 * It stays until what it originated is acknowledged by its destinations,
 * then tells every rank it is closing (NX_KIND_PEER_GONE status 3, flooded),
 * and stays until every live, reachable rank has said so too: until then one
 * of them may still send through it. 0 at once in a full mesh. */
int nx_relay_linger_locked(nx_ep *ep);
/* Peer p died or left: routes around it, fails what went through it, tells
 * the neighbours (sparse topologies only). */
void nx_relay_peer_lost_locked(nx_ep *ep, nx_peer *p);
void nx_relay_free(nx_ep *ep);
/* Test seam (integration.sparse_local): the DATA segments (malloc'd, at most
 * cap) of a message from ep's rank to dest carrying frame fr (src, length
 * set) and payload, as a flow would send them. Returns how many, or <0. */
int nx_relay_test_message(nx_ep *ep, uint32_t dest, uint64_t seq, const nx_frame *fr,
                          const void *payload, size_t len, uint8_t **segs, size_t *lens,
                          size_t cap);

/* ---- msg.c: stream <-> message plumbing, called through the QUIC link's
 * callbacks (quic_glue.c) */
void nx_rx_stream_open(nx_ep *ep, nx_peer *p, int64_t sid, nx_rxstream **out);
/* credit_now: stream credit to return now; conn_held: bytes of data whose
 * connection credit is withheld (unexpected data over the budget). */
int nx_rx_stream_data(nx_ep *ep, nx_rxstream *rs, const uint8_t *data, size_t len, int fin,
                      uint64_t *credit_now, uint64_t *conn_held);
/* Frees rs; NEXAR_ERR_NOMEM if the stream order could not record it (the
 * connection must then close: later streams could never be delivered). */
int nx_rx_stream_close(nx_ep *ep, nx_rxstream *rs);
/* Takes rs off the credit list (before it is freed). */
void nx_rx_stream_uncredit(nx_ep *ep, nx_rxstream *rs);
void nx_tx_acked(nx_ep *ep, nx_txmsg *m, uint64_t offset, uint64_t len);
void nx_tx_free(nx_txmsg *m);
/* Returns held credit that application threads released (progress thread). */
void nx_ep_credit_flush(nx_ep *ep);
/* sid < 0: connection-level credit only. */
void nx_qconn_extend_hook(nx_peer *p, int64_t sid, uint64_t n, uint64_t boost);
void nx_msg_release_credit(nx_ep *ep, nx_msg *m);
void nx_msg_finish_if_complete(nx_ep *ep, nx_msg *m);
/* Delivers a complete local message (self-send) into matching. */
int nx_local_deliver(nx_ep *ep, const nx_frame *f, const nexar_iovec *iov, size_t niov);
/* Hands a whole message from peer p (its payload gathered from iov) to matching. */
int nx_deliver_complete(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                        size_t niov);

/* ---- match.c */
/* Posts r (under ep->mu): matches the earliest unexpected message or queues r. */
int nx_match_post(nx_ep *ep, nx_recv *r);
/* 1 if a posted receive waits for point-to-point key k (comm, src, tag). */
int nx_match_posted(const nx_ep *ep, const nx_key *k);
/* Finds the earliest queued message for key; NULL if none. */
nx_msg *nx_match_peek(nx_ep *ep, const nx_key *k, int any_src);
/* A new message is ordered: match it to a posted receive or queue it. */
void nx_match_arrived(nx_ep *ep, nx_msg *m);
/* A whole point-to-point message (payload in iov) straight into the posted
 * receive it matches, with no message kept: 1 done, 0 not taken (no such
 * receive, another length, not plain point-to-point, or a revoked
 * communicator here): the caller queues it as nx_match_arrived would. */
int nx_match_direct(nx_ep *ep, const nx_frame *f, const nexar_iovec *iov, size_t niov);
/* Copies payload bytes into the matched receive; completes it when full. */
void nx_match_data(nx_ep *ep, nx_msg *m, const uint8_t *data, size_t len);
void nx_recv_finish(nx_ep *ep, nx_recv *r, int rc, const char *why);
/* Removes a posted receive that has not matched (timeout/abort). */
int nx_match_cancel(nx_ep *ep, nx_recv *r);
/* Fails every posted receive for which pick gives a nonzero code: it is
 * unlinked and finished with that code and why. Returns how many. */
typedef int (*nx_recv_pick_fn)(const nx_recv *r, void *arg);
size_t nx_match_fail_posted(nx_ep *ep, nx_recv_pick_fn pick, void *arg, const char *why);
void nx_msg_free(nx_ep *ep, nx_msg *m);
/* Unexpected bytes of m leave the accounting (a receive took them). */
void nx_unexp_release(nx_ep *ep, const nx_msg *m, uint64_t n);
void nx_match_unqueue(nx_ep *ep, nx_msg *m);
/* Unlinks queued message m whose predecessor in the queue is prev (NULL: the head). */
void nx_match_unlink(nx_ep *ep, nx_msg *prev, nx_msg *m);
void nx_iov_copy_in(const nexar_iovec *iov, size_t niov, uint64_t off, const uint8_t *data,
                    size_t len);
/* The same for the pieces src[0..nsrc) one after the other (a frame's
 * payload, a ring record that wraps). */
void nx_iovs_copy_in(const nexar_iovec *iov, size_t niov, uint64_t off, const nexar_iovec *src,
                     size_t nsrc);

#endif
