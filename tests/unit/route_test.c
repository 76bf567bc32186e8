/* proto/route: every pair of a world is connected by exactly one dialler,
 * the next hop of a full mesh is the destination, outside ranks have none. */
#include "check.h"
#include "proto/route.h"

int main(void) {
  for (uint32_t n = 1; n <= 64; n++)
    for (uint32_t a = 0; a < n; a++) {
      nx_route rt = {.world = n, .me = a};
      CHECK(!nx_route_adjacent(&rt, a, a), "n=%u: %u adjacent to itself", n, a);
      CHECK(nx_route_next_hop(&rt, n) == UINT32_MAX, "n=%u: a hop outside the world", n);
      for (uint32_t b = 0; b < n; b++) {
        if (a == b) continue;
        CHECK(nx_route_adjacent(&rt, a, b) == nx_route_adjacent(&rt, b, a), "n=%u: symmetry", n);
        CHECK(nx_route_dials(&rt, a, b) + nx_route_dials(&rt, b, a) == 1,
              "n=%u: pair %u-%u needs exactly one dialler", n, a, b);
        CHECK(nx_route_next_hop(&rt, b) == b, "n=%u: full mesh hop %u -> %u", n, a, b);
      }
    }
  return 0;
}
