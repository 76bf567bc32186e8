/* Internal to src/collective: one collective call (a job) and the algorithms
 * that build its schedule. A job is validated on the calling thread, started
 * there with nx_coll_begin (which fixes its place in the order), its
 * schedule built (proto/sched.h: steps as data, in the program order a
 * blocking algorithm would follow) and then executed by run.c as messages
 * complete, on whichever thread drives the engine; no collective, blocking
 * or _nb, holds a thread of its own. */
#ifndef NX_COLLECTIVE_COLL_H
#define NX_COLLECTIVE_COLL_H

#include "collective/algo.h"
#include "runtime/coll_port.h"
#include "proto/sched.h"

#define NX_JOB_SCRATCH 8

typedef struct nx_job {
  int kind; /* nx_coll_op */
  nexar_client *c;
  nx_coll *k;
  uint32_t rank, world;
  void *buf; /* in-place ops */
  const void *send;
  void *recv;
  size_t count; /* elements (per block for gather-type ops; total for bucketed) */
  nexar_dtype dt;
  nexar_op op;
  size_t es;
  uint32_t root;
  const nexar_bucket *buckets; /* bucketed (for _nb: bucket_copy) */
  size_t nbuckets;
  nexar_bucket *bucket_copy;
  /* Variable-count collectives: per-rank counts and displacements in
   * elements, displacements never NULL once validated (packed ones filled
   * in). Send side: all_to_all_v, scatter_v (root); receive side:
   * all_gather_v, reduce_scatter_v (packed), all_to_all_v, gather_v (root).
   * count holds the single count: all_gather_v's and gather_v's send_count,
   * scatter_v's recv_count. */
  const size_t *scounts, *sdispls, *rcounts, *rdispls;
  size_t *vmem;        /* owned copy of those arrays (freed with the job) */
  uint32_t color, key; /* split */
  nexar_client **out;  /* split */
  nexar_request *req;  /* _nb */
  void *scratch[NX_JOB_SCRATCH];
  size_t scratch_cap[NX_JOB_SCRATCH]; /* bytes of each (nx_job_alloc) */
  uint8_t sink[8];                    /* receive target of tokens (lives as long as the job) */
  nx_algo_params params;              /* defaults + the communicator's config */
  nx_sched sched;                     /* what the algorithm built */
  /* device buffers (the communicator's adapter; NULL: host memory, also
   * for the library's own host calls: host_only) */
  const nexar_device_adapter *ad;
  int host_only;
  int no_seg;     /* the segment's own set-up (segcoll.c): the message path, no attempt */
  int seg;        /* how it takes the segment: nx_segcoll_eligible's answer (NX_SEG_*) */
  int seg_nowait; /* through the segment without waiting for the others (nx_segcoll_nowait) */
  int seg_inline; /* contributions in the arrival's line (nx_segcoll_inline) */
  /* NX_SEG_CHUNKS of all_gather (reduce_scatter): bytes from one rank's
   * block to the next in recv (send), the whole call's block; 0 when they
   * are count * es apart */
  size_t stride;
} nx_job;

/* Scratch memory owned by the job, freed only after nx_coll_end (so a
 * receive still posted when a schedule fails never lands in freed memory).
 * NULL after nx_fail(NOMEM). */
void *nx_job_alloc(nx_job *j, size_t bytes);
const char *nx_job_name(const nx_job *j);

/* Schedule builders, written like blocking code: a posted send or receive
 * is a step; waiting for it orders every later step after it. A zero-length
 * message is never sent nor expected (both sides compute the same length);
 * a SIZE_MISMATCH becomes MISMATCH when it runs. They return 0 (running out
 * of memory is reported when the schedule starts), so algorithms keep their
 * error checks for the day a builder can fail. */
int nx_j_isend(nx_job *j, uint32_t dest, uint32_t round, uint32_t seg, const void *p, size_t len,
               nx_sid *out);
int nx_j_irecv(nx_job *j, uint32_t src, uint32_t round, uint32_t seg, void *p, size_t len,
               nx_sid *out);
/* As nx_j_isend / nx_j_irecv, but an empty message is still a message (the
 * variable-count collectives, whose receivers learn lengths from frames). */
int nx_j_isend0(nx_job *j, uint32_t dest, uint32_t round, uint32_t seg, const void *p, size_t len,
                nx_sid *out);
int nx_j_irecv0(nx_job *j, uint32_t src, uint32_t round, uint32_t seg, void *p, size_t len,
                nx_sid *out);
/* Every later step waits for *r (0: nothing); clears it. */
int nx_j_wait(nx_job *j, nx_sid *r);
int nx_j_waitall(nx_job *j, nx_sid *r, size_t n);
/* Local steps on buffers (run when everything waited before is done). */
void nx_j_reduce3(nx_job *j, void *dst, const void *a, const void *b, size_t count);
void nx_j_reduce(nx_job *j, void *dst, const void *src, size_t count);
void nx_j_copy(nx_job *j, void *dst, const void *src, size_t bytes);
void nx_j_fill_identity(nx_job *j, void *dst, size_t count);
/* Local work that reads received data: fn(j) once everything waited before
 * is done; its error fails the collective. */
void nx_j_call(nx_job *j, int (*fn)(void *job));
/* Exchange: send to dest and receive from src (both optional), wait both. */
int nx_j_sendrecv(nx_job *j, uint32_t dest, const void *sp, size_t slen, uint32_t src, void *rp,
                  size_t rlen, uint32_t round, uint32_t seg);

/* Algorithms: each builds its steps into j->sched and returns 0 or an
 * error (with the thread's error text set). */
int nx_sync(nx_job *j, uint32_t round0); /* dissemination, 1-byte tokens */
int nx_run_barrier(nx_job *j);
int nx_allreduce_buf(nx_job *j, void *buf, size_t count);
int nx_run_allreduce(nx_job *j);
int nx_run_allreduce_rs_ag(nx_job *j);
int nx_run_bucketed(nx_job *j);
int nx_run_reduce_scatter(nx_job *j);
int nx_run_reduce(nx_job *j);
int nx_run_broadcast(nx_job *j);
int nx_allgather_raw(nx_job *j, const void *send, void *recv, size_t count, size_t es);
int nx_run_allgather(nx_job *j);
int nx_run_gather(nx_job *j);
int nx_run_scatter(nx_job *j);
int nx_run_alltoall(nx_job *j);
int nx_run_scan(nx_job *j);
int nx_run_split(nx_job *j);
/* vcoll.c: the variable-count collectives. */
int nx_run_allgather_v(nx_job *j);
int nx_run_reduce_scatter_v(nx_job *j);
int nx_run_alltoall_v(nx_job *j);
int nx_run_gather_v(nx_job *j);
int nx_run_scatter_v(nx_job *j);
/* 1 for the variable-count kinds. */
int nx_kind_is_v(int kind);
/* Checks a variable-count job's arguments (j->es set) and replaces its
 * count/displs arrays by normalised copies in j->vmem (allocated here, also
 * on failure: the caller frees it). 0 or an error (thread's text set). */
int nx_validate_v(nx_job *j, uint32_t rank, uint32_t world);
/* The signature count of a validated job: a hash of the shared counts. */
uint64_t nx_v_sig_count(const nx_job *j, uint32_t world);

/* Ring reduce-scatter (+ allgather) over count elements split in world chunks.
 * in: the input vector; inplace: also the output (allreduce, both phases);
 * otherwise out receives chunk `rank` (reduce_scatter) and in is not written.
 * seg_elems: segment length, window: receives posted ahead. */
int nx_ring_run(nx_job *j, const void *in, void *inplace, void *out, size_t count, size_t seg_elems,
                unsigned window);
/* The ring's reduce-scatter with chunk c = [offs[c], offs[c] + counts[c])
 * (elements) instead of an even split: reduce_scatter_v. */
int nx_ring_run_v(nx_job *j, const void *in, void *out, const size_t *counts, const size_t *offs,
                  size_t seg_elems, unsigned window);

/* run.c: a job's life outside its call. nx_run_new copies j (with its
 * buckets) into a run with a pending request; after nx_coll_begin on it,
 * either nx_run_start (builds, starts and first advances the schedule;
 * returns the request that completes when the collective ends) or, for a
 * call refused after it began, nx_run_end_now then nx_run_discard. */
int nx_run_new(const nx_job *j, nx_job **out);
nexar_request *nx_run_start(nx_job *j);
int nx_run_end_now(nx_job *j, int rc);
void nx_run_discard(nx_job *j);

/* devstage.c: the host staging of a job's device buffers (see there). */
typedef struct nx_dstage nx_dstage;
typedef struct nx_dstage_cbs {
  void (*wake)(void *arg); /* a copy finished (any thread): advance the run */
  void (*hold)(void *arg); /* a copy thread takes a reference to the run */
  void (*drop)(void *arg); /* and drops it */
  void *arg;
} nx_dstage_cbs;
/* After the build: shadows j's device regions and rewrites the schedule's
 * pointers into them. *out NULL when j has no adapter or no device bytes.
 * 0, NOMEM, or PROTOCOL (text set). */
int nx_dstage_new(nx_job *j, const nx_dstage_cbs *cb, nx_dstage **out);
/* The executor's gate and finish hooks (proto/sched.h). */
int nx_dstage_gate(nx_dstage *d, const nx_sched *s, nx_step *st);
void nx_dstage_finish(nx_dstage *d, const nx_sched *s, const nx_step *st);
/* Polls events, copies ahead; stop: start no more copies (failure or end).
 * Returns the number of copies outstanding (free only at 0); *loaded (may
 * be NULL) is set to the number of segments this call found loaded, which
 * may open a gate: the caller advances the schedule again (no one else
 * will: an event's completion wakes nobody). */
int nx_dstage_poll(nx_dstage *d, int stop, uint64_t now, int *loaded);
int nx_dstage_rc(nx_dstage *d);
const char *nx_dstage_why(const nx_dstage *d);
int nx_dstage_async(const nx_dstage *d);
/* 1 when stopped with copies pending for over 10 s (then leak, not free) */
int nx_dstage_stuck(const nx_dstage *d, uint64_t now);
void nx_dstage_free(nx_dstage *d);

/* An all_gather of host buffers even when the communicator has an adapter
 * (the compressed allreduce's exchange). */
int nx_all_gather_host(nexar_client *c, const void *send, void *recv, size_t count, nexar_dtype dt);

/* Builds the whole schedule of a started (or simulated) job: the mismatch
 * token or synchronisation of coll_api.c around the algorithm. */
int nx_job_build(nx_job *j);
/* A blocking collective call of job j from inside the library (validated,
 * ordered and waited for like a public one). */
int nx_coll_call(nx_job *j);

/* segcoll.c: small blocking collectives through the communicator's shared-
 * memory segment. prepare: at every blocking collective call, before it
 * begins (attempts the set-up at fixed points of the order; never fails the
 * call). eligible: the begun job j takes the segment. run: runs it (the
 * caller ends the collective with the result). mark: j took the message path
 * (ranks waiting in the segment for it see the mismatch). */
int nx_segcoll_prepare(nexar_client *c);
enum {
  NX_SEG_NONE = 0, /* the message path */
  NX_SEG_BUFFERS,  /* through the segment's buffers */
  NX_SEG_SINGLE,   /* single copy from the callers' buffers (cseg.h) */
  NX_SEG_CHUNKS,   /* a reduction above NX_CSEG_RCHUNK or an all_gather above
                    * the buffers: consecutive collectives of nx_segcoll_chunk
                    * elements (a vector's, or each block's) each, through the
                    * buffers */
  NX_SEG_BCAST,    /* a small broadcast through its root's ring (cseg.h) */
  NX_SEG_STREAM,   /* streamed through its writers' buffers (segchoice.c, streamed);
                    * between two ranks the copies, and a broadcast between any,
                    * may take single copy instead, call by call
                    * (nx_segcoll_either) */
};
/* Pure (every rank of a well-formed call chooses the same); the caller keeps
 * the answer in j->seg. (segchoice.c) */
int nx_segcoll_eligible(const nx_job *j);
/* Bytes rank r publishes for job j (its whole contribution), or SIZE_MAX
 * if j's kind never takes the segment. Pure. */
size_t nx_segcoll_published(const nx_job *j, uint32_t n, int is_root);
/* NX_SEG_CHUNKS: elements per collective (the last one takes the rest). */
size_t nx_segcoll_chunk(const nx_job *j);
int nx_segcoll_run(nx_job *j, const nx_coll_sig *sig);
void nx_segcoll_mark(nx_job *j);
/* Does j, which takes the segment, only write (a broadcast's or scatter's
 * root)? Then it returns once its data is out; the readers check its
 * signature on arrival, it checks theirs at its next collective. */
int nx_segcoll_nowait(const nx_job *j);
/* Does j publish every contribution in its arrival's cache line
 * (runtime/cseg.h, NX_CSEG_INLINE)? Only through the buffers (NX_SEG_BUFFERS:
 * the other paths never read it); decided by the most any rank publishes,
 * so alike on every rank. Pure. */
int nx_segcoll_inline(const nx_job *j);
/* Does j choose at run time between its way and single copy (single copy
 * allowed; a streamed job of two ranks, a streamed broadcast, or an
 * all_gather or all_to_all through the buffers from NX_SEG_EITHER_MIN
 * published)? Then nx_segcoll_decider's rank picks the way by the times it
 * measured (proto/pick.h) and says which in its arrival. Pure. */
int nx_segcoll_either(const nx_job *j);
/* The rank that decides for such a job: one that reads the others' data
 * (a rooted job's: the rank after the root), so its time is its whole
 * transfer's. Pure. */
uint32_t nx_segcoll_decider(const nx_job *j);
/* Tests only: the way such jobs take, -1 measured (the default), 0
 * streamed, 1 single copy, 2 each in turn. Read by the deciding rank alone. */
extern int nx_segcoll_force_way;

#endif
