/* Which collectives take the communicator's shared-memory segment, and how
 * (coll.h, NX_SEG_*; segcoll.c runs them): pure functions of the call's
 * arguments, the member count and the knobs, so every rank of a
 * well-formed call chooses alike. */
#include <stdint.h>

#include "collective/algo.h"
#include "collective/coll.h"
#include "runtime/comm.h"
#include "runtime/cseg.h"

size_t nx_segcoll_published(const nx_job *j, uint32_t n, int is_root) {
  size_t blk = j->count * j->es;
  switch (j->kind) {
  case NX_COLL_BARRIER:
    return 0;
  case NX_COLL_ALL_REDUCE:
    return nx_algo_force_allreduce >= 0 ? SIZE_MAX : blk;
  case NX_COLL_REDUCE:
    return blk;
  case NX_COLL_BROADCAST:
    return nx_algo_force_broadcast >= 0 ? SIZE_MAX : is_root ? blk : 0;
  case NX_COLL_ALL_GATHER:
    return nx_algo_force_allgather >= 0 ? SIZE_MAX : blk;
  case NX_COLL_GATHER:
    return nx_algo_force_gather >= 0 ? SIZE_MAX : blk;
  case NX_COLL_SCATTER:
    return nx_algo_force_gather >= 0 ? SIZE_MAX : is_root ? blk * n : 0;
  case NX_COLL_REDUCE_SCATTER:
  case NX_COLL_ALL_TO_ALL:
    return blk * n;
  default:
    return SIZE_MAX;
  }
}

/* Single copy (cseg.h): a collective that only copies, too large for the
 * segment's buffers, or between two ranks above NX_CSEG_SINGLE_MIN2.
 * (Reductions above them keep the message path's pipelined ring: a
 * single-copy all_reduce, each rank reducing its share from the others'
 * buffers, measured slower at 4 MiB, n = 2 and 8.) Pure, as nx_segcoll_published. */
static int single_copy(const nx_job *j, const nx_cseg *s) {
  _Static_assert(NX_CSEG_SINGLE_MIN2 <= (64u << 10), "below the smallest buffer (nx_cseg_slot)");
  /* (a broadcast above the buffers streams: streamed) */
  int copies = j->kind == NX_COLL_SCATTER || j->kind == NX_COLL_GATHER ||
               j->kind == NX_COLL_ALL_GATHER || j->kind == NX_COLL_ALL_TO_ALL;
  size_t most = nx_segcoll_published(j, s->n, 1);
  /* all_to_all of three or four ranks from a full buffer on: nexar-perf
   * all_to_all --procs n=4, 1 MiB published, 3 alternating runs: 248-268
   * us through the buffers, 155-186 by single copy (512 KiB: 71-77
   * against 86-104, so below it the buffers stay; at n = 8 single copy
   * was slower at 1 MiB, 590-680 against 420-480) */
  size_t above = s->n == 2                                    ? NX_CSEG_SINGLE_MIN2
                 : j->kind == NX_COLL_ALL_TO_ALL && s->n <= 4 ? s->slot - 1
                                                              : s->slot;
  return s->cma && copies && most != SIZE_MAX && most > above;
}

/* Bytes of a rank's block each all_gather collective of NX_SEG_CHUNKS
 * takes: a buffer, and no more than NX_CSEG_REDUCE_MAX read in all. */
static size_t chunk_bytes(uint32_t n) {
  size_t b = nx_cseg_slot(n);
  return b * n > NX_CSEG_REDUCE_MAX ? NX_CSEG_REDUCE_MAX / n : b;
}

/* Bytes of a reduction's vector or of an all_gather's or reduce_scatter's
 * block each chunk takes (reductions: cseg.h, NX_CSEG_RCHUNK, within a
 * buffer; a reduce_scatter's chunk holds a piece of every block, whole
 * cache lines of it: a third of 512 KiB is not). */
static size_t part_bytes(const nx_job *j, uint32_t n) {
  return j->kind == NX_COLL_ALL_GATHER       ? chunk_bytes(n)
         : j->kind == NX_COLL_REDUCE_SCATTER ? (nx_cseg_rchunk(n) / n) & ~(size_t)63
                                             : nx_cseg_rchunk(n);
}

size_t nx_segcoll_chunk(const nx_job *j) {
  return part_bytes(j, j->c->size) / j->es;
}

/* A reduction above NX_CSEG_RCHUNK, cut into collectives of a chunk each.
 * Measured at n = 2 on 2 cores (nexar-perf all_reduce --procs, best of 3
 * against the message path's pipelined ring, chunks of a 1 MiB buffer
 * then): 4 MiB 0.77 ms instead of 1.5, 64 MiB 14 ms instead of 26 (2 MiB
 * the same); chunks of 512 KiB halved that again (cseg.h). Pure. */
static int chunks(const nx_job *j, uint32_t n) {
  if (j->es > part_bytes(j, n)) return 0;
  /* all_gather likewise, each chunk read by every rank from every rank, as
   * single copy reads it, up to NX_CSEG_GATHER_CHUNKS buffers a rank:
   * measured at n = 2 (alternating runs), 4 MiB in all 286 -> 165 us; at
   * 16 and 64 MiB two copies through the segment and one by
   * process_vm_readv were within noise of each other, the data no longer in
   * cache. (all_to_all in chunks of slot / n per destination measured no
   * faster at 4 or 64 MiB: it keeps single copy.) Not between two ranks
   * any more: since waits poll for the bytes they wait for
   * (segop.extra_ns), single copy measured faster there from 16 KiB up
   * (cseg.h, NX_CSEG_SINGLE_MIN2), 8 MiB in all 1.08 -> 0.76 ms, 4 MiB 508
   * -> 463 us. */
  if (j->kind == NX_COLL_ALL_GATHER)
    return nx_algo_force_allgather < 0 && n != 2 &&
           j->count * j->es <= NX_CSEG_GATHER_CHUNKS * chunk_bytes(n);
  if (n > NX_CSEG_CHUNK_RANKS) return 0;
  if (j->kind == NX_COLL_ALL_REDUCE) return nx_algo_force_allreduce < 0;
  /* reduce_scatter: harness n = 2, against one buffer up to 1 MiB in all
   * and the message path above: 1 MiB 111-117 -> 43-45 us, 4 MiB 234-605
   * -> 179-182 us, 64 MiB 8.6-9.7 -> 5.0-5.1 ms */
  return j->kind == NX_COLL_REDUCE || j->kind == NX_COLL_REDUCE_SCATTER;
}

/* A broadcast above NX_CSEG_STREAM_MIN streams through its root's buffer
 * (cseg.h, NX_CSEG_PIECE), whatever the ranks. Measured with the harness
 * of bench/compare.sh (broadcast, 3 alternating runs, against single copy
 * between two ranks and whole buffers or chunks of a buffer from three
 * on): n = 2: 64 KiB 7.2-8.0 -> 3.1-3.3 us, 1 MiB 73-75 -> 39-41, 4 MiB
 * 325-359 -> 141, 16 MiB 3.1-3.4 -> 0.63-0.66 ms, 64 MiB 16.3-16.7 ->
 * 4.1-4.6 ms (16 KiB: the buffers 1.43-1.53, streamed 1.51-1.77 us); n = 4:
 * 1 MiB 190 -> 81 us, 4 MiB 0.80-0.84 -> 0.35-0.43 ms, 64 MiB 14.4 -> 8.6
 * ms; n = 8: 4 MiB 1.25-1.35 -> 0.81-1.13 ms, 64 MiB 22-23 -> 18.5-19 ms.
 * Pieces of 16 KiB to 256 KiB measured alike from 64 KiB up (16 KiB
 * slower above 1 MiB). Between two ranks the collectives that only copy
 * stream too, each rank that sends through its own buffer, above
 * NX_CSEG_STREAM_MIN bytes a rank sends, against single copy (3
 * alternating runs, the harness for all_gather and all_to_all, the sizes
 * in all; nexar-perf --procs for gather and scatter, the root's bytes):
 * all_gather 64 KiB 6.0-6.1 -> 3.1-3.2 us, 1 MiB 44-51 -> 41-42, 4 MiB
 * 211-214 -> 188-200, 16 MiB 1.30-1.37 -> 0.83-0.89 ms, 64 MiB 6.5-7.3 ->
 * 5.3-5.6 ms; all_to_all 64 KiB 5.9-6.3 -> 3.0-3.2 us, 4 MiB 190-210 ->
 * 183-190, 64 MiB 7.2-7.5 -> 5.1-5.5 ms; gather 64 KiB 6.6-7.2 -> 2.0-2.7
 * us, 4 MiB 155-181 -> 131-149, 64 MiB 6.5-6.9 -> 3.5-3.6 ms. A scatter's
 * root copies its own block too, which single copy does while the reader
 * reads: streamed only up to NX_CSEG_SCATTER_STREAM_MAX a rank (64 KiB
 * in all 5.5-6.0 -> 1.9-3.1 us, 256 KiB 8.6-9.1 -> 6.6-7.5; 1 MiB
 * 21.4-21.7 against 24.6-28.2 streamed). Between two ranks these measured
 * in the machine's faster state; in its other streaming is 3-8 times
 * slower (64 KiB-1 MiB), so there each call may take single copy instead
 * (nx_segcoll_either). Pure. */
static int streamed(const nx_job *j, uint32_t n) {
  size_t blk = j->count * j->es;
  if (blk <= NX_CSEG_STREAM_MIN || blk / NX_CSEG_PIECE >= UINT32_MAX) return 0;
  switch (j->kind) {
  case NX_COLL_BROADCAST:
    return nx_algo_force_broadcast < 0;
  case NX_COLL_ALL_GATHER:
    return n == 2 && nx_algo_force_allgather < 0;
  case NX_COLL_GATHER:
    return n == 2 && nx_algo_force_gather < 0;
  case NX_COLL_SCATTER:
    return n == 2 && nx_algo_force_gather < 0 && blk <= NX_CSEG_SCATTER_STREAM_MAX;
  case NX_COLL_ALL_TO_ALL:
    return n == 2;
  default:
    return 0;
  }
}

int nx_segcoll_eligible(const nx_job *j) {
  nexar_client *c = j->c;
  if (!c->cseg || j->ad || c->size < 2) return NX_SEG_NONE;
  if (streamed(j, c->size)) return NX_SEG_STREAM;
  if (j->kind == NX_COLL_BROADCAST && nx_algo_force_broadcast < 0 &&
      c->size <= NX_CSEG_BCAST_RANKS && j->count * j->es <= NX_CSEG_BCAST_MAX)
    return NX_SEG_BCAST;
  size_t most = nx_segcoll_published(j, c->size, 1);
  size_t cut = j->kind == NX_COLL_ALL_GATHER ? nx_cseg_slot(c->size) : nx_cseg_rchunk(c->size);
  if (most != SIZE_MAX && most > cut && chunks(j, c->size)) return NX_SEG_CHUNKS;
  if (single_copy(j, c->cseg)) return NX_SEG_SINGLE; /* any size */
  /* the largest contribution of any rank decides, so all ranks agree */
  if (most == SIZE_MAX || most > nx_cseg_slot(c->size)) return NX_SEG_NONE;
  size_t reads = j->kind == NX_COLL_REDUCE_SCATTER ? most : most * c->size;
  int reduces = j->kind == NX_COLL_ALL_REDUCE || j->kind == NX_COLL_REDUCE ||
                j->kind == NX_COLL_REDUCE_SCATTER;
  return !reduces || reads <= NX_CSEG_REDUCE_MAX ? NX_SEG_BUFFERS : NX_SEG_NONE;
}

/* Between two ranks, the streamed copies (and a streamed broadcast between
 * any number: README, design, shared-memory segment) may read by
 * single copy instead: which is faster depends on where the two CPUs are
 * at the moment, so the decider measures both (proto/pick.h). This VM, 2
 * vCPUs of an AMD EPYC, has two such states, and a process keeps its
 * state for seconds. all_to_all, a test program alternating the two ways
 * call by call (medians of 60 calls a size, 20 runs): in runs where a
 * one-way 8 B ping-pong took 0.15-0.19 us, 1 MiB a rank took 69-73 us
 * streamed and 102-104 by single copy; where it took 0.37-0.44, 493-595
 * against 107-191 (64 KiB 34-45 against 8-14 us, 16 MiB 6.0-10.6 against
 * 4.7-6.9 ms). bench/dirty_lines.c shows why without the library: a
 * reader of lines its writer has just written takes each from the
 * writer's cache, 8-10 times slower in the second state (1 MiB); lines
 * written long before (single copy's source) are not. */
/* From three ranks on, all_gather and all_to_all through the buffers
 * (two copies, the writer's lines read from its cache) meet the same
 * states: harness all_to_all n = 4, 64 KiB and 256 KiB a rank sends in
 * all, 6 alternating runs: through the buffers 18-20 and 34-39 us in
 * five, 54 and 173 in one; by single copy 29-33 and 58-72 in all; Open
 * MPI's default 31-40 and 64-69. From this many bytes a rank publishes
 * they choose too. */
#define NX_SEG_EITHER_MIN (64u << 10)

int nx_segcoll_either(const nx_job *j) {
  nx_cseg *s = j->c->cseg;
  if (!s->cma) return 0;
  if (j->seg == NX_SEG_STREAM) return j->c->size == 2 || j->kind == NX_COLL_BROADCAST;
  return j->seg == NX_SEG_BUFFERS &&
         (j->kind == NX_COLL_ALL_GATHER || j->kind == NX_COLL_ALL_TO_ALL) &&
         nx_segcoll_published(j, j->c->size, 1) >= NX_SEG_EITHER_MIN;
}

uint32_t nx_segcoll_decider(const nx_job *j) {
  switch (j->kind) {
  case NX_COLL_GATHER:
    return j->root;
  case NX_COLL_SCATTER:
  case NX_COLL_BROADCAST:
    return (j->root + 1) % j->c->size;
  default:
    return 0;
  }
}

int nx_segcoll_force_way = -1;

int nx_segcoll_inline(const nx_job *j) {
  return j->seg == NX_SEG_BUFFERS && nx_segcoll_published(j, j->c->size, 1) <= NX_CSEG_INLINE;
}

int nx_segcoll_nowait(const nx_job *j) {
  /* A root that only writes, its readers' bits checked later (one each).
   * Not in chunks: a root still in its call would wait for a reader that
   * failed an early chunk to begin its next collective, which that
   * reader's caller may hold back until the root returns; waiting for the
   * arrivals it finds the mismatch itself, and still writes chunk i + 1
   * while the readers copy chunk i. */
  return (j->kind == NX_COLL_BROADCAST || j->kind == NX_COLL_SCATTER) && j->c->rank == j->root &&
         j->c->size <= NX_CSEG_BCAST_RANKS && j->seg != NX_SEG_SINGLE && j->seg != NX_SEG_CHUNKS &&
         j->seg != NX_SEG_STREAM;
}
