/* One rank's state in a collective through the communicator's
 * shared-memory segment, and the steps that segcoll.c (publishing,
 * reading, reducing, single copy) and segstream.c (streaming, and the
 * two-rank choice between it and single copy) share. Private to those
 * two files. */
#ifndef NX_COLLECTIVE_SEGOP_H
#define NX_COLLECTIVE_SEGOP_H

#include <stddef.h>
#include <stdint.h>

#include "collective/coll.h"
#include "runtime/cseg.h"

typedef struct nx_segop {
  nx_job *j;
  nx_cseg *s;
  uint64_t seq;
  nx_cseg_sig sig;
  uint32_t next;     /* the first rank not yet seen */
  int cma;           /* single copy */
  int inl;           /* contributions inline in the arrivals (NX_CSEG_INLINE) */
  uint32_t need;     /* streamed: pieces a wait waits for (by shares: 1) */
  uint32_t from;     /* streamed: the rank whose pieces (or share) we read */
  uint64_t extra_ns; /* the others' copies of their parts take this long */
  int extra_set;     /* extra_ns found (nx_segop_wait) */
  uint32_t looks;    /* a waiter's looks that found nothing (NX_CSEG_PAST_EVERY) */
} nx_segop;

/* Our own block of an all_gather or all_to_all, where it does not overlap
 * what it is copied to (an in-place call copies nothing, a partial overlap
 * needs nx_segop_copy_own's memmove); to == NULL otherwise. A streamed reader
 * copies it a piece at a time while the writer's next piece is not there
 * yet, so that its waits do that work (harness n = 2, 3 alternating runs
 * against copying it at the end: all_gather 4 MiB 186 -> 178-183 us,
 * all_to_all 1 MiB 42-46 -> 42-44, 4 MiB 199-201 -> 191-199). */
typedef struct {
  const uint8_t *from;
  uint8_t *to;
  size_t len, done;
  int nt; /* copied with non-temporal stores (NX_CSEG_NT_MIN) */
} nx_own_part;

/* Waits for pred on o (nx_cseg_wait), polling through the copy time of
 * o's bytes before it sleeps; step names what it waits for in its errors. */
int nx_segop_wait(nx_segop *o, int (*pred)(void *arg, uint32_t *who), const char *step);
/* Predicate: every other rank arrived at o's sequence with o's signature
 * (its `how` left out); MISMATCH or PROTOCOL otherwise. */
int nx_segop_arrived(void *arg, uint32_t *who);
/* A word of rank r that no rank following the protocol writes (what: an
 * impossible sequence, or way): r is dropped, PROTOCOL returned. */
int nx_segop_impossible(const nx_segop *o, uint32_t r, const char *what);
/* Predicate: rank o->from announced o->need in its stream word of o's
 * parity (streamed: pieces it wrote; all_reduce by shares: 1, its share). */
int nx_segop_written(void *arg, uint32_t *who);
/* Single copy, once every rank arrived: read, say so, wait until every
 * rank has read ours. */
int nx_segop_single_copy(nx_segop *o);
/* Our own block, where it does not overlap where it goes (to == NULL
 * otherwise); up to `most` more bytes of it (SIZE_MAX: the rest). */
nx_own_part nx_segop_own_parts(const nx_segop *o);
void nx_own_step(nx_own_part *w, size_t most);
/* Our own block of a collective that only copies, from send to recv. */
void nx_segop_copy_own(const nx_segop *o);

/* Where nx_segcoll_either says, the way this rank takes, in o->sig.how (0:
 * streamed or through the buffers, 1: single copy). The decider
 * (nx_segcoll_decider) picks it before it arrives (proto/pick.h; a test may
 * force it) and returns its clock's start, for nx_segop_measured at the
 * end. */
uint64_t nx_segop_pick(nx_segop *o);
/* Another rank learns it from the decider's arrival, which it waits for:
 * through the buffers before it publishes and arrives itself (the decider,
 * rank 0, depends on no argument), streamed after its own arrival. 0, a
 * wait's error, or PROTOCOL for a way other than 0 or 1. */
int nx_segop_learn(nx_segop *o);
/* The decider's call, begun at t0 (0: not the decider), ended well: its
 * time counts for the way it took. */
void nx_segop_measured(nx_segop *o, uint64_t t0);
/* A streamed job (NX_SEG_STREAM) after step 1, from src (segstream.c). */
int nx_segop_stream(nx_segop *o, const void *src);
/* Bytes of its buffer a streamed job's writer uses. */
size_t nx_segop_stream_bytes(const nx_cseg *s, const nx_job *j);

#endif
