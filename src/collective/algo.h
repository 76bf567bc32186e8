/* Algorithm choice for every collective: pure functions of (op, bytes, world,
 * parameters), so every rank makes the same choice and the rules are
 * unit-testable without a network. Also the whole-element segmentation that
 * both neighbours of a pipelined transfer compute identically. */
#ifndef NX_COLLECTIVE_ALGO_H
#define NX_COLLECTIVE_ALGO_H

#include <stddef.h>
#include <stdint.h>

/* Tunables. The port does not expose the communicator's config, so these are
 * the nexar_config defaults (large_msg_bytes, pipeline_segment_bytes,
 * ring_max_world) plus crossovers of our own; see algo.c for the reasons. */
typedef struct nx_algo_params {
  size_t large_msg_bytes;      /* allreduce: pipelined ring from here (8 MiB) */
  size_t segment_bytes;        /* allreduce pipeline segment (2 MiB) */
  uint32_t ring_max_world;     /* allreduce: ring up to this world, else halving-doubling (8) */
  size_t allreduce_small;      /* allreduce: recursive doubling up to here (32 KiB) */
  unsigned window;             /* segments in flight per pipeline (4) */
  size_t bcast_chain_min;      /* broadcast: pipelined chain from here (512 KiB) */
  size_t bcast_segment;        /* broadcast chain segment (256 KiB) */
  size_t allgather_recdbl_max; /* allgather: recursive doubling up to this total (256 KiB) */
  size_t gather_binomial_max;  /* gather/scatter: binomial tree up to this total (64 KiB) */
  size_t scan_chain_min;       /* scan: pipelined chain from here (256 KiB) */
  size_t scan_segment;         /* scan chain segment (256 KiB) */
  /* the sparse graph the communicator's ranks are the nodes of (its ranks
   * are the member ids of a sparse world); 0: full mesh, or a communicator
   * whose ranks are not the graph's nodes (split, recovered) */
  int topology;
  uint32_t degree;
} nx_algo_params;

/* The built-in parameters (see algo.c). */
const nx_algo_params *nx_algo_defaults(void);
struct nexar_config;
/* The defaults with the communicator's large_msg_bytes, pipeline_segment_bytes
 * and ring_max_world applied (these must be equal on every rank). */
void nx_algo_params_from_config(nx_algo_params *out, const struct nexar_config *cfg);

typedef enum nx_ar_algo {
  NX_AR_NONE = 0,  /* world 1: nothing to do */
  NX_AR_RECDBL,    /* recursive doubling, non-power-of-two folded */
  NX_AR_HALVDBL,   /* recursive halving (reduce-scatter) + doubling (allgather) */
  NX_AR_RING,      /* ring reduce-scatter + allgather, one segment per chunk */
  NX_AR_RING_PIPE, /* ring with whole-element segments, several in flight */
} nx_ar_algo;

/* NX_BC_TREE: the breadth-first spanning tree of a sparse graph from the
 * root (a rank's parent is its next hop towards the root), sparse only. */
typedef enum nx_bc_algo { NX_BC_NONE = 0, NX_BC_BINOMIAL, NX_BC_CHAIN, NX_BC_TREE } nx_bc_algo;
typedef enum nx_ag_algo { NX_AG_NONE = 0, NX_AG_RECDBL, NX_AG_RING } nx_ag_algo;
typedef enum nx_gs_algo { NX_GS_NONE = 0, NX_GS_BINOMIAL, NX_GS_DIRECT } nx_gs_algo;
typedef enum nx_sc_algo { NX_SC_NONE = 0, NX_SC_RECDBL, NX_SC_CHAIN } nx_sc_algo;

/* bytes = count * element size of one rank's vector (allgather, gather,
 * scatter: of one block). */
nx_ar_algo nx_algo_allreduce(size_t count, size_t es, uint32_t world, const nx_algo_params *p);
nx_bc_algo nx_algo_broadcast(size_t count, size_t es, uint32_t world, const nx_algo_params *p);
nx_ag_algo nx_algo_allgather(size_t count, size_t es, uint32_t world, const nx_algo_params *p);
nx_gs_algo nx_algo_gather(size_t count, size_t es, uint32_t world, const nx_algo_params *p);
nx_sc_algo nx_algo_scan(size_t count, size_t es, uint32_t world, const nx_algo_params *p);

/* Segment size in whole elements for a segment of seg_bytes (at least 1). */
size_t nx_seg_elems(size_t seg_bytes, size_t es);
/* Number of segments of a chunk of len elements (0 for an empty chunk). */
size_t nx_seg_count(size_t len, size_t seg_elems);
/* Element range [*off, *off + *n) of segment s of a chunk of len elements. */
void nx_seg_range(size_t len, size_t seg_elems, size_t s, size_t *off, size_t *n);

/* Chunk c of count elements split over n: the first count % n chunks get one
 * element more (offsets and lengths in elements). */
size_t nx_chunk_off(size_t count, uint32_t n, uint32_t c);
size_t nx_chunk_len(size_t count, uint32_t n, uint32_t c);

/* Neighbour-only schedules (API.md "Topologies"). On a hypercube of a
 * power-of-two world, every XOR partner is a neighbour, the ring algorithms
 * follow the Gray-code cycle (consecutive positions differ in one bit) and
 * rooted trees use virtual ranks r XOR root (a tree edge flips one bit). On
 * a k-regular circulant, r +- 1 are neighbours: rings and chains as they are.
 * Elsewhere: positions are ranks, virtual ranks (r - root) mod n. */
int nx_algo_xor_graph(const nx_algo_params *p, uint32_t n); /* hypercube, n a power of two */
uint32_t nx_ring_rank(const nx_algo_params *p, uint32_t n, uint32_t pos); /* rank at pos */
uint32_t nx_ring_pos(const nx_algo_params *p, uint32_t n, uint32_t r);
uint32_t nx_ring_next(const nx_algo_params *p, uint32_t n, uint32_t r);
uint32_t nx_ring_prev(const nx_algo_params *p, uint32_t n, uint32_t r);
uint32_t nx_tree_vrank(const nx_algo_params *p, uint32_t n, uint32_t r, uint32_t root);
uint32_t nx_tree_rank(const nx_algo_params *p, uint32_t n, uint32_t v, uint32_t root);
/* The breadth-first spanning tree of the sparse graph p describes, rooted
 * at root: r's parent (UINT32_MAX for the root) and its children in
 * ascending order (at most cap; returns how many). A node's parent is its
 * lowest neighbour one hop closer to the root, as routes choose. NOMEM as 0
 * children and parent UINT32_MAX - 1 (the caller fails the collective). */
uint32_t nx_bfs_tree(const nx_algo_params *p, uint32_t n, uint32_t root, uint32_t r,
                     uint32_t *parent, uint32_t *children, uint32_t cap);

/* Largest power of two <= n (n >= 1). */
uint32_t nx_pow2_floor(uint32_t n);

/* Test hook: when >= 0, the forced algorithm replaces the choice for worlds
 * > 1 (and counts > 0). Set only while no collective runs; process-wide, so
 * every rank of an in-process test agrees. */
extern int nx_algo_force_allreduce; /* nx_ar_algo */
extern int nx_algo_force_broadcast; /* nx_bc_algo */
extern int nx_algo_force_allgather; /* nx_ag_algo */
extern int nx_algo_force_gather;    /* nx_gs_algo */
extern int nx_algo_force_scan;      /* nx_sc_algo */
/* Test hook: when non-zero, replaces every segment size in bytes. */
extern size_t nx_algo_force_segment;

#endif
