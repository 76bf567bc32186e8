/* Communicator segments: one shared-memory segment for all the ranks of a
 * communicator that live on one host, so small collectives go through it
 * directly (collective/segcoll.c) instead of as messages.
 *
 * Layout (all offsets fixed by the member count n and nx_cseg_slot(n), which
 * both sides compute themselves): a header, then one control block per rank
 * (nx_cseg_ctl, seven cache lines), then per rank two data buffers of
 * nx_cseg_slot(n) bytes (parity: collective sequence & 1), then the small
 * broadcasts' entries. The data buffers' pages are only backed once written,
 * so a segment costs what its collectives use; the control blocks and (up
 * to NX_CSEG_POPULATE_RANKS ranks) the broadcast entries are mapped in at
 * set-up, and touched by each process that maps them (cseg.c, touch).
 *
 * Every collective a rank begins on the communicator, whatever its path,
 * stores entered = its sequence. Protocol of one collective with sequence
 * k, parity p = k & 1, ring slot i = k & 3, on rank r:
 *  1. wait until every rank has finished the last collective at which r
 *     arrived on parity p (entered past it: a rank begins k' + 1 only once
 *     it has read what it needed of k'), and past the nowait collectives r
 *     has not checked yet (below);
 *  2. write its contribution into buffer p (up to NX_CSEG_INLINE bytes into
 *     arr[i] itself; single copy: the address of its own buffer into
 *     arr[i].addr), its signature into arr[i].sig, then arr[i].arrive = k
 *     (release);
 *  3. wait until every rank has arr[i].arrive == k and compare the signatures (a
 *     mismatch is found on arrival, by every rank: each reads every
 *     signature); a rank that went past k without arriving (entered, msg)
 *     took another path: a mismatch too -- except a rank that only writes
 *     (a broadcast's or scatter's root: "nowait"), which returns;
 *  4. read and reduce or copy straight from the others' buffers; single
 *     copy: read with process_vm_readv, store left = k, and wait until every
 *     rank left k before returning (its buffer is read until then).
 * A reader of a nowait root's collective k sets its bit in the root's
 * ack[i] once it has read it with matching signatures; the root checks the
 * bits of k at a later collective, once every rank has begun k + 1: one
 * missing is a mismatch (found late, at that collective; the root tells the
 * rank, which may be waiting for its frames on the message path).
 *
 * A broadcast above NX_CSEG_STREAM_MIN bytes streams instead of 2.-4.
 * (NX_CSEG_PIECE below), as do all_gather, all_to_all, gather and scatter
 * of two ranks: every rank arrives; a writer (the root; each rank that
 * sends) writes its data piece by piece into its buffer p as a ring,
 * announcing each in its `stream` word of parity p (zeroed before its
 * arrival), and waits for the arrivals
 * (comparing signatures) once the ring is full or it wrote the last; a
 * reader waits for the arrivals, then copies each piece of its writer as
 * it is announced and announces it in `sread`. A rank returns once it
 * wrote and read its last piece (step 1 of k + 2 keeps buffer p).
 * Between two ranks these (and a broadcast) choose at every call between
 * streaming and single copy, and from three ranks on all_gather and
 * all_to_all between the buffers and single copy: one rank decides
 * (collective/coll.h, nx_segcoll_either, nx_segcoll_decider; by the times it
 * measured) and says which in arr[i].sig.how, which the signature
 * comparison leaves out; every rank publishes arr[i].addr too. The others
 * learn the way from the decider's arrival: streamed, after their own;
 * through the buffers, before they publish (a way other than 0 or 1 is
 * PROTOCOL).
 *
 * Small broadcasts take a deeper ring instead (nx_cseg_bent): root r writes
 * broadcast k into its entry k % NX_CSEG_BDEPTH (signature, data, then
 * seq = k + 1, release) and returns; a reader waits for that entry alone
 * (not for the other readers), checks the signature, copies, sets its bit
 * in the entry's ack. A root thus runs up to NX_CSEG_BDEPTH collectives
 * ahead of its slowest reader, as an MPI root runs ahead through its eager
 * buffers: it reuses an entry once every rank has begun the collective after
 * the one it held, checking that entry's ack bits first. A reader sees
 * mismatches with the root at once (another signature, or the root past k
 * without the entry); one between two readers (each taking a different root)
 * is found by the roots, late, and fails their next collective there and, as
 * they never arrive at it, on every other rank.
 * Trust. The members proved they are the authenticated peers of this host
 * (the lane, lane.c); the segment is offered over the lane only to them, and
 * accepted only from the proven pid of the communicator's rank 0, sealed
 * against resizing. Nothing read from the segment sizes anything: lengths
 * come from the caller's own arguments, and an arrive value that no
 * protocol-abiding peer can write is NEXAR_ERR_PROTOCOL. A published
 * address is only read with process_vm_readv from the process the lane
 * proved for that rank: a forged one reads that process or fails (PROTOCOL).
 *
 * Waking: after every store a waiter may sleep on (arrive, msg, entered,
 * left, a broadcast entry) a writer with sleepers counted bumps its `gen`
 * and wakes them on it; waiters spin (or yield, with more ranks than CPUs)
 * first, like request waits. Those stores are release stores, without the
 * fence a sleeper count would need: a sleeper looks for NX_CSEG_GRACE_NS
 * more after counting itself (cseg.c, bell, says why that suffices). */
#ifndef NX_RUNTIME_CSEG_H
#define NX_RUNTIME_CSEG_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/pick.h"
#include "runtime/coll_port.h"
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
 * at n = 4, 2-32 MiB all_reduce 1.1-1.8x faster than the ring. At n = 8 it
 * measured as fast or slower while chunks were whole buffers and waits did
 * not yet poll for the bytes they wait for; now (harness, 2 alternating
 * runs, the message path's ring -> chunks) n = 8 all_reduce 1 MiB 2.0 ->
 * 1.3 ms, 4 MiB 8.9-10.5 -> 5.8-6.1, 16 MiB 39-45 -> 24-25 (Open MPI's
 * default 28-33), 64 MiB 128-133 -> 86-95, reduce_scatter 16 MiB 18-21 ->
 * 7.2; n = 6 all_reduce 4 MiB 5.0-6.1 -> 3.0. Not measured above 8 ranks
 * (every rank reads every rank's chunk: n-fold). */
#define NX_CSEG_CHUNK_RANKS 8u
/* Reductions (all_reduce, reduce, reduce_scatter) of more than this many
 * bytes run in chunks of it, even below a buffer: every rank reads every
 * rank's chunk just after it was written, and a chunk of each of two ranks
 * and two parities must stay within a core's cache for that (1 MiB of L2
 * here).
 * Harness all_reduce n = 2, chunks of 1 MiB -> 512 KiB: 1 MiB 206 -> 67
 * us, 4 MiB 853 -> 267 us, 64 MiB 13.9 -> 6.3 ms (256 KiB about as fast,
 * 128 KiB 5-10% slower, each chunk a collective of its own). */
#define NX_CSEG_RCHUNK (512u << 10)
_Static_assert((size_t)NX_CSEG_CHUNK_RANKS *NX_CSEG_RCHUNK <= NX_CSEG_REDUCE_MAX,
               "a chunk of every rank is read within NX_CSEG_REDUCE_MAX");
static inline size_t nx_cseg_rchunk(uint32_t n) {
  size_t b = nx_cseg_slot(n);
  return b < NX_CSEG_RCHUNK ? b : NX_CSEG_RCHUNK;
}
/* An all_reduce of this many bytes or more (a chunk's, where it runs in
 * chunks) between three ranks or more reduces by shares
 * (collective/segcoll.c, by_shares; README, design: harness all_reduce n =
 * 8, 64 KiB 81-194 -> 40-116 us, 1 MiB 1.56-3.9 -> 0.45-0.52 ms). Below,
 * the wait it adds would cost more than the n-fold reading of so few
 * bytes (not measured). */
#define NX_CSEG_SHARE_MIN (32u << 10)
/* all_gather above a buffer runs in chunks up to this many buffers of a
 * rank's block, single copy above (collective/segcoll.c says why). */
#define NX_CSEG_GATHER_CHUNKS 4u

typedef struct nx_cseg_sig {
  uint8_t op, dtype, redop;
  uint8_t how; /* not compared: the way a two-rank copy takes (nx_segcoll_either), said by
                * the rank that decides; 0 elsewhere */
  uint32_t root;
  uint64_t count;
} nx_cseg_sig;

/* Arrivals, signatures and acks are kept for four sequences (k & 3), data
 * for two (k & 1). */
#define NX_CSEG_RING 4u
/* Small broadcasts (NX_CSEG_BCAST_MAX bytes at most) go through a ring of
 * this many entries per root, up to NX_CSEG_BCAST_RANKS ranks (one ack bit
 * each). Deep enough that with more ranks than CPUs a root fills it within
 * one time slice and each reader drains it within its own: measured at
 * n = 8 on 2 cores, a broadcast of 8 B costs about a context switch per
 * NX_CSEG_BDEPTH / n calls instead of one per call. */
#define NX_CSEG_BDEPTH 128u
/* A root whose ring is full looks at its readers' entered words this far
 * apart: a reader stores its own at every call, and each look takes the
 * line from it, so that its next store waits for the line to come back.
 * 2 us leaves a reader most of a ring of work at 60 ns per broadcast.
 * Harness broadcast 8 B n = 2, 6 alternating runs, medians, looks a pause
 * (18 ns here) apart -> 64 and 128 pauses apart: 0.110-0.123 -> 0.098-0.101
 * us per call. */
#define NX_CSEG_BGAP_NS 2000u
/* After each small broadcast its root fetches for writing up to this many
 * of its next entries that its readers left (collective/segcoll.c,
 * prefetch_free). Harness broadcast 8 B n = 2, 6 alternating runs, medians,
 * against the next entry alone, unchecked: 1 0.085 us (unchecked 0.086), 2
 * 0.076, 4 0.074, 8 0.105 (Open MPI's default 0.123). */
#define NX_CSEG_BPREFETCH 2u
/* A waiter that finds no arrival (no broadcast entry) of seq looks whether
 * that rank went past seq another way at every this many looks only
 * (collective/segcoll.c, look_past says why). */
#define NX_CSEG_PAST_EVERY 16u
/* Up to this many ranks, a segment's broadcast entries are mapped in and
 * touched at set-up (cseg.c, populate and touch): 1.2 KiB x NX_CSEG_BDEPTH
 * per rank, 2.4 MiB at 16 ranks. */
#define NX_CSEG_POPULATE_RANKS 16u
/* A page: below, a buffer's first touch costs one fault, as mapping it in
 * would cost one call (nx_cseg_back). */
#define NX_CSEG_BACK_MIN 4096u
#define NX_CSEG_BCAST_MAX 1024u
#define NX_CSEG_BCAST_RANKS 64u
/* How long a waiter that counted itself a sleeper keeps looking before it
 * sleeps (cseg.c, bell: the writers' stores are release, not seq_cst). */
#define NX_CSEG_GRACE_NS 5000u
/* A sleeper's bound (it then looks at failures, the deadline and the words
 * again): NX_CSEG_NAP_MIN_NS at first, doubled after each that nobody's bell
 * ended, up to NX_CSEG_NAP_MAX_NS. With more ranks than CPUs each bounded
 * sleep that ends preempts a rank at work: at n = 8 on 2 CPUs the six ranks
 * that wait out a ping-pong between the other two woke 1000 times a second
 * each at a fixed 1 ms. */
#define NX_CSEG_NAP_MIN_NS 1000000ull
#define NX_CSEG_NAP_MAX_NS 64000000ull

/* One line holds what a tiny broadcast needs: the sequence a reader polls,
 * the signature, the readers' bits and the first 32 bytes of data. The
 * root's next write of the entry then moves that one line back, not two or
 * three, and a reader reads one line (nexar-perf broadcast 8 B --procs n=2:
 * README, performance). */
typedef struct nx_cseg_bent {
  _Atomic uint64_t seq; /* the broadcast it holds, + 1 (release, after the rest) */
  nx_cseg_sig sig;
  _Atomic uint64_t ack; /* a bit per reader that took it */
  uint8_t data[NX_CSEG_BCAST_MAX];
  char pad[32];
} nx_cseg_bent;

/* Bytes of a collective's contribution kept inline in its arrival's line
 * (nx_cseg_arr) instead of in buffer p: a reader of a small all_reduce or
 * all_gather then takes one line per rank, arrival, signature and data
 * together, instead of the arrival and then the buffer's line, two
 * transfers between cores in a row. */
#define NX_CSEG_INLINE 32u

/* Arrival i (sequence k, i = k & 3): a cache line of its own. */
typedef struct nx_cseg_arr {
  _Atomic uint64_t arrive; /* k + 1 (release, after the rest) */
  nx_cseg_sig sig;
  uint64_t addr; /* single copy: where its data is, in its process */
  uint8_t data[NX_CSEG_INLINE];
} nx_cseg_arr;

typedef struct nx_cseg_ctl {
  nx_cseg_arr arr[NX_CSEG_RING];
  _Atomic uint64_t entered;   /* the latest sequence this rank began */
  _Atomic uint64_t msg;       /* the latest sequence that took the message path */
  _Atomic uint64_t left;      /* single copy: the latest sequence it read all of */
  _Atomic uint64_t stream[2]; /* streamed, by parity: pieces it wrote */
  _Atomic uint64_t sread[2];  /* streamed, by parity: pieces it read */
  char pad1[8];
  _Atomic uint32_t gen, sleepers;
  char pad2[56];
  _Atomic uint64_t ack[NX_CSEG_RING]; /* nowait k: a bit per reader that took it */
  char pad3[32];
} nx_cseg_ctl;

/* Collectives this rank finished without waiting for the others (nowait),
 * not yet checked: at most the ring's entries and two on the buffers. */
#define NX_CSEG_PEND (2u * NX_CSEG_BDEPTH)

typedef struct nx_cseg_pend {
  uint64_t seq;
  _Atomic uint64_t *ack; /* where its readers set their bits */
} nx_cseg_pend;

typedef struct nx_cseg {
  void *base;
  size_t size;
  uint32_t n, me;
  size_t slot; /* nx_cseg_slot(n) */
  uint64_t attempt;
  nx_cseg_ctl *ctl;        /* ctl[0..n) */
  uint8_t *data;           /* data of rank r, parity p: data + (2r + p) * slot */
  uint64_t last_arrive[2]; /* sequence this rank last arrived at on parity p (+1; 0 never) */
  nx_cseg_pend pend[NX_CSEG_PEND]; /* unchecked, oldest first from pend_at */
  uint32_t npend, pend_at;
  uint8_t *bring;                 /* broadcast entries of rank r: bring + r * BDEPTH */
  uint64_t bheld[NX_CSEG_BDEPTH]; /* our entry i holds this broadcast + 1 (0 none) */
  uint64_t min_entered;           /* the least entered of the others, last read */
  int cma;                        /* every rank may read every other's memory (process_vm_readv) */
  /* the ways of the jobs that choose (nx_segcoll_either), by kind: each
   * kind's two ways cost differently; measured where this rank decides */
  nx_pick pick[NX_COLL_LAST + 1];
  pid_t *pid;    /* process of each rank, as its lane proved it (cma only) */
  size_t backed; /* bytes of each data buffer mapped in here (nx_cseg_back) */
} nx_cseg;

/* Maps in now, in this process, the first `bytes` of every rank's two data
 * buffers (nx_cseg_buf), which a collective about to use them will write
 * or read, if more than NX_CSEG_BACK_MIN and not mapped in yet; at least
 * twice what was, so a growing size takes few calls. The buffers are left
 * unbacked at set-up (a communicator's small collectives never touch most
 * of them), and each page's first touch was a page fault in the middle of
 * a collective, on the writer and on every reader: about 25 us each on
 * the paravirtualised guest we measure on. Harness all_to_all 1 MiB n = 2,
 * the first call of the second parity (3 runs): 137 faults a rank and
 * 3.6-4.3 ms -> none and 2.1-2.4 ms (steady calls 0.05-0.1 ms; the rest is
 * the host's own first touch of each page, which a read of every page here
 * would only move into the first call). */
void nx_cseg_back(nx_cseg *s, size_t bytes);

/* Above what a rank may publish in its buffer (nx_cseg_slot), collectives
 * that only copy read straight from the others' buffers with one kernel
 * copy (single copy, as the same-host rendezvous does), when cma; with no
 * limit of size. Between two ranks already above NX_CSEG_SINGLE_MIN2 bytes
 * published: process_vm_readv of cached data moved 512 KiB in 18 us here,
 * memcpy in 11, so one kernel copy beats two memcpys; measured with
 * nexar-perf --procs at n = 2 (alternating runs, medians) all_to_all 64 KiB
 * 7.7 -> 3.7 us, 1 MiB 114 -> 47; all_gather 1 MiB 74 -> 44; broadcast
 * 256 KiB 16 -> 11; 12 KiB the same both ways. With more ranks than CPUs
 * (n = 4 on 2 cores) the owner's wait for every reader to be scheduled and
 * read costs more: 16-256 KiB broadcast and all_gather 1.2-2x slower, so
 * from three ranks on single copy starts above the buffer, as before. The
 * choice depends on n alone, so every rank makes the same. */
#define NX_CSEG_SINGLE_MIN2 (16u << 10)

/* A large broadcast streams through its root's buffer (collective/segstream.c,
 * run_stream), and between two ranks so do all_gather, all_to_all, gather
 * and scatter through the buffer of each rank that sends: the buffer is a
 * ring of pieces of this many bytes; a writer writes piece c into
 * c % (slot / piece) and announces c + 1 pieces in its `stream` word of the
 * collective's parity, a reader copies it out and announces the same in its
 * `sread` word, and the writer
 * writes a piece over one only once every reader announced it. Writers and
 * readers copy at once, a piece apart, the piece still in cache. */
#define NX_CSEG_PIECE (64u << 10)
_Static_assert(NX_CSEG_PIECE <= (64u << 10), "a buffer (nx_cseg_slot) holds a piece at least");
/* From this many bytes of a streamed block, what its readers copy out of
 * the ring goes to its destination with non-temporal stores (core/copy.h),
 * and an all_gather's own block with them, copied as each piece is written
 * into the ring, from the same cache lines: such destinations do not stay
 * in cache, and the line reads of plain stores cost memory bandwidth both
 * ranks share. Harness, n = 2, 5 alternating runs with the plain copies
 * (4 for all_gather; the VM in its slower states, a line 70-450 ns from
 * one vCPU to the other): broadcast 16 MiB 2.29-3.17 -> 1.46-2.04 ms, 64
 * MiB median 11.5 -> 8.1; all_to_all 64 MiB median 15.9 -> 12.3;
 * all_gather 32 MiB 7.5-8.8 -> 5.5-7.4, 64 MiB 15.1-17.5 -> 10.3-12.1 ms
 * (Open MPI's default 15.9-18.8; streaming itself read 10.9-16.8 in other
 * runs). Streamed calls
 * alone (the way forced), 64 MiB: 31-36 ms -> 8-18. Below, the
 * destination stays in cache between calls, and non-temporal stores evict
 * it: all_gather 2 MiB in all 125-191 -> 184-233 us, 4 MiB 308-436 ->
 * 335-554 (blocks of 1 and 2 MiB); a broadcast of 4 MiB was within noise
 * (197-459 -> 217-378 us). */
#define NX_CSEG_NT_MIN (4u << 20)
/* Streamed above this many bytes a rank sends (the buffers below). */
#define NX_CSEG_STREAM_MIN (16u << 10)
/* A scatter's block streams up to this many bytes (segchoice.c says why). */
#define NX_CSEG_SCATTER_STREAM_MAX (256u << 10)

/* Streamed collective seq: zeroes this rank's words of seq's parity, before
 * its arrival, whose release store publishes them. A peer that saw the
 * arrival then reads seq's counts there, never an older collective's: the
 * words of a parity are not written again for seq + 2 before every rank
 * began seq + 1 (step 1), nor by seq + 1 (the other parity), so a rank that
 * failed seq and went on leaves them as they were. */
void nx_cseg_stream_begin(nx_cseg *s, uint64_t seq);
/* Announces `pieces` pieces of seq written (stream) or read (sread). */
void nx_cseg_stream(nx_cseg *s, int read, uint64_t seq, uint32_t pieces);

/* Reads len bytes at address `from` of process pid into to: 0, or
 * NEXAR_ERR_PEER_LOST (the process is gone), NEXAR_ERR_PROTOCOL (the
 * address it published is not readable), error text set. */
int nx_cseg_read(pid_t pid, void *to, uint64_t from, size_t len);
/* Marks this rank done reading sequence seq (single copy). */
void nx_cseg_leave(nx_cseg *s, uint64_t seq);

static inline uint8_t *nx_cseg_buf(const nx_cseg *s, uint32_t r, uint64_t seq) {
  return s->data + ((size_t)r * 2 + (seq & 1)) * s->slot;
}

static inline nx_cseg_bent *nx_cseg_bentry(const nx_cseg *s, uint32_t r, uint64_t seq) {
  return (nx_cseg_bent *)s->bring + (size_t)r * NX_CSEG_BDEPTH + seq % NX_CSEG_BDEPTH;
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

/* Publishing: a store to arr[i].arrive, msg or entered, then the doorbell. */
void nx_cseg_arrive(nx_cseg *s, uint64_t seq, const nx_cseg_sig *sig);
void nx_cseg_mark_msg(nx_cseg *s, uint64_t seq);
void nx_cseg_enter(nx_cseg *s, uint64_t seq);
/* Root: broadcast seq (len <= NX_CSEG_BCAST_MAX bytes) into our entry of
 * it, which the caller made sure every reader is done with. */
void nx_cseg_bpublish(nx_cseg *s, uint64_t seq, const nx_cseg_sig *sig, const void *data,
                      size_t len);

/* What rank r's words say about sequence seq, pure: 0 not yet, 1 arrived,
 * 2 it took seq another way (msg: the message path; entered past seq: it
 * left seq without arriving, a broadcast ring or a failure), a mismatch;
 * NEXAR_ERR_PROTOCOL impossible (an arrival at a sequence it has not
 * begun). entered0 is read before arrive, entered1 after it (a rank stores
 * entered before it arrives, and arrives before it begins the next). */
int nx_cseg_arrival(uint64_t arrive, uint64_t msg, uint64_t entered0, uint64_t entered1,
                    uint64_t seq);

/* What root's entry of broadcast seq says, the same way: 1 it holds seq, 2
 * the root took seq another way (it arrived on the buffers, took messages,
 * or left seq without writing the entry), 0 not yet, PROTOCOL a value the
 * root cannot have written (a broadcast it has not begun). */
int nx_cseg_bentry_state(uint64_t held, uint64_t arrive, uint64_t msg, uint64_t entered0,
                         uint64_t entered1, uint64_t seq);

/* Waits until pred(arg, &who) returns non-zero (1 ready, < 0 an error that
 * ends the wait), driving the engine like a request wait, for collective k.
 * who: the rank pred waits for (to sleep on its doorbell). It polls the
 * engine's spin plus extra_ns before it sleeps; while it spins, its looks
 * are gap_ns apart at least (0: a pause apart), so that a waiter for a rank
 * that stores the word it reads at every call does not take that word's
 * line from it at every call. Returns 0, pred's
 * error, k's failure (peer lost, aborted, a mismatch seen by a peer), or
 * TIMEOUT after timeout_ms, naming what (the operation) and step (what it
 * waited for). */
struct nx_coll;
int nx_cseg_wait(nx_cseg *s, struct nx_coll *k, int (*pred)(void *arg, uint32_t *who), void *arg,
                 uint64_t extra_ns, uint64_t gap_ns, uint32_t timeout_ms, const char *what,
                 const char *step);

#endif
