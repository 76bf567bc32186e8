/* Unit tests of the pure algorithm-choice and segmentation functions: both
 * neighbours of a pipelined transfer must derive the same whole-element
 * segments (nexar bug 7.1.2), and the crossovers are as documented. */
#include "collective/algo.h"

#include <nexar/nexar.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "FAIL line %d: ", __LINE__);                                                 \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

/* Segments tile [0, len) exactly, in order, each non-empty and <= seg. */
static void check_tiling(size_t len, size_t seg) {
  size_t ns = nx_seg_count(len, seg), next = 0;
  for (size_t s = 0; s < ns; s++) {
    size_t off, n;
    nx_seg_range(len, seg, s, &off, &n);
    CHECK(off == next && n >= 1 && n <= seg, "len %zu seg %zu: segment %zu = [%zu,+%zu)", len, seg,
          s, off, n);
    next = off + n;
  }
  CHECK(next == len, "len %zu seg %zu: segments cover %zu", len, seg, next);
  size_t off, n;
  nx_seg_range(len, seg, ns, &off, &n);
  CHECK(n == 0, "segment past the end is not empty");
}

static void check_chunks(size_t count, uint32_t n) {
  size_t next = 0;
  for (uint32_t c = 0; c < n; c++) {
    CHECK(nx_chunk_off(count, n, c) == next, "count %zu n %u chunk %u offset", count, n, c);
    size_t l = nx_chunk_len(count, n, c);
    CHECK(l == count / n || l == count / n + 1, "chunk length %zu", l);
    next += l;
  }
  CHECK(next == count, "chunks of %zu over %u cover %zu", count, n, next);
}

int main(void) {
  static const size_t lens[] = {0, 1, 2, 3, 7, 8, 9, 524287, 524288, 524289, 1250000, 5000000};
  static const size_t segs[] = {1, 2, 3, 7, 8, 524288, 1 << 20};
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
    for (size_t k = 0; k < sizeof segs / sizeof *segs; k++)
      check_tiling(lens[i], segs[k]);
  for (uint32_t n = 1; n <= 17; n++) {
    check_chunks(0, n);
    check_chunks(n - 1, n);
    check_chunks(1009, n);
    check_chunks(2097153, n);
  }
  /* Whole elements, never zero. */
  CHECK(nx_seg_elems(2u << 20, 4) == 524288, "2 MiB of f32");
  CHECK(nx_seg_elems(2u << 20, 8) == 262144, "2 MiB of f64");
  CHECK(nx_seg_elems(3, 8) == 1, "segment smaller than an element");
  /* The two cases of nexar bug 7.1.2: chunks of 2,097,153 f32 over 4 ranks
   * differ by one element and straddle a segment boundary; each side derives
   * the segment count from the chunk alone. */
  size_t seg = nx_seg_elems(2u << 20, 4);
  CHECK(nx_seg_count(nx_chunk_len(2097153, 4, 0), seg) == 2, "chunk 0 has 2 segments");
  CHECK(nx_seg_count(nx_chunk_len(2097153, 4, 1), seg) == 1, "chunk 1 has 1 segment");
  check_tiling(nx_chunk_len(10000000, 8, 0), seg); /* 1,250,000 elements */

  const nx_algo_params *p = nx_algo_defaults();
  CHECK(p->large_msg_bytes == 8u << 20 && p->segment_bytes == 2u << 20 && p->ring_max_world == 8,
        "defaults follow nexar_config");
  CHECK(nx_algo_allreduce(100, 4, 1, p) == NX_AR_NONE, "world 1");
  CHECK(nx_algo_allreduce(0, 4, 4, p) == NX_AR_NONE, "count 0");
  CHECK(nx_algo_allreduce(1000, 4, 4, p) == NX_AR_RECDBL, "small");
  CHECK(nx_algo_allreduce(3, 4, 9, p) == NX_AR_RECDBL, "fewer elements than ranks");
  CHECK(nx_algo_allreduce(100000, 4, 8, p) == NX_AR_RING, "medium, world <= 8");
  CHECK(nx_algo_allreduce(100000, 4, 9, p) == NX_AR_HALVDBL, "medium, world > 8");
  CHECK(nx_algo_allreduce(2097152, 4, 4, p) == NX_AR_RING_PIPE, "8 MiB");
  CHECK(nx_algo_allreduce(2097151, 4, 4, p) == NX_AR_RING, "just under 8 MiB");
  CHECK(nx_algo_broadcast(10, 4, 8, p) == NX_BC_BINOMIAL, "small broadcast");
  CHECK(nx_algo_broadcast(1 << 20, 4, 8, p) == NX_BC_CHAIN, "large broadcast");
  CHECK(nx_algo_broadcast(1 << 20, 4, 2, p) == NX_BC_BINOMIAL, "2 ranks");
  CHECK(nx_algo_allgather(10, 4, 8, p) == NX_AG_RECDBL, "small pow2 allgather");
  CHECK(nx_algo_allgather(10, 4, 7, p) == NX_AG_RING, "non-pow2 allgather");
  CHECK(nx_algo_allgather(1 << 20, 4, 8, p) == NX_AG_RING, "large allgather");
  CHECK(nx_algo_gather(10, 4, 8, p) == NX_GS_BINOMIAL, "small gather");
  CHECK(nx_algo_gather(1 << 20, 4, 8, p) == NX_GS_DIRECT, "large gather");
  CHECK(nx_algo_scan(10, 4, 8, p) == NX_SC_RECDBL, "small scan");
  CHECK(nx_algo_scan(1 << 20, 4, 8, p) == NX_SC_CHAIN, "large scan");
  /* The test hook is respected but never picks an invalid schedule. */
  nx_algo_force_allgather = NX_AG_RECDBL;
  CHECK(nx_algo_allgather(10, 4, 7, p) == NX_AG_RING, "forced recdbl on 7 ranks");
  nx_algo_force_allgather = -1;
  CHECK(nx_pow2_floor(1) == 1 && nx_pow2_floor(9) == 8 && nx_pow2_floor(8) == 8, "pow2_floor");
  if (failures) fprintf(stderr, "%d failures\n", failures);
  return failures ? 1 : 0;
}
