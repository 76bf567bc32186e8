/* Fault-tolerant agreement on a view change: the dead set of view epoch E
 * (and, with the same machinery, the AND of a 32-bit flag: nexar_agree).
 *
 * Pure: no sockets, no clock, no threads. Time is passed in by the caller
 * (`now`, any monotonic unit; the timeouts are in the same unit). Inputs are
 * start, failure-detector news, wire messages and timer expiry; outputs are
 * actions (messages to send, the decision) the caller drains with
 * nx_agree_pop. Not thread-safe: one thread at a time drives an instance.
 *
 * Protocol (single-decree Paxos with a rotating coordinator):
 *  - Members are indices 0..n-1 (rank order of the old view) with member ids.
 *    The coordinator is the member with the lowest id that this member does
 *    not suspect. A ballot is (round, coordinator index), ordered by round
 *    then index; a coordinator starts one round above any it has seen.
 *  - COLLECT(b) goes to every member. A member whose promise is <= b promises
 *    b and answers PROMISE(b, its flag, its suspicions, its accepted (b', V)
 *    if any); otherwise NACK(its promised ballot). A member that already
 *    decided answers COMMIT(V) to any message instead.
 *  - The collect phase ends when every member the coordinator does not
 *    suspect answered, or after `timeout`. Members that did not answer by
 *    then are added to the dead set (recorded in a->timed_out).
 *  - Choose: with MAJORITY, fewer than a strict majority of the n promises
 *    (the coordinator's own included) means no proposal this round. Otherwise,
 *    if a promise carried an accepted value, the one of the highest ballot is
 *    proposed unchanged (this is what makes it safe); else the fresh value is
 *    D = own suspicions | reported suspicions | non-responders, flag = AND of
 *    the flags of the responders not in D (every survivor responded). With
 *    MAJORITY a D that leaves n - |D| <= n/2 survivors is not proposed.
 *  - ACCEPT(b, V) goes to every member (those in D too). Each member with
 *    promise <= b stores accepted = (b, V) and answers ACCEPTED(b). With a
 *    strict majority of n ACCEPTED the value is chosen: the coordinator
 *    decides and sends COMMIT(V) to all. Every member re-floods COMMIT to all
 *    the first time it learns it, so a coordinator dying mid-commit still
 *    converges; a decided member answers any later message with COMMIT.
 *  - A failed round (NACK, too few promises, ACCEPT not acknowledged within
 *    `timeout`) is retried after a backoff that grows with the coordinator's
 *    position. A coordinator yields when it hears a coordinator of lower
 *    index. A member that hears no coordinator for 3 x timeout takes over.
 *  - A member undecided at start + give_up decides ABORTED ("no majority: k
 *    of n reachable", k = the most promises it collected, or the members it
 *    does not suspect). With MAJORITY a side without a strict majority can
 *    never choose a value, so it always ends ABORTED and never forms a view.
 *  - A member whose decided D contains itself gets EVICTED (the committed
 *    value is still reported), so a falsely suspected live member learns it.
 *
 * Timers: a coordinator re-sends its COLLECT / ACCEPT every timeout / 4 to
 * the members that have not answered (so lossy links are fine; over reliable
 * streams the copies are duplicates, which every handler ignores).
 * A COLLECT that arrives before nx_agree_start is promised and answered at
 * start (the PROMISE needs my flag); ACCEPT and COMMIT are handled at once.
 *
 * Limits: a value adopted from an earlier ballot is proposed unchanged, so a
 * member that crashed after it was first proposed stays in the committed
 * view (the next epoch's agreement removes it); this is the price of safety.
 * Competing coordinators are damped (yield to a lower id, backoff by
 * position) but, as in any Paxos, not excluded; give_up bounds the time.
 *
 * SURVIVORS mode (ULFM's shrink): the collect needs no quorum and the accept
 * needs every survivor (members not in V's D); an adopted value that some of
 * its survivors did not confirm is widened by the non-responders. This is a
 * split-brain risk: two sides of a partition (or a member every other member
 * timed out) each commit their own successor for the same epoch, and a value
 * known only to members that crashed can be superseded. Use MAJORITY unless
 * the application can reconcile diverging views.
 *
 * Test hook points (a process may _exit after sending COLLECT, after ACCEPT to
 * k members, after COMMIT to k members): every send action carries its
 * message type, and a send to NX_AGREE_ALL is fanned out by the caller, so
 * the caller counts k itself and can stop at exactly those points.
 *
 * Wire format (little-endian, version NX_AGREE_VERSION): a 24-byte header
 * [version u8][type u8][0 u16][epoch u64][n u32][ballot round u32][ballot
 * coordinator u32]; then for PROMISE [flag u32][suspicions: n bits]
 * [has_accepted u8] and, if 1, [round u32][coordinator u32][flag u32][dead: n
 * bits]; for ACCEPT and COMMIT [flag u32][dead: n bits]; nothing for
 * COLLECT, NACK and ACCEPTED. Bit sets are (n + 7) / 8 bytes, bit i of byte
 * i / 8 = member index i (bit i % 8), unused high bits zero. */
#ifndef NX_PROTO_AGREE_H
#define NX_PROTO_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "nexar/nexar.h"

#define NX_AGREE_VERSION 1
#define NX_AGREE_MAX_N 4096u
#define NX_AGREE_ALL UINT32_MAX /* "to" of a send to every member but me */
#define NX_AGREE_HDR 24u
#define NX_AGREE_MAX_ROUND 0x7fffffffu /* ballot rounds are 1 ..this; more is malformed */

enum nx_agree_mtype {
  NX_AM_COLLECT = 1,
  NX_AM_PROMISE,
  NX_AM_NACK,
  NX_AM_ACCEPT,
  NX_AM_ACCEPTED,
  NX_AM_COMMIT,
};

enum nx_agree_quorum { NX_AGREE_MAJORITY = 0, NX_AGREE_SURVIVORS = 1 };

enum nx_agree_outcome {
  NX_AGREE_PENDING = 0,
  NX_AGREE_COMMITTED, /* new view: members not in dead */
  NX_AGREE_EVICTED,   /* committed, and I am in dead */
  NX_AGREE_ABORTED,   /* no successor formed here */
};

typedef struct nx_ballot {
  uint32_t round, coord; /* coord: member index; (0, 0) is below every real ballot */
} nx_ballot;

/* One decoded message; the bit sets point into the decoded bytes. */
typedef struct nx_agree_msg {
  uint8_t type;
  uint64_t epoch;
  uint32_t n;
  nx_ballot b;
  uint32_t flag;           /* PROMISE: sender's flag; ACCEPT / COMMIT: the value's flag */
  const uint8_t *bits;     /* PROMISE: suspicions; ACCEPT / COMMIT: the dead set */
  uint8_t has_acc;         /* PROMISE */
  nx_ballot acc_b;         /* PROMISE */
  uint32_t acc_flag;       /* PROMISE */
  const uint8_t *acc_dead; /* PROMISE */
} nx_agree_msg;

/* The decision. dead has (n + 7) / 8 bytes (bit i = member index i). */
typedef struct nx_agree_decision {
  int outcome;        /* enum nx_agree_outcome */
  uint64_t new_epoch; /* epoch + 1 when committed */
  uint32_t flag;      /* AND of the survivors' flags (committed only) */
  uint32_t ndead;
  uint8_t *dead;
  char reason[96]; /* ABORTED / EVICTED: a sentence */
} nx_agree_decision;

enum nx_agree_akind { NX_AGREE_SEND = 1, NX_AGREE_DECIDE };

typedef struct nx_agree_action {
  int kind;           /* enum nx_agree_akind */
  uint32_t to;        /* SEND: member index or NX_AGREE_ALL (every member but me) */
  uint8_t mtype;      /* SEND: enum nx_agree_mtype (the hook points) */
  const uint8_t *buf; /* SEND: valid until the next nx_agree_pop or nx_agree_free */
  size_t len;
} nx_agree_action;

typedef struct nx_agree {
  uint64_t epoch;
  uint32_t n, me, nb; /* nb: bytes of a bit set */
  uint64_t *ids;
  int quorum;
  uint64_t timeout, give_up;
  int started;
  uint32_t my_flag;
  uint8_t *susp;      /* my suspicions */
  uint8_t *timed_out; /* members that did not answer one of my collects */
  /* acceptor */
  nx_ballot promised;
  int has_acc;
  nx_ballot acc_b;
  uint32_t acc_flag;
  uint8_t *acc_dead;
  /* coordinator */
  int role; /* 0 follower, 1 collecting, 2 accepting, 3 waiting to retry */
  nx_ballot cur;
  uint32_t max_round;
  uint64_t phase_end, retx_at, retry_at, stall_at, give_up_at;
  uint8_t *answered; /* collect: promised; accept: acknowledged */
  uint32_t nanswered;
  uint32_t *flags;   /* responders' flags */
  uint8_t *rep_susp; /* n x nb: the suspicions each responder reported */
  int pend_collect;  /* a COLLECT arrived before start: answer it then */
  nx_ballot pend_b;
  int best_has;
  nx_ballot best_b;
  uint32_t best_flag;
  uint8_t *best_dead;
  uint32_t prop_flag;
  uint8_t *prop_dead;
  uint32_t reachable;
  uint32_t rounds; /* ballots this member started (statistics) */
  /* decision */
  nx_agree_decision dec;
  /* actions */
  nx_agree_action *q;
  uint8_t **qbuf;
  size_t qhead, qn, qcap;
  uint8_t *popped; /* buffer of the last popped action */
  int nomem;
} nx_agree;

/* Sets up an instance for view epoch `epoch` of n members (ids in rank order,
 * copied), me = my index, quorum = enum nx_agree_quorum, timeout = how long
 * a coordinator waits for answers, give_up = how long after start an
 * undecided member gives up (ABORTED). Returns 0, NEXAR_ERR_INVALID_ARGUMENT
 * (n == 0 or > NX_AGREE_MAX_N, me >= n, timeout == 0, give_up < timeout) or
 * NEXAR_ERR_NOMEM. */
int nx_agree_init(nx_agree *a, uint64_t epoch, uint32_t n, const uint64_t *ids, uint32_t me,
                  int quorum, uint64_t timeout, uint64_t give_up);
/* Releases everything the instance holds. */
void nx_agree_free(nx_agree *a);

/* Starts the agreement with my flag and my suspicions (a bit set of nb bytes,
 * or NULL). Messages that arrive before start are answered as an acceptor.
 * Returns 0, NEXAR_ERR_INVALID_ARGUMENT (started twice) or NEXAR_ERR_NOMEM. */
int nx_agree_start(nx_agree *a, uint64_t now, uint32_t my_flag, const uint8_t *suspected);
/* Failure-detector news: member (index) is suspected. Returns 0, or
 * NEXAR_ERR_INVALID_ARGUMENT for an index out of range. */
int nx_agree_suspect(nx_agree *a, uint64_t now, uint32_t member);
/* A wire message from member index `from`. Returns 0 (handled or ignored:
 * another epoch, a stale ballot), NEXAR_ERR_PROTOCOL (malformed: nothing
 * changed), NEXAR_ERR_INVALID_ARGUMENT (from out of range) or
 * NEXAR_ERR_NOMEM. */
int nx_agree_on_msg(nx_agree *a, uint64_t now, uint32_t from, const uint8_t *buf, size_t len);
/* Runs whatever is due at `now` (retransmissions, phase ends, retries,
 * takeover, giving up). Returns 0 or NEXAR_ERR_NOMEM. */
int nx_agree_on_timer(nx_agree *a, uint64_t now);
/* Returns the earliest time nx_agree_on_timer has something to do, or
 * UINT64_MAX when nothing is pending (not started, or decided). */
uint64_t nx_agree_next_deadline(const nx_agree *a);
/* Takes the next action into *out. Returns 1 if there was one, 0 if none. */
int nx_agree_pop(nx_agree *a, nx_agree_action *out);
/* Returns the decision (outcome NX_AGREE_PENDING until decided). */
const nx_agree_decision *nx_agree_result(const nx_agree *a);

/* Returns the encoded size of m for n members (0 for an unknown type). */
size_t nx_agree_msg_size(uint8_t type, uint8_t has_acc, uint32_t n);
/* Encodes m (m->n members) into out (cap bytes). Returns the length written,
 * or 0 if cap is too small or m is invalid. */
size_t nx_agree_encode(const nx_agree_msg *m, uint8_t *out, size_t cap);
/* Decodes and validates buf (len bytes) into *m (pointing into buf). Returns
 * 0, or NEXAR_ERR_PROTOCOL (wrong version or type, n out of range, length
 * not exactly that of the type, a flag byte not 0 or 1, a coordinator index
 * >= n, a ballot round 0 or above NX_AGREE_MAX_ROUND, a bit set with bits
 * past n). */
int nx_agree_decode(const uint8_t *buf, size_t len, nx_agree_msg *m);
/* Returns bit i of a bit set. */
static inline int nx_agree_bit(const uint8_t *bits, uint32_t i) {
  return (bits[i >> 3] >> (i & 7)) & 1;
}

#endif
