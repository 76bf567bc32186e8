/* Algorithm choice and segmentation: pure functions every rank evaluates on
 * the same inputs (the collective's signature and the world size), so all
 * ranks always run the same schedule.
 *
 * Crossovers (bytes are one rank's vector):
 * - allreduce: recursive doubling while latency dominates (<= 32 KiB, or fewer
 *   elements than ranks); from large_msg_bytes (8 MiB) a ring cut into 2 MiB
 *   whole-element segments with 4 in flight; in between a ring for worlds up
 *   to ring_max_world (8; bandwidth-optimal, 2(n-1) steps) and recursive
 *   halving-doubling above (bandwidth-optimal, 2 log2 n steps).
 * - broadcast: binomial tree (log2 n store-and-forward steps) below 512 KiB or
 *   for 2 ranks; above, a chain in 256 KiB segments (n-1+segments steps, every
 *   link busy at once).
 * - allgather: recursive doubling for power-of-two worlds up to 256 KiB in
 *   total, else a ring (segmented in the engine when blocks are large).
 * - gather/scatter: binomial tree up to 64 KiB in total and more than 2 ranks,
 *   else direct (root exchanges with every rank, zero-copy at the root).
 * - scan: Hillis-Steele recursive doubling below 256 KiB, else a chain in
 *   256 KiB segments (each rank sends the vector once instead of log2 n times).
 * The first three values are the nexar_config defaults; the port does not
 * expose a communicator's config yet, so a user's setting is not honoured.
 *
 * Sparse topologies (p->topology) keep every step between neighbours:
 * k-regular takes rings (allreduce, allgather) and the chain (broadcast)
 * where the rules above would take recursive doubling, halving-doubling or a
 * binomial tree (their partners are not ring neighbours); a hypercube of a
 * power-of-two world keeps every choice (XOR partners, Gray-code rings, XOR
 * trees); an incomplete hypercube takes halving-doubling (folded ranks r-p2
 * = r XOR p2) instead of rings. What is left relays: all-to-all, gather,
 * scatter, scans and the v-forms; broadcast on an incomplete hypercube. */
#include "collective/algo.h"

#include <nexar/nexar.h>
#include <stdlib.h>

#include "proto/route.h"

int nx_algo_force_allreduce = -1;
int nx_algo_force_broadcast = -1;
int nx_algo_force_allgather = -1;
int nx_algo_force_gather = -1;
int nx_algo_force_scan = -1;
size_t nx_algo_force_segment = 0;

static const nx_algo_params nx_defaults = {
    .large_msg_bytes = 8u << 20,
    .segment_bytes = 2u << 20,
    .ring_max_world = 8,
    .allreduce_small = 32u << 10,
    .window = 4,
    .bcast_chain_min = 512u << 10,
    .bcast_segment = 256u << 10,
    .allgather_recdbl_max = 256u << 10,
    .gather_binomial_max = 64u << 10,
    .scan_chain_min = 256u << 10,
    .scan_segment = 256u << 10,
};

void nx_algo_params_from_config(nx_algo_params *out, const struct nexar_config *cfg) {
  *out = nx_defaults;
  if (!cfg) return;
  if (cfg->large_msg_bytes) out->large_msg_bytes = cfg->large_msg_bytes;
  if (cfg->pipeline_segment_bytes) out->segment_bytes = cfg->pipeline_segment_bytes;
  if (cfg->ring_max_world) out->ring_max_world = cfg->ring_max_world;
}

const nx_algo_params *nx_algo_defaults(void) {
  return &nx_defaults;
}

static int is_pow2(uint32_t n) {
  return n && !(n & (n - 1));
}

uint32_t nx_pow2_floor(uint32_t n) {
  uint32_t p = 1;
  while (p <= n / 2)
    p <<= 1;
  return p;
}

/* count * es saturating at SIZE_MAX (callers validated it already). */
static size_t bytes_of(size_t count, size_t es) {
  return es && count > SIZE_MAX / es ? SIZE_MAX : count * es;
}

nx_ar_algo nx_algo_allreduce(size_t count, size_t es, uint32_t world, const nx_algo_params *p) {
  if (world <= 1 || count == 0) return NX_AR_NONE;
  if (nx_algo_force_allreduce > NX_AR_NONE && nx_algo_force_allreduce <= NX_AR_RING_PIPE)
    return (nx_ar_algo)nx_algo_force_allreduce;
  size_t bytes = bytes_of(count, es);
  nx_ar_algo a;
  if (bytes >= p->large_msg_bytes && count >= world)
    a = NX_AR_RING_PIPE;
  else if (bytes <= p->allreduce_small || count < world)
    a = NX_AR_RECDBL;
  else if (world <= p->ring_max_world)
    a = NX_AR_RING;
  else
    a = NX_AR_HALVDBL;
  if (p->topology == NEXAR_TOPO_K_REGULAR && (a == NX_AR_RECDBL || a == NX_AR_HALVDBL))
    return NX_AR_RING; /* empty chunks are skipped: small counts work too */
  if (p->topology == NEXAR_TOPO_HYPERCUBE && !is_pow2(world) &&
      (a == NX_AR_RING || a == NX_AR_RING_PIPE))
    return NX_AR_HALVDBL;
  return a;
}

nx_bc_algo nx_algo_broadcast(size_t count, size_t es, uint32_t world, const nx_algo_params *p) {
  if (world <= 1 || count == 0) return NX_BC_NONE;
  if (nx_algo_force_broadcast > NX_BC_NONE && nx_algo_force_broadcast <= NX_BC_CHAIN)
    return (nx_bc_algo)nx_algo_force_broadcast;
  if (p->topology == NEXAR_TOPO_K_REGULAR)
    return bytes_of(count, es) >= p->bcast_chain_min ? NX_BC_CHAIN : NX_BC_TREE;
  if (p->topology == NEXAR_TOPO_HYPERCUBE && !is_pow2(world)) return NX_BC_TREE;
  if (world > 2 && bytes_of(count, es) >= p->bcast_chain_min) return NX_BC_CHAIN;
  return NX_BC_BINOMIAL;
}

nx_ag_algo nx_algo_allgather(size_t count, size_t es, uint32_t world, const nx_algo_params *p) {
  if (world <= 1 || count == 0) return NX_AG_NONE;
  if (nx_algo_force_allgather > NX_AG_NONE && nx_algo_force_allgather <= NX_AG_RING)
    return nx_algo_force_allgather == NX_AG_RECDBL && !is_pow2(world)
               ? NX_AG_RING
               : (nx_ag_algo)nx_algo_force_allgather;
  size_t total = bytes_of(bytes_of(count, es), world);
  if (p->topology == NEXAR_TOPO_K_REGULAR) return NX_AG_RING;
  if (is_pow2(world) && total <= p->allgather_recdbl_max) return NX_AG_RECDBL;
  return NX_AG_RING;
}

nx_gs_algo nx_algo_gather(size_t count, size_t es, uint32_t world, const nx_algo_params *p) {
  if (world <= 1 || count == 0) return NX_GS_NONE;
  if (nx_algo_force_gather > NX_GS_NONE && nx_algo_force_gather <= NX_GS_DIRECT)
    return (nx_gs_algo)nx_algo_force_gather;
  size_t total = bytes_of(bytes_of(count, es), world);
  if (world > 2 && total <= p->gather_binomial_max) return NX_GS_BINOMIAL;
  return NX_GS_DIRECT;
}

nx_sc_algo nx_algo_scan(size_t count, size_t es, uint32_t world, const nx_algo_params *p) {
  if (world <= 1 || count == 0) return NX_SC_NONE;
  if (nx_algo_force_scan > NX_SC_NONE && nx_algo_force_scan <= NX_SC_CHAIN)
    return (nx_sc_algo)nx_algo_force_scan;
  if (bytes_of(count, es) >= p->scan_chain_min) return NX_SC_CHAIN;
  return NX_SC_RECDBL;
}

size_t nx_seg_elems(size_t seg_bytes, size_t es) {
  if (nx_algo_force_segment) seg_bytes = nx_algo_force_segment;
  size_t n = es ? seg_bytes / es : seg_bytes;
  return n ? n : 1;
}

size_t nx_seg_count(size_t len, size_t seg_elems) {
  return len / seg_elems + (len % seg_elems != 0);
}

void nx_seg_range(size_t len, size_t seg_elems, size_t s, size_t *off, size_t *n) {
  size_t o = s * seg_elems;
  *off = o < len ? o : len;
  *n = o < len ? (len - o < seg_elems ? len - o : seg_elems) : 0;
}

size_t nx_chunk_off(size_t count, uint32_t n, uint32_t c) {
  size_t base = count / n, rem = count % n;
  return (size_t)c * base + (c < rem ? c : rem);
}

size_t nx_chunk_len(size_t count, uint32_t n, uint32_t c) {
  return count / n + (c < count % n);
}

int nx_algo_xor_graph(const nx_algo_params *p, uint32_t n) {
  return p->topology == NEXAR_TOPO_HYPERCUBE && is_pow2(n);
}

uint32_t nx_ring_rank(const nx_algo_params *p, uint32_t n, uint32_t pos) {
  return nx_algo_xor_graph(p, n) ? pos ^ (pos >> 1) : pos;
}

uint32_t nx_ring_pos(const nx_algo_params *p, uint32_t n, uint32_t r) {
  if (!nx_algo_xor_graph(p, n)) return r;
  for (uint32_t s = 1; s < 32; s <<= 1) /* inverse Gray code */
    r ^= r >> s;
  return r;
}

uint32_t nx_ring_next(const nx_algo_params *p, uint32_t n, uint32_t r) {
  return nx_ring_rank(p, n, (nx_ring_pos(p, n, r) + 1) % n);
}

uint32_t nx_ring_prev(const nx_algo_params *p, uint32_t n, uint32_t r) {
  return nx_ring_rank(p, n, (nx_ring_pos(p, n, r) + n - 1) % n);
}

uint32_t nx_tree_vrank(const nx_algo_params *p, uint32_t n, uint32_t r, uint32_t root) {
  return nx_algo_xor_graph(p, n) ? r ^ root : (r + n - root) % n;
}

uint32_t nx_tree_rank(const nx_algo_params *p, uint32_t n, uint32_t v, uint32_t root) {
  return nx_algo_xor_graph(p, n) ? v ^ root : (v + root) % n;
}

uint32_t nx_bfs_tree(const nx_algo_params *p, uint32_t n, uint32_t root, uint32_t r,
                     uint32_t *parent, uint32_t *children, uint32_t cap) {
  uint32_t maxdeg = p->topology == NEXAR_TOPO_K_REGULAR ? p->degree : 32, k = 0;
  uint32_t *dist = malloc((size_t)n * sizeof *dist), *nb = malloc((size_t)maxdeg * sizeof *nb);
  *parent = UINT32_MAX - 1;
  if (!dist || !nb || nx_route_dist_to(p->topology, p->degree, n, NULL, root, dist)) goto out;
  /* the tree edges are the routes towards the root (proto/route) */
  *parent = nx_route_toward(p->topology, p->degree, n, NULL, dist, r);
  uint32_t m = nx_topo_neighbors(p->topology, p->degree, n, r, NULL, nb, maxdeg);
  for (uint32_t i = 0; i < m && i < maxdeg; i++)
    if (nx_route_toward(p->topology, p->degree, n, NULL, dist, nb[i]) == r) {
      if (k < cap) children[k] = nb[i];
      k++;
    }
out:
  free(dist), free(nb);
  return k;
}
