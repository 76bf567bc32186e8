/* Communicator segments: one shared-memory segment for all the ranks of a
 * communicator that live on one host, so small collectives go through it
 * directly (collective/segcoll.c) instead of as messages.
 *
 * Layout (all offsets fixed by the member count n and nx_cseg_slot(n), which
 * both sides compute themselves): a header, then one control block per rank
 * (nx_cseg_ctl, four cache lines), then per rank two data buffers of
 * nx_cseg_slot(n) bytes (parity: collective sequence & 1). Pages are only
 * backed once written, so a segment costs what its collectives use.
 *
 * Every collective a rank begins on the communicator, whatever its path,
 * stores entered = its sequence. Protocol of one collective with sequence
 * k, parity p = k & 1, ring slot i = k & 3, on rank r:
 *  1. if r arrived at k - 2, wait until every rank has entered k - 1 (a rank
 *     begins k - 1 only once it finished k - 2 in the segment, which is when
 *     it read r's arrival, signature and buffer of k - 2; one that took k - 2
 *     by messages or refused it never reads them);
 *  2. write its contribution into buffer p (or, single copy, the address of
 *     its own buffer into addr[i]), its signature into sig[i], then
 *     arrive[i] = k (release);
 *  3. wait until every rank has arrive[i] == k and compare the signatures (a
 *     mismatch is found on arrival, by every rank: each reads every
 *     signature) -- except a rank that only writes (a broadcast's root),
 *     which returns and compares at its next collective (collective/
 *     segcoll.c): slot i is rewritten at k + 4 at the earliest, and step 1
 *     keeps every rank within two sequences of it;
 *  4. read and reduce or copy straight from the others' buffers; single
 *     copy: read with process_vm_readv, store left = k, and wait until every
 *     rank left k before returning (its buffer is read until then).
 * Trust. The members proved they are the authenticated peers of this host
 * (the lane, lane.c); the segment is offered over the lane only to them, and
 * accepted only from the proven pid of the communicator's rank 0, sealed
 * against resizing. Nothing read from the segment sizes anything: lengths
 * come from the caller's own arguments, and an arrive value that no
 * protocol-abiding peer can write is NEXAR_ERR_PROTOCOL. A published
 * address is only read with process_vm_readv from the process the lane
 * proved for that rank: a forged one reads that process or fails (PROTOCOL).
 *
 * Waking: a writer bumps its `gen` after every store to arrive or done and
 * wakes futex sleepers on it; waiters spin (or yield, with more ranks than
 * CPUs) first, like request waits. */
#ifndef NX_RUNTIME_CSEG_H
#define NX_RUNTIME_CSEG_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/comm.h"

/* Data bytes per rank and parity: 1 MiB, less from 16 ranks on so that a
 * segment stays within 32 MiB (64 KiB at least). */
static inline size_t nx_cseg_slot(uint32_t n) {
  size_t s = (16u << 20) / (n ? n : 1);
  return s > (1u << 20) ? (1u << 20) : s < (64u << 10) ? (64u << 10) : s & ~(size_t)4095;
}
/* Reductions through the segment have every rank read every rank's buffer:
 * up to this many bytes in all (n x one rank's vector). Measured at n = 2,
 * 4 and 8 on 2 cores, that beats the message path's ring up to the 1 MiB
 * buffer; with many more ranks the n-fold reading costs more than the
 * ring's reduce-scatter shares. */
#define NX_CSEG_REDUCE_MAX (8u << 20)
/* Reductions above that run as consecutive segment collectives of a chunk
 * each (collective/segcoll.c) up to this many ranks. Measured on 2 cores:
 * at n = 4, 2-32 MiB all_reduce 1.1-1.8x faster than the ring; at n = 8 as
 * fast or slower (every rank reads every rank's chunk). */
#define NX_CSEG_CHUNK_RANKS 4u

typedef struct nx_cseg_sig {
  uint8_t op, dtype, redop, pad;
  uint32_t root;
  uint64_t count;
} nx_cseg_sig;

/* Arrivals and signatures are kept for four sequences (k & 3), data for
 * two (k & 1): a rank that does not wait for the others' arrivals (a
 * broadcast's root, a scatter's) checks their signatures of k at its next
 * collective, when they may be at k + 2 but never at k + 4. */
#define NX_CSEG_RING 4u

typedef struct nx_cseg_ctl {
  _Atomic uint64_t arrive[NX_CSEG_RING]; /* by sequence & 3 */
  nx_cseg_sig sig[NX_CSEG_RING];
  uint64_t addr[NX_CSEG_RING]; /* single copy: where its data is, in its process */
  _Atomic uint64_t entered;    /* the latest sequence this rank began */
  _Atomic uint64_t msg;        /* the latest sequence that took the message path */
  _Atomic uint64_t left;       /* single copy: the latest sequence it read all of */
  char pad1[40];
  _Atomic uint32_t gen, sleepers;
  char pad2[56];
} nx_cseg_ctl;

/* Collectives this rank finished without waiting for the others, not yet
 * checked against their signatures (at most two are ever outstanding). */
#define NX_CSEG_PEND 4u

typedef struct nx_cseg {
  void *base;
  size_t size;
  uint32_t n, me;
  size_t slot; /* nx_cseg_slot(n) */
  uint64_t attempt;
  nx_cseg_ctl *ctl;            /* ctl[0..n) */
  uint8_t *data;               /* data of rank r, parity p: data + (2r + p) * slot */
  uint64_t last_arrive[2];     /* sequence this rank last arrived at on parity p (+1; 0 never) */
  uint64_t pend[NX_CSEG_PEND]; /* unchecked sequences, oldest first */
  nx_cseg_sig pend_sig[NX_CSEG_PEND];
  uint32_t npend;
  int cma;    /* every rank may read every other's memory (process_vm_readv) */
  pid_t *pid; /* process of each rank, as its lane proved it (cma only) */
} nx_cseg;

/* Above what a rank may publish in its buffer (nx_cseg_slot), collectives
 * that only copy read straight from the others' buffers with one kernel
 * copy (single copy, as the same-host rendezvous does), when cma; with no
 * limit of size. Below, two copies through the segment win: measured on 2
 * cores, process_vm_readv moves 5.5-7 GB/s (it pins the pages of every
 * call) where memcpy of cached data moves 30. */

/* Reads len bytes at address `from` of process pid into to: 0, or
 * NEXAR_ERR_PEER_LOST (the process is gone), NEXAR_ERR_PROTOCOL (the
 * address it published is not readable), error text set. */
int nx_cseg_read(pid_t pid, void *to, uint64_t from, size_t len);
/* Marks this rank done reading sequence seq (single copy). */
void nx_cseg_leave(nx_cseg *s, uint64_t seq);

static inline uint8_t *nx_cseg_buf(const nx_cseg *s, uint32_t r, uint64_t seq) {
  return s->data + ((size_t)r * 2 + (seq & 1)) * s->slot;
}

/* Rank 0: a new sealed segment for n ranks; *fd to offer to the others
 * (closed by the caller). 0 or NOMEM/IO. */
int nx_cseg_create(uint64_t comm_id, uint32_t n, uint64_t attempt, int *fd, nx_cseg **out);
/* Offers segment fd to comm member root rank `peer` over the lane (kept and
 * retried by the progress passes while its queue is full). 0 or -1. Takes
 * ep->mu. */
int nx_cseg_offer(nx_comm *c, uint32_t peer, uint64_t attempt, int fd);
/* The lane delivered a segment offer (f: comm_id, tag = attempt) from p with
 * fd (taken; closed here). Validated, mapped, kept as c->cseg_offer. */
void nx_cseg_on_offer_locked(nx_ep *ep, nx_peer *p, uint64_t comm_id, uint64_t attempt, int fd);
void nx_cseg_free(nx_cseg *s);

/* Publishing: a store to arrive[p], msg or entered, then the doorbell. */
void nx_cseg_arrive(nx_cseg *s, uint64_t seq, const nx_cseg_sig *sig);
void nx_cseg_mark_msg(nx_cseg *s, uint64_t seq);
void nx_cseg_enter(nx_cseg *s, uint64_t seq);

/* What rank r's arrive[p] and msg say about sequence seq: 0 not yet, 1
 * arrived, 2 it went past seq on the message path without arriving (a
 * mismatch), NEXAR_ERR_PROTOCOL impossible. */
int nx_cseg_arrival(uint64_t arrive, uint64_t msg, uint64_t seq);

/* What a rank's words say of an earlier sequence k we did not wait for,
 * pure: 0 not final yet (it has not begun k + 1), 1 it arrived at k (compare
 * its signature), 2 it took k by messages, 3 it left k without either (it
 * failed or refused it), 4 its slot of k is reused (it is past k + 2: what
 * it found of k it told us through the failure it sent). */
int nx_cseg_past(uint64_t arrive, uint64_t msg, uint64_t entered, uint64_t k);

/* Waits until pred(arg, &who) returns non-zero (1 ready, < 0 an error that
 * ends the wait), driving the engine like a request wait, for collective k.
 * who: the rank pred waits for (to sleep on its doorbell). Returns 0, pred's
 * error, k's failure (peer lost, aborted, a mismatch seen by a peer), or
 * TIMEOUT after timeout_ms, naming what (the operation) and step (what it
 * waited for). */
struct nx_coll;
int nx_cseg_wait(nx_cseg *s, struct nx_coll *k, int (*pred)(void *arg, uint32_t *who), void *arg,
                 uint32_t timeout_ms, const char *what, const char *step);

#endif
