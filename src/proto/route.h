/* Routes: who connects to whom and the next hop towards a rank, as pure
 * functions of (topology, degree, world, dead set), so every rank computes
 * the same table.
 *
 * Graphs (API.md "Topologies"): FULL_MESH connects every pair. K_REGULAR
 * (K even, 2 <= K < world) connects r to r +- 1 .. r +- K/2 (mod world).
 * HYPERCUBE connects r to r XOR 2^i for every i with r XOR 2^i < world: for a
 * world that is not a power of two this is the incomplete hypercube, which
 * stays connected (clearing r's highest bit always gives a smaller rank, so
 * every rank reaches 0); every world size is accepted.
 *
 * Next hop from me to dst: over the live graph (dead ranks removed), among
 * my live neighbours on a shortest path to dst, the lowest rank. Each hop
 * then strictly lowers the distance, so routes are loop-free and shortest.
 * It is computed for every destination with one breadth-first search from
 * me: the lowest first hop of a node is the lowest first hop among its
 * predecessors on the BFS layers.
 *
 * The engine dials only neighbours and relays the rest (runtime/relay.c):
 * a relay forwards by its own table, which is why the whole path follows
 * from the same rule (nx_route_path). */
#ifndef NX_PROTO_ROUTE_H
#define NX_PROTO_ROUTE_H

#include <stddef.h>
#include <stdint.h>

typedef struct nx_route {
  uint32_t world;
  uint32_t me;
  int topology;    /* NEXAR_TOPO_* (0: full mesh, no tables) */
  uint32_t degree; /* K of K_REGULAR */
  uint32_t *hop;   /* sparse: next hop from me to each rank, UINT32_MAX if unreachable */
  uint32_t *dist;  /* sparse: hops from me to each rank, UINT32_MAX if unreachable */
} nx_route;

/* Checks (topology, degree) for a world of n: 0, or NEXAR_ERR_INVALID_ARGUMENT
 * with a sentence naming the field in why (an unknown topology, K odd, below
 * 2 or not below the world). */
int nx_topo_check(int topology, uint32_t degree, uint32_t n, char *why, size_t whylen);
/* 1 if a and b are neighbours in the graph (dead ranks included). */
int nx_topo_adjacent(int topology, uint32_t degree, uint32_t n, uint32_t a, uint32_t b);
/* The neighbours of r in ascending order, without those marked in dead (NULL:
 * none; else n bytes, non-zero = dead); writes at most cap, returns how many
 * there are. */
uint32_t nx_topo_neighbors(int topology, uint32_t degree, uint32_t n, uint32_t r,
                           const uint8_t *dead, uint32_t *out, uint32_t cap);

/* Builds rt for me in a world of n over the live graph. Returns 0,
 * nx_topo_check's INVALID_ARGUMENT, or NEXAR_ERR_NOMEM. */
int nx_route_build(nx_route *rt, int topology, uint32_t degree, uint32_t n, uint32_t me,
                   const uint8_t *dead);
void nx_route_free(nx_route *rt);

/* 1 if a and b keep a direct connection. */
int nx_route_adjacent(const nx_route *rt, uint32_t a, uint32_t b);
/* 1 if rank a opens (dials) the connection to b: the lower rank dials the
 * higher one, so exactly one side of each pair does. */
int nx_route_dials(const nx_route *rt, uint32_t a, uint32_t b);
/* The neighbour a message from `me` to dst goes to first (dst itself when
 * adjacent); UINT32_MAX when dst is outside the world or unreachable. */
uint32_t nx_route_next_hop(const nx_route *rt, uint32_t dst);

/* The path a message from src to dst takes over the live graph when every
 * node forwards by its own nx_route_next_hop: the hops after src, ending
 * with dst, written to out (at most cap). Returns how many hops there are
 * (0 if src == dst, dst is unreachable, or memory ran out: callers treat
 * every 0 alike, as no route). One breadth-first search from dst. */
uint32_t nx_route_path(int topology, uint32_t degree, uint32_t n, const uint8_t *dead, uint32_t src,
                       uint32_t dst, uint32_t *out, uint32_t cap);
/* Hops from every rank to dst over the live graph into dist[n]
 * (UINT32_MAX: unreachable, or dead). 0 or NEXAR_ERR_NOMEM. */
int nx_route_dist_to(int topology, uint32_t degree, uint32_t n, const uint8_t *dead, uint32_t dst,
                     uint32_t *dist);
/* u's next hop towards the rank dist was computed for: its lowest live
 * neighbour one hop closer (what that node's nx_route_next_hop says);
 * UINT32_MAX for the rank itself or an unreachable u. */
uint32_t nx_route_toward(int topology, uint32_t degree, uint32_t n, const uint8_t *dead,
                         const uint32_t *dist, uint32_t u);
/* How many live ranks (not in dead) me cannot reach; their ids go to out
 * (at most cap). The full mesh reaches every live rank. */
uint32_t nx_route_unreachable(const nx_route *rt, const uint8_t *dead, uint32_t *out, uint32_t cap);

#endif
