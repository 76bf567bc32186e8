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

struct nexar_client {
  nx_comm *next; /* in ep->comms */
  nx_ep *ep;
  uint64_t id;
  uint32_t rank, size;
  uint32_t *members; /* comm rank -> root rank */
  uint32_t *of_root; /* root rank -> comm rank, UINT32_MAX if not a member */
  nexar_config cfg;
  atomic_int aborted;
  char abort_why[160];
  /* collectives */
  uint64_t next_seq;
  nx_active_coll *colls; /* in flight, under ep->mu */
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
};

/* Ends log entry id; on a timeout writes the log to stderr when
 * NEXAR_DUMP_ON_TIMEOUT is set. Takes ep->mu. */
void nx_comm_log_end(nx_comm *c, uint64_t id, int rc, const char *detail);

/* Creates a communicator over ep (takes a reference on ep). */
int nx_comm_new(nx_ep *ep, uint64_t id, const uint32_t *members, uint32_t n, uint32_t my_root,
                const nexar_config *cfg, nx_comm **out);
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

/* ---- coll_port.c hooks, called by the engine under ep->mu */
/* Checks a collective frame against the local state: 0 accept, 1 drop. */
int nx_coll_check_frame_locked(nx_ep *ep, const nx_frame *f);
void nx_coll_remote_fail_locked(nx_ep *ep, const nx_frame *f);
void nx_coll_fail_all_locked(nx_comm *c, int rc, const char *why);
/* Why this rank gave up collective seq of comm id (its failure code, e.g.
 * PEER_LOST when a third rank died), ABORTED when unknown: the answer a
 * sender of a declined rendezvous descriptor gets. */
int nx_coll_gave_up_code_locked(nx_ep *ep, uint64_t comm_id, uint64_t seq);

/* ---- rpc.c */
void nx_rpc_on_request_locked(nx_ep *ep, nx_msg *m); /* takes ownership of m */

#endif
