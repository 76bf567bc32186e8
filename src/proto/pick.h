/* Choosing between two ways of doing the same thing by the times they
 * took, per size class: a collective between ranks on one host either
 * streams through a shared buffer or is read by single copy
 * (collective/segchoice.c, nx_segcoll_either), and which is faster depends
 * on where the hypervisor put the two CPUs at the moment: streaming took
 * 0.7-0.8x of single copy's time in one state and 3-6x in the other (all_to_all
 * of 256 KiB-1 MiB a rank).
 *
 * Each class keeps a smoothed time per MiB for each way. It takes the way
 * whose time is lower and tries the other after NX_PICK_EVERY_MIN of its
 * calls; each try that loses doubles that wait, up to NX_PICK_EVERY_MAX,
 * so a loser costs little. A try (and a way's first measurement) is
 * NX_PICK_TRY calls in a row, and counts the fastest: the first call after
 * a change of way pays for the change, which a way taken for a while does
 * not (presumably the other rank still finishing its last call the other
 * way, and this way's buffers cold in the caches; measured, not proven).
 * One call each, the harness's all_gather of 256 KiB between two processes
 * measured single copy's tries at 24-44 us (median 31) against streaming's
 * 20-22, and stayed streamed in most runs, though single copy taken for a
 * whole run took 15-18. Calls that overlap (a way asked for again before
 * the last call's time is told, as rendezvous sends do) take the try's way
 * until NX_PICK_TRY of them are told. A change of the machine that slows
 * the way taken is found within a few calls (its time passes the other's);
 * one that speeds up the other way, at its next try (NX_PICK_EVERY_MAX
 * calls at most).
 *
 * Pure: the caller measures and reports. Not thread-safe: one thread at a
 * time uses a given nx_pick. */
#ifndef NX_PROTO_PICK_H
#define NX_PROTO_PICK_H

#include <stdint.h>

/* Classes by the power of two of the bytes: class k > 0 holds 2^(k + 10)
 * to 2^(k + 11) - 1, class 0 all below 2 KiB, the last all from 32 MiB. */
#define NX_PICK_CLASSES 16u
#define NX_PICK_EVERY_MIN 16u
#define NX_PICK_EVERY_MAX 1024u
#define NX_PICK_TRY 2u

typedef struct nx_pick_class {
  uint64_t est[2]; /* smoothed ns per MiB of each way; 0: not measured yet */
  uint32_t since;  /* calls since the other way was last tried */
  uint32_t every;  /* try the other way after this many calls */
  uint64_t tmin;   /* a try: the fastest of its calls so far (ns per MiB) */
  uint8_t best;    /* the way taken */
  uint8_t tway;    /* a try: its way */
  uint8_t tleft;   /* a try: its calls still to come (0: none going on) */
} nx_pick_class;

typedef struct nx_pick {
  nx_pick_class c[NX_PICK_CLASSES];
} nx_pick;

/* An nx_pick that has measured nothing (as zeroed memory is, too). */
void nx_pick_init(nx_pick *p);
/* The way (0 or 1) to take for a call of `bytes`: each way NX_PICK_TRY
 * times first, then the faster, and the other at times. */
int nx_pick_way(nx_pick *p, uint64_t bytes);
/* A call of `bytes` taken `way` took ns. */
void nx_pick_done(nx_pick *p, uint64_t bytes, int way, uint64_t ns);

#endif
