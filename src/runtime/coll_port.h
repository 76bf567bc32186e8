/* What the collective algorithms need from the runtime: a collective
 * instance with its own sequence number and signature, and non-blocking
 * send/receive keyed by (sequence, round, segment) on the communicator.
 * Implemented in src/runtime/coll_port.c. */
#ifndef NX_RUNTIME_COLL_PORT_H
#define NX_RUNTIME_COLL_PORT_H

#include "core/common.h"

/* Collective operation ids, carried in every collective frame (coll_op). */
enum nx_coll_op {
  NX_COLL_ALL_REDUCE = 1,
  NX_COLL_BROADCAST,
  NX_COLL_ALL_GATHER,
  NX_COLL_REDUCE_SCATTER,
  NX_COLL_REDUCE,
  NX_COLL_ALL_TO_ALL,
  NX_COLL_GATHER,
  NX_COLL_SCATTER,
  NX_COLL_SCAN,
  NX_COLL_EXSCAN,
  NX_COLL_BARRIER,
  NX_COLL_ALL_REDUCE_BUCKETED,
  NX_COLL_ALL_REDUCE_RS_AG,
  NX_COLL_SPLIT,
  NX_COLL_ALL_GATHER_V,
  NX_COLL_REDUCE_SCATTER_V,
  NX_COLL_ALL_TO_ALL_V,
  NX_COLL_GATHER_V,
  NX_COLL_SCATTER_V,
};
#define NX_COLL_LAST NX_COLL_SCATTER_V

/* The variable-count collectives whose receivers learn a block's length from
 * its frame: there a message of another length than asked is the receiver's
 * NEXAR_ERR_SIZE_MISMATCH (elsewhere both sides compute every length, so a
 * differing one is a MISMATCH). */
static inline int nx_coll_keeps_size_mismatch(int op) {
  return op == NX_COLL_ALL_TO_ALL_V || op == NX_COLL_GATHER_V || op == NX_COLL_SCATTER_V;
}

/* The signature every rank must agree on; a difference is NEXAR_ERR_MISMATCH. */
typedef struct nx_coll_sig {
  uint8_t op;     /* nx_coll_op */
  uint8_t dtype;  /* nexar_dtype (0 when unused) */
  uint8_t redop;  /* nexar_op (0 when unused) */
  uint32_t root;  /* 0 when unused */
  uint64_t count; /* elements (total for bucketed; a hash of the shared
                     counts for all_gather_v and reduce_scatter_v, else 0 for
                     the variable-count collectives) */
} nx_coll_sig;

typedef struct nx_coll nx_coll;
typedef struct nx_creq nx_creq;

/* Starts a collective on c in call order: takes the next sequence number and
 * registers sig so that peers' frames are checked against it. Call on the
 * application thread that issued the collective (the order is the call order).
 * Fails ABORTED / PEER_LOST at once when c is aborted or has a dead member. */
int nx_coll_begin(nexar_client *c, const nx_coll_sig *sig, nx_coll **out);
/* nx_coll_begin for a blocking collective that runs through c's shared
 * segment on this thread: without ep->mu when nothing changed since the
 * last begin under it (see nexar_client's coll_events). Such a collective
 * registers itself under the lock as soon as anything may concern it: the
 * count moved (nx_coll_failed), or it fails, sends, receives or ends badly. */
int nx_coll_begin_seg(nexar_client *c, const nx_coll_sig *sig, nx_coll **out);
/* Rank and size of the communicator, sequence number of this collective. */
/* "all_reduce(count=4, dtype=f32, op=sum, root=0)": a signature for errors. */
void nx_coll_describe(char *buf, size_t cap, uint8_t op, uint8_t dt, uint8_t redop, uint32_t root,
                      uint64_t count);
/* The communicator of k. */
nexar_client *nx_coll_client(const nx_coll *k);
/* k's failure so far (a peer lost, an abort, a mismatch a peer reported,
 * ...) with its text set, or 0. Takes ep->mu. */
int nx_coll_failed(nx_coll *k);
uint32_t nx_coll_rank(const nx_coll *k);
uint32_t nx_coll_size(const nx_coll *k);
uint64_t nx_coll_seq(const nx_coll *k);
/* The sparse topology whose nodes the communicator's ranks are (rank i is
 * member id i of the world the graph was formed over), degree in *degree;
 * 0 (full mesh) otherwise: then schedules may need relays. */
int nx_coll_graph(const nx_coll *k, uint32_t *degree);
/* The communicator's configuration (algorithm thresholds). */
const nexar_config *nx_coll_config(const nx_coll *k);
/* Timeout for this collective in ms (collective or barrier timeout; 0 = none). */
uint32_t nx_coll_timeout_ms(const nx_coll *k);
/* Non-blocking send of len bytes to comm rank dest, keyed (round, seg). The
 * buffer must stay valid until the request is waited. dest may equal the
 * caller's rank (loopback). */
int nx_coll_isend(nx_coll *k, uint32_t dest, uint32_t round, uint32_t seg, const void *buf,
                  size_t len, nx_creq **out);
/* Non-blocking receive of exactly len bytes from comm rank src, keyed (round, seg). */
int nx_coll_irecv(nx_coll *k, uint32_t src, uint32_t round, uint32_t seg, void *buf, size_t len,
                  nx_creq **out);
/* Every request k makes from now on calls fn(arg) once it completes (from
 * whichever thread completes it, possibly under engine locks: fn must only
 * queue work). Set before the first send or receive. */
void nx_coll_watch(nx_coll *k, void (*fn)(void *arg), void *arg);
/* Without waiting: if r is finished, frees it, stores its result in *rc
 * (with the thread's error text set, as nx_coll_wait would) and returns 1;
 * otherwise applies the no-progress limit at time now (a timeout fails the
 * whole collective), lowers *wake to r's deadline and returns 0. */
int nx_coll_reap(nx_coll *k, nx_creq *r, uint64_t now, uint64_t *wake, int *rc);
/* The collective failed here with rc (the thread's error text says why):
 * its outstanding requests are given up now; they still finish (reap them)
 * before nx_coll_end. */
void nx_coll_fail(nx_coll *k, int rc);
/* Waits for r and frees it. 0, or TIMEOUT (no progress for the collective
 * timeout, message names the peer), PEER_LOST, MISMATCH, ABORTED,
 * SIZE_MISMATCH (treated as MISMATCH by callers). */
int nx_coll_wait(nx_coll *k, nx_creq *r);
/* Waits for all n (NULL entries skipped), frees them; returns the first error. */
int nx_coll_waitall(nx_coll *k, nx_creq **r, size_t n);
/* Finishes the collective. On rc != 0, tells the peers (so a MISMATCH is
 * reported on every rank) and drops the late frames of this sequence. Sets the
 * thread's error text and returns rc. Frees k. */
int nx_coll_end(nx_coll *k, int rc);
/* nx_coll_end of a collective that succeeded, without ep->mu when it has no
 * request out (as a segment collective): a locked instruction right after
 * the stores that published its data would wait for their lines to reach
 * the CPUs polling them, on every call. k stays linked, marked ended, until
 * the communicator's next nx_coll_begin or its deletion retires it. Call on
 * the thread that began k. Returns 0. */
int nx_coll_end_quick(nx_coll *k);

/* Marks c's next collective, sequence seq, as one this rank takes through
 * the shared segment without waiting for the others (segcoll.c): from then
 * on a peer's frame for seq is answered with a failure (MISMATCH), as it
 * took the message path. Call before nx_coll_begin, on the issuing thread. */
void nx_coll_mark_seg_nowait(nexar_client *c, uint64_t seq);
/* Tells comm rank peer that collective seq failed with rc (it may still be
 * waiting in it). Takes ep->mu. */
void nx_coll_tell_failed(nexar_client *c, uint32_t peer, uint64_t seq, int rc);

/* Creates a communicator from parent: members[i] is the parent rank of new
 * rank i; the caller must be among them; comm_id is chosen by the caller and
 * must be the same on every member and unique (derive it from the parent's id
 * and the split's sequence number and color). */
int nx_comm_derive(nexar_client *parent, uint64_t comm_id, const uint32_t *members, uint32_t n,
                   nexar_client **out);
/* The same for a successor view (epoch = the parent's + 1). */
int nx_comm_derive_view(nexar_client *parent, uint64_t comm_id, const uint32_t *members, uint32_t n,
                        uint64_t epoch, nexar_client **out);

#endif
