/* Routes: who connects to whom and the next hop towards a rank, as pure
 * functions of the world (and, later, the topology and the dead set), so
 * every rank computes the same table. Today the only topology formed is the
 * full mesh (a sparse NEXAR_TOPOLOGY is refused with UNSUPPORTED at config
 * time), where every pair is connected and the next hop is the destination;
 * k-regular and hypercube graphs with relay plug in here. */
#ifndef NX_PROTO_ROUTE_H
#define NX_PROTO_ROUTE_H

#include <stdint.h>

typedef struct nx_route {
  uint32_t world;
  uint32_t me;
} nx_route;

/* 1 if a and b keep a direct connection. */
int nx_route_adjacent(const nx_route *rt, uint32_t a, uint32_t b);
/* 1 if rank a opens (dials) the connection to b: the lower rank dials the
 * higher one, so exactly one side of each pair does. */
int nx_route_dials(const nx_route *rt, uint32_t a, uint32_t b);
/* The neighbour a message from `me` to dst goes to first (dst itself when
 * adjacent); UINT32_MAX when dst is outside the world. */
uint32_t nx_route_next_hop(const nx_route *rt, uint32_t dst);

#endif
