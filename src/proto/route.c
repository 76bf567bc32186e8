/* Full-mesh routes (see route.h). */
#include "proto/route.h"

int nx_route_adjacent(const nx_route *rt, uint32_t a, uint32_t b) {
  return a != b && a < rt->world && b < rt->world;
}

int nx_route_dials(const nx_route *rt, uint32_t a, uint32_t b) {
  return nx_route_adjacent(rt, a, b) && a < b;
}

uint32_t nx_route_next_hop(const nx_route *rt, uint32_t dst) {
  return dst < rt->world ? dst : UINT32_MAX;
}
