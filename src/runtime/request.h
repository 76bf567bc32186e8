/* Requests: the completion object behind every operation, blocking or not. */
#ifndef NX_RUNTIME_REQUEST_H
#define NX_RUNTIME_REQUEST_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/common.h"
#include "runtime/engine.h"

enum nx_req_kind { NX_REQ_GENERIC = 0, NX_REQ_RECV, NX_REQ_SEND };

struct nexar_request {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  atomic_int done;
  int rc;
  char *errtext;
  int kind;
  nx_ep *ep;              /* set for RECV/SEND: cancellation on timeout */
  nx_recv recv;           /* RECV */
  nx_txmsg *tx;           /* SEND (zero-copy, until acked) */
  nx_rndv *rndv;          /* SEND by same-host rendezvous, until read */
  struct nx_rflow *rflow; /* SEND relayed zero-copy (relay.c), until the destination has it */
  nexar_iovec *iov_copy;
  uint32_t timeout_ms; /* no progress for this long fails the op (0 = none) */
  uint32_t peer;       /* for messages */
  uint64_t send_len;   /* SEND of a message: its length (how long a wait polls) */
  uint64_t spun_ns;    /* polled already by a fast path (p2p.c): the wait polls less */
  char what[240];      /* the description, formatted when first needed */
  /* what the operation is, kept as fields so the hot path formats nothing:
   * "<op> #<seq> on comm <comm>: <verb> rank <peer>" (collectives, op set)
   * or "<verb> rank <peer> tag <tag> on comm <comm>" */
  const char *w_op, *w_verb;
  uint64_t w_seq, w_comm, w_tag;
  atomic_uint_fast64_t progress_ns; /* last time bytes moved */
  void (*on_free)(nexar_request *r);
  /* called once when it completes, inside r->mu (so nx_req_free waits for
   * it): must only queue work (a schedule's nx_ep_defer) */
  void (*on_done)(void *arg);
  void *on_done_arg;
  atomic_int waiting; /* a thread sleeps in wait_driving */
  pthread_t waiter;
  /* device p2p (p2p.c): the message staged whole in host memory (dev_host,
   * freed with the request); a receive is copied to the device iov
   * (dev_iov) once, by the first nx_req_wait / nexar_test that sees it
   * done, in segments of dev_seg bytes; a failed copy makes it IO */
  const nexar_device_adapter *dev_ad;
  void *dev_host;
  nexar_iovec *dev_iov;
  size_t dev_niov, dev_seg;
  atomic_int dev_in;
  uint32_t magic; /* NX_REQ_LIVE until freed, then NX_REQ_FREED (last: free() keeps it) */
};
#define NX_REQ_LIVE 0x6e785271u  /* "nxRq" */
#define NX_REQ_FREED 0xdeadf4eeu /* poisoned by nx_req_free */
/* A second wait/test/free of a freed request is undefined by contract; while
 * its memory is not reused, this catches it: abort() with "<who>: request
 * already completed and freed (double wait)". Best effort, nothing more. */
void nx_req_check(const nexar_request *req, const char *who);

/* Fills r->what from the w_* fields unless it is set already; returns it. */
const char *nx_req_what(nexar_request *r);
/* Allocates a pending request (owned by the application until waited). */
nexar_request *nx_req_new(void);
/* The same in memory the caller owns (a blocking call's frame), and its end:
 * after the wait, once no thread can still be inside its completion. */
void nx_req_init(nexar_request *r);
void nx_req_fini(nexar_request *r);
/* Finishes req with rc; errtext (may be NULL) becomes nexar_last_error() of
 * the waiting thread. Safe from any thread; only the first call counts. */
void nx_req_complete(nexar_request *req, int rc, const char *errtext);
/* Waits (spinning briefly, then sleeping), applying req->timeout_ms as a
 * no-progress limit, and returns the result; does not free. */
int nx_req_wait(nexar_request *req);
void nx_req_free(nexar_request *req);
/* Applies req->timeout_ms at time now without waiting: expires req when it
 * made no progress for that long (it then completes with TIMEOUT, or soon
 * after when a buffer must be released first); else lowers *wake to its
 * deadline. Returns 1 if req is done. */
int nx_req_check_deadline(nexar_request *req, uint64_t now, uint64_t *wake);
/* Gives up on a pending request under ep->mu (timeout, failed collective)
 * without releasing a buffer someone may still touch: a same-host send waits
 * for its reader's answer, a zero-copy send for ngtcp2 to drop it, a receive
 * being copied into for the copy to end; everything else completes now with
 * rc. Returns 1 if it completed now. */
int nx_req_abandon_locked(nx_ep *ep, nexar_request *r, int rc, const char *why);

#endif
