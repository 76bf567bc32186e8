/* A communicator (nexar_client): a view of the endpoint's peers with its own
 * id, rank numbering, collective sequence and RPC handlers. Children from
 * split share the endpoint by reference. */
#ifndef NX_RUNTIME_COMM_H
#define NX_RUNTIME_COMM_H

#include "runtime/engine.h"
#include "runtime/oplog.h"

typedef struct nx_rpc_handler {
  uint16_t fn_id;
  nexar_rpc_fn fn;
  void *ctx;
} nx_rpc_handler;

typedef struct nx_active_coll nx_active_coll;
typedef struct nx_agr nx_agr;

/* Largest agreement message (proto/agree.h) a peer may send: a PROMISE with
 * two bit sets of NX_AGREE_MAX_N members, rounded up. */
#define NX_AGR_MAX_BYTES 1280u

struct nexar_client {
  nx_comm *next; /* in ep->comms */
  nx_ep *ep;
  uint64_t id;
  uint64_t epoch;     /* of the view: 0 at formation, +1 per successor; split children inherit */
  uint64_t parent_id; /* the communicator it was split or derived from (revoke reaches children) */
  uint32_t rank, size;
  uint32_t *members; /* comm rank -> root rank (= member id: unique for the cluster's life) */
  uint32_t *of_root; /* root rank -> comm rank, UINT32_MAX if not a member */
  uint32_t nroot;    /* of_root's length: the largest member id + 1 */
  nexar_config cfg;
  atomic_int aborted;
  char abort_why[160];
  atomic_int revoked; /* only queries, recover, agree and del work (nexar_revoke) */
  char revoke_why[160];
  uint32_t revoke_lost; /* the rank a revoke notice named lost (UINT32_MAX: none) */
  /* agreements (agreement.c), under ep->mu: instance 0 decides the successor
   * view (nexar_recover), instance k >= 1 the k-th nexar_agree */
  nx_agr *agrs;
  uint64_t agree_seq;
  int recovered; /* nexar_recover made the successor */
  /* elastic membership (cluster/membership.c) */
  atomic_int leave;         /* nexar_elastic_leave: go at the next checkpoint */
  uint64_t checkpoints;     /* nexar_elastic_checkpoint calls so far */
  nexar_elastic_info einfo; /* what the resize that made it changed */
  /* collectives */
  _Atomic uint64_t next_seq; /* moved by the one thread issuing c's collectives */
  nx_active_coll *colls;     /* in flight, under ep->mu */
  /* A blocking segment collective may begin without ep->mu (coll_port.c,
   * nx_coll_begin_seg) while coll_events still reads what the last begin
   * under the lock saw, and that begin found nothing in flight, failed or
   * queued. Whatever would change what a begin finds (a notice, a frame,
   * a loss, a revoke, an abort) bumps coll_events under ep->mu; such a
   * collective registers itself under the lock once it sees the count move. */
  _Atomic uint64_t coll_events;
  _Atomic uint64_t fast_seq1; /* its sequence + 1 while it runs, else 0 */
  uint64_t fast_seen;         /* coll_events at the last begin under the lock */
  int fast_ready;             /* (both, and fast_k, the issuing thread's alone) */
  struct nx_coll *fast_k;     /* its record while it is not registered */
  struct nx_coll *coll_spare; /* the last that ended (under ep->mu): the next begin's */
  void *scratch_keep;         /* a large scratch buffer kept for the next collective */
  size_t scratch_keep_cap;    /* (both under ep->mu; nx_comm_scratch_take) */
  /* nx_coll_mark_seg_nowait: seq + 1 by seq % NX_SEG_NOWAIT, as deep as a
   * small broadcast's root runs ahead (NX_CSEG_BDEPTH, cseg.h) */
#define NX_SEG_NOWAIT 128u
  _Atomic uint64_t seg_nowait[NX_SEG_NOWAIT];
  uint64_t *failed_seqs; /* peers reported these as failed before we began them */
  int32_t *failed_codes;
  uint64_t last_fail_seq; /* the latest collective that failed here, and why */
  int last_fail_rc;
  size_t nfailed, capfailed;
  /* RPC */
  nx_rpc_handler *handlers;
  size_t nhandlers, caphandlers;
  int rpc_busy; /* handlers running now (under ep->mu) */
  pthread_cond_t rpc_idle;
  uint64_t next_rpc_id;
  /* failures */
  nexar_failure_fn on_failure;
  void *on_failure_ctx;
  uint32_t *dead; /* sorted comm ranks */
  size_t ndead;
  /* run when it is deleted: in torchrun mode rank 0 stops the seed it hosts
   * (set by the cluster layer, which the runtime does not know) */
  void (*on_del)(void *arg);
  void *on_del_arg;
  nx_oplog log; /* recent operations, under ep->mu */
  /* shared-memory collective segment (cseg.h, collective/segcoll.c): set up
   * by agreement at fixed points of the collective order, used only by the
   * thread issuing collectives; the offer is set by the lane under ep->mu */
  struct nx_cseg *cseg;
  struct nx_cseg *cseg_offer;
  uint64_t cseg_calls; /* blocking collectives that could take a segment */
  int cseg_never;      /* not every member can be on this host: no attempts */
};

/* The comm rank of member id (root rank) root on c; UINT32_MAX if it is not
 * a member (ids from the network may be anything). */
static inline uint32_t nx_comm_rank_of(const nx_comm *c, uint32_t root) {
  return root < c->nroot ? c->of_root[root] : UINT32_MAX;
}

/* Ends log entry id; on a timeout writes the log to stderr when
 * NEXAR_DUMP_ON_TIMEOUT is set. Takes ep->mu. */
void nx_comm_log_end(nx_comm *c, uint64_t id, int rc, const char *detail);
void nx_comm_log_end_locked(nx_comm *c, uint64_t id, int rc, const char *detail);

/* Creates a communicator over ep (takes a reference on ep) for view epoch
 * `epoch`, derived from comm parent_id (0: none). */
int nx_comm_new(nx_ep *ep, uint64_t id, const uint32_t *members, uint32_t n, uint32_t my_root,
                const nexar_config *cfg, uint64_t epoch, uint64_t parent_id, nx_comm **out);
nx_comm *nx_comm_find(nx_ep *ep, uint64_t id); /* under ep->mu */
/* Checks that c is usable: not NULL, not aborted. Sets the error text. */
int nx_comm_check(nx_comm *c, const char *op);
/* A peer (root rank) died: called under ep->mu for every comm of ep. */
void nx_comm_peer_dead_locked(nx_comm *c, uint32_t root_rank, const char *why);
/* 1 if comm rank r of c is known dead (under ep->mu). */
int nx_comm_is_dead_locked(const nx_comm *c, uint32_t r);
/* A peer told us it aborted comm id. */
void nx_comm_remote_abort_locked(nx_ep *ep, uint64_t id, uint32_t root_rank);
/* Fails everything pending on c with rc (under ep->mu). */
void nx_comm_fail_pending_locked(nx_comm *c, int rc, const char *why);
/* Revokes c (under ep->mu; idempotent): pending operations fail (PEER_LOST
 * where a dead rank is involved, else ABORTED), later ones are refused, its
 * queued messages are dropped, its split children are revoked, and with
 * flood every live member is told (each forwards the notice once, so it
 * spreads even if this rank dies right after). */
void nx_comm_revoke_locked(nx_comm *c, int flood, const char *why);
/* Collective seq of c ended here with an error: the frames of it that were
 * queued before it failed are dropped (their descriptors' senders answered),
 * as later ones are on arrival. */
void nx_comm_drop_coll_locked(nx_comm *c, uint64_t seq);
/* Comm rank r of c is dead, or was named lost by a revoke notice. */
int nx_comm_lost_rank_locked(const nx_comm *c, uint32_t r);
/* An operation on c failed because a member is lost: revokes c (ULFM). */
void nx_comm_lost_locked(nx_comm *c, const char *why);
/* A REVOKE notice for comm id from root rank src. */
void nx_comm_on_revoke_locked(nx_ep *ep, const nx_frame *f);
/* nx_comm_check for an operation with one peer (p2p, rpc): on a revoked c,
 * PEER_LOST if that peer is dead on c, else ABORTED. */
int nx_comm_check_peer(nx_comm *c, const char *op, uint32_t peer);
/* The same with ep->mu held (peer UINT32_MAX: none), where an operation is
 * registered, so a revoke or abort since the early check is not missed. */
int nx_comm_check_peer_locked(nx_comm *c, const char *op, uint32_t peer);

/* ---- agreement.c: the fault-tolerant agreement (proto/agree.h) driven by
 * the engine, under ep->mu unless said otherwise */
/* The instance that commits or aborts a prospective view (elastic admission):
 * heartbeat-timeout rounds, given up after elastic_checkpoint_timeout_ms. */
#define NX_AGR_KEY_RESIZE (UINT64_MAX - 1)
/* An agreement message of instance f->tag of comm f->comm_id from root rank src. */
void nx_agr_on_frame_locked(nx_ep *ep, uint32_t src, const nx_frame *f, const uint8_t *buf,
                            size_t len);
/* Comm rank r of c is dead: the agreements of c suspect it. */
void nx_agr_suspect_locked(nx_comm *c, uint32_t r);
/* Test seam (unit.agree_nest_test): called after each agreement message this
 * process sends, under ep->mu; NULL outside that test. */
extern void (*nx_agr_test_sent)(nx_comm *c, uint32_t to);
/* Frees the agreements of c (it is being deleted). */
void nx_agr_free_all_locked(nx_comm *c);
/* Starts instance key of c with my flag (0 if already started). */
int nx_agr_start_locked(nx_comm *c, uint64_t key, uint32_t flag);
/* Runs instance key of c to its decision (starting it with flag if needed),
 * waiting without ep->mu. Returns 0 and the outcome (enum nx_agree_outcome),
 * the agreed flag and, in dead[c->size] (may be NULL), 1 for every member of
 * the decided dead set; or an error (NOMEM). why gets the decision's reason. */
int nx_agr_run(nx_comm *c, uint64_t key, uint32_t flag, int *outcome, uint32_t *agreed,
               uint8_t *dead, char *why, size_t whylen);
/* Sparse topologies: a waiting nx_agr_run of a communicator with members the
 * live graph cannot reach ends with ABORTED "partitioned" (relay.c calls it
 * whenever a rank is lost), instead of waiting out its rounds. */
void nx_agr_check_partition_locked(nx_ep *ep);
/* How many live members of c this rank cannot reach over the live graph of
 * a sparse topology (0 for a full mesh); why names them. relay.c. */
uint32_t nx_relay_partitioned_locked(nx_ep *ep, const nx_comm *c, char *why, size_t cap);
/* The periodic agreement timer of ep (all comms): runs what is due. */
void nx_agr_timer_fn(nx_work *w);

/* ---- coll_port.c hooks, called by the engine under ep->mu */
/* Checks a collective frame against the local state: 0 accept, 1 drop. */
int nx_coll_check_frame_locked(nx_ep *ep, const nx_frame *f);
void nx_coll_remote_fail_locked(nx_ep *ep, const nx_frame *f);
void nx_coll_fail_all_locked(nx_comm *c, int rc, const char *why);
/* Scratch of at least NX_SCRATCH_KEEP_MIN bytes is kept by the communicator
 * between collectives (the largest one given back), not freed: glibc maps
 * blocks above 32 MiB afresh on every malloc, and a collective that writes
 * one then takes a page fault per 4 KiB (reduce_scatter of 64 MiB at n = 4,
 * two 16 MiB blocks: 350-460 ms a call, mostly faults, against 8.5-9.5 ms
 * for 16 MiB). take: the kept buffer if it holds need bytes (*cap its
 * size), else NULL; give: keeps p (cap bytes) or frees it. */
#define NX_SCRATCH_KEEP_MIN (1u << 20)
void *nx_comm_scratch_take(nx_comm *c, size_t need, size_t *cap);
void nx_comm_scratch_give(nx_comm *c, void *p, size_t cap);
/* Unlinks and frees what nx_coll_end_quick left (under ep->mu). */
void nx_coll_retire_locked(nx_comm *c);
/* Whether c has a collective in flight (under ep->mu). */
int nx_coll_inflight_locked(const nx_comm *c);
/* Why this rank gave up collective seq of comm id (its failure code, e.g.
 * PEER_LOST when a third rank died), ABORTED when unknown: the answer a
 * sender of a declined rendezvous descriptor gets. */
int nx_coll_gave_up_code_locked(nx_ep *ep, uint64_t comm_id, uint64_t seq);

/* ---- rpc.c */
void nx_rpc_on_request_locked(nx_ep *ep, nx_msg *m); /* takes ownership of m */

#endif
