/* proto/route: the full mesh (every pair connected by exactly one dialler,
 * the next hop is the destination), and k-regular and hypercube graphs for
 * every world of 2..64 ranks and every dead set of at most two ranks: each
 * next hop is a live neighbour one step closer on the live graph (so routes
 * are loop-free and shortest), the lowest such, and unreachable ranks have
 * none. Worlds up to 24 get every dead set of size <= 2; 25..64 every single
 * death and 30 seeded pairs (all pairs there would take minutes). Distances come from a reference
 * BFS written here, apart from the module's. Invalid settings are refused with a sentence naming
 * the field. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "proto/route.h"

#define MAXN 64

static uint32_t D[MAXN][MAXN];             /* reference distances on the live graph */
static uint32_t NB[MAXN][MAXN], NNB[MAXN]; /* reference neighbour lists */

static int adj(int topo, uint32_t k, uint32_t n, uint32_t a, uint32_t b) {
  if (a == b) return 0;
  if (topo == NEXAR_TOPO_HYPERCUBE) return __builtin_popcount(a ^ b) == 1;
  uint32_t d = (a + n - b) % n;
  return d <= k / 2 || n - d <= k / 2;
}

static void reference(int topo, uint32_t k, uint32_t n, const uint8_t *dead) {
  for (uint32_t a = 0; a < n; a++) {
    NNB[a] = 0;
    for (uint32_t b = 0; b < n; b++)
      if (!dead[b] && adj(topo, k, n, a, b)) NB[a][NNB[a]++] = b;
  }
  for (uint32_t s = 0; s < n; s++) {
    for (uint32_t v = 0; v < n; v++)
      D[s][v] = UINT32_MAX;
    if (dead[s]) continue;
    uint32_t q[MAXN], qh = 0, qt = 0;
    D[s][s] = 0;
    q[qt++] = s;
    while (qh < qt) {
      uint32_t u = q[qh++];
      for (uint32_t i = 0; i < NNB[u]; i++) {
        uint32_t v = NB[u][i];
        if (D[s][v] == UINT32_MAX) {
          D[s][v] = D[s][u] + 1;
          q[qt++] = v;
        }
      }
    }
  }
}

static unsigned long g_checked;

static void check_graph(int topo, uint32_t k, uint32_t n, const uint8_t *dead) {
  reference(topo, k, n, dead);
  for (uint32_t s = 0; s < n; s++) {
    nx_route rt;
    CHECK(nx_route_build(&rt, topo, k, n, s, dead) == 0, "build topo %d n %u", topo, n);
    for (uint32_t d = 0; d < n; d++) {
      uint32_t h = nx_route_next_hop(&rt, d);
      if (dead[s] || D[s][d] == UINT32_MAX) {
        CHECK(dead[s] || h == UINT32_MAX, "topo %d n %u: %u -> %u unreachable but hop %u", topo, n,
              s, d, h);
        continue;
      }
      if (d == s) {
        CHECK(h == s, "hop to self");
        continue;
      }
      CHECK(h < n && !dead[h] && adj(topo, k, n, s, h),
            "topo %d n %u: %u -> %u via %u: no live "
            "neighbour",
            topo, n, s, d, h);
      CHECK(D[h][d] + 1 == D[s][d], "topo %d n %u: %u -> %u via %u is not shortest", topo, n, s, d,
            h);
      for (uint32_t i = 0; i < NNB[s] && NB[s][i] < h; i++)
        CHECK(D[NB[s][i]][d] + 1 != D[s][d], "topo %d n %u: %u -> %u via %u, lower %u is as short",
              topo, n, s, d, h, NB[s][i]);
      CHECK(nx_route_adjacent(&rt, s, h) &&
                nx_route_dials(&rt, s, h) + nx_route_dials(&rt, h, s) == 1,
            "adjacency / one dialler");
      g_checked++;
    }
    nx_route_free(&rt);
  }
  if (n > 16) return;
  /* the whole path (nx_route_path) is the chain of every node's own next hop */
  static nx_route all[MAXN];
  for (uint32_t s = 0; s < n; s++)
    CHECK(nx_route_build(&all[s], topo, k, n, s, dead) == 0, "build");
  for (uint32_t s = 0; s < n; s++)
    for (uint32_t d = 0; d < n; d++) {
      uint32_t path[MAXN];
      uint32_t len = nx_route_path(topo, k, n, dead, s, d, path, MAXN);
      if (s == d || dead[s] || dead[d] || D[s][d] == UINT32_MAX) {
        CHECK(len == 0, "topo %d n %u: path %u -> %u should be empty", topo, n, s, d);
        continue;
      }
      CHECK(len == D[s][d], "topo %d n %u: path %u -> %u has %u hops, want %u", topo, n, s, d, len,
            D[s][d]);
      uint32_t u = s;
      for (uint32_t i = 0; i < len; i++) {
        CHECK(path[i] == nx_route_next_hop(&all[u], d), "topo %d n %u: path %u -> %u hop %u", topo,
              n, s, d, i);
        u = path[i];
      }
    }
  for (uint32_t s = 0; s < n; s++)
    nx_route_free(&all[s]);
}

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
  /* sparse graphs: every world, every dead set of size <= 2 */
  uint8_t dead[MAXN];
  for (uint32_t n = 2; n <= MAXN; n++) {
    const struct {
      int topo;
      uint32_t k;
    } g[] = {{NEXAR_TOPO_HYPERCUBE, 0}, {NEXAR_TOPO_K_REGULAR, 2}, {NEXAR_TOPO_K_REGULAR, 4}};
    for (size_t t = 0; t < sizeof g / sizeof g[0]; t++) {
      if (g[t].topo == NEXAR_TOPO_K_REGULAR && g[t].k >= n) continue;
      uint64_t seed = 88172645463325252ull ^ n;
      for (uint32_t i = 0; i <= n; i++)
        for (uint32_t j = i; j <= n; j++) {
          if (i == j && i != n) continue; /* (n, n): none; (i, n): {i}; (i, j): {i, j} */
          if (n > 24 && j < n) {          /* large worlds: 30 seeded pairs */
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            if (seed % (n * (n - 1) / 2) >= 30) continue;
          }
          memset(dead, 0, sizeof dead);
          if (i < n) dead[i] = 1;
          if (j < n) dead[j] = 1;
          check_graph(g[t].topo, g[t].k, n, dead);
        }
    }
    /* neighbour lists agree with adjacency and are ascending */
    uint32_t nb[64];
    for (uint32_t r = 0; r < n; r++) {
      uint32_t c = nx_topo_neighbors(NEXAR_TOPO_HYPERCUBE, 0, n, r, NULL, nb, 64), want = 0;
      for (uint32_t v = 0; v < n; v++)
        want += adj(NEXAR_TOPO_HYPERCUBE, 0, n, r, v);
      CHECK(c == want, "hypercube n %u rank %u: %u neighbours, want %u", n, r, c, want);
      for (uint32_t x = 1; x < c && x < 64; x++)
        CHECK(nb[x - 1] < nb[x], "hypercube neighbours ascending");
    }
  }
  /* invalid settings name the field */
  char why[160];
  CHECK(nx_topo_check(NEXAR_TOPO_K_REGULAR, 3, 8, why, sizeof why) == NEXAR_ERR_INVALID_ARGUMENT &&
            strstr(why, "topology_degree"),
        "odd K");
  CHECK(nx_topo_check(NEXAR_TOPO_K_REGULAR, 8, 8, why, sizeof why) == NEXAR_ERR_INVALID_ARGUMENT &&
            strstr(why, "below the world"),
        "K >= world");
  CHECK(nx_topo_check(NEXAR_TOPO_K_REGULAR, 0, 8, why, sizeof why) == NEXAR_ERR_INVALID_ARGUMENT,
        "K 0");
  CHECK(nx_topo_check(7, 0, 8, why, sizeof why) == NEXAR_ERR_INVALID_ARGUMENT &&
            strstr(why, "config.topology"),
        "unknown topology");
  nx_route rt;
  CHECK(nx_route_build(&rt, NEXAR_TOPO_K_REGULAR, 5, 8, 0, NULL) == NEXAR_ERR_INVALID_ARGUMENT,
        "build refuses");
  /* a partition: k=2, n=6, ranks 1 and 4 dead: {0,5} and {2,3} cannot reach each other */
  memset(dead, 0, sizeof dead);
  dead[1] = dead[4] = 1;
  CHECK(nx_route_build(&rt, NEXAR_TOPO_K_REGULAR, 2, 6, 0, dead) == 0, "ring");
  CHECK(nx_route_next_hop(&rt, 2) == UINT32_MAX && nx_route_next_hop(&rt, 5) == 5, "partitioned");
  uint32_t un[8];
  CHECK(nx_route_unreachable(&rt, dead, un, 8) == 2 && un[0] == 2 && un[1] == 3, "unreachable set");
  nx_route_free(&rt);
  printf("route_test: %lu sparse routes checked\n", g_checked);
  return 0;
}
