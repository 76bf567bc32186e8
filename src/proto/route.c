/* Routes over full-mesh, k-regular and hypercube graphs (see route.h). */
#include "proto/route.h"

#include <stdio.h>
#include <stdlib.h>

#include "nexar/nexar.h"

int nx_topo_check(int topology, uint32_t degree, uint32_t n, char *why, size_t whylen) {
  if (topology == NEXAR_TOPO_FULL_MESH || topology == NEXAR_TOPO_HYPERCUBE) return 0;
  if (topology != NEXAR_TOPO_K_REGULAR) {
    snprintf(why, whylen, "config.topology %d is not a nexar_topology", topology);
    return NEXAR_ERR_INVALID_ARGUMENT;
  }
  if (degree < 2 || degree % 2) {
    snprintf(why, whylen, "config.topology_degree %u: k_regular needs an even K >= 2", degree);
    return NEXAR_ERR_INVALID_ARGUMENT;
  }
  if (degree >= n) {
    snprintf(why, whylen, "config.topology_degree %u: k_regular needs K below the world (%u)",
             degree, n);
    return NEXAR_ERR_INVALID_ARGUMENT;
  }
  return 0;
}

int nx_topo_adjacent(int topology, uint32_t degree, uint32_t n, uint32_t a, uint32_t b) {
  if (a == b || a >= n || b >= n) return 0;
  if (topology == NEXAR_TOPO_HYPERCUBE) {
    uint32_t x = a ^ b;
    return (x & (x - 1)) == 0;
  }
  if (topology == NEXAR_TOPO_K_REGULAR) {
    uint32_t d = a > b ? a - b : b - a;
    if (n - d < d) d = n - d;
    return d <= degree / 2;
  }
  return 1;
}

uint32_t nx_topo_neighbors(int topology, uint32_t degree, uint32_t n, uint32_t r,
                           const uint8_t *dead, uint32_t *out, uint32_t cap) {
  uint32_t k = 0;
  if (r >= n) return 0;
  if (topology == NEXAR_TOPO_HYPERCUBE) { /* ascending */
    for (uint32_t b = 31; b < 32; b--) {  /* below r: clear a set bit, the highest first */
      uint32_t v = r ^ (1u << b);
      if ((r >> b & 1) && v < n && !(dead && dead[v])) {
        if (k < cap) out[k] = v;
        k++;
      }
    }
    for (uint32_t b = 0; b < 32; b++) { /* above r: set a clear bit, the lowest first */
      uint64_t v = (uint64_t)r ^ (1ull << b);
      if (!(r >> b & 1) && v < n && !(dead && dead[v])) {
        if (k < cap) out[k] = (uint32_t)v;
        k++;
      }
    }
    return k;
  }
  if (topology == NEXAR_TOPO_K_REGULAR) { /* r - K/2 .. r + K/2 (mod n), ascending */
    uint32_t h = degree / 2;
    for (uint32_t v = 0; v < n; v++) {
      uint32_t d = v > r ? v - r : r - v;
      if (n - d < d) d = n - d;
      if (v != r && d <= h && !(dead && dead[v])) {
        if (k < cap) out[k] = v;
        k++;
      }
    }
    return k;
  }
  for (uint32_t v = 0; v < n; v++)
    if (v != r && !(dead && dead[v])) {
      if (k < cap) out[k] = v;
      k++;
    }
  return k;
}

void nx_route_free(nx_route *rt) {
  free(rt->hop);
  free(rt->dist);
  rt->hop = rt->dist = NULL;
}

int nx_route_build(nx_route *rt, int topology, uint32_t degree, uint32_t n, uint32_t me,
                   const uint8_t *dead) {
  char why[160];
  int rc = nx_topo_check(topology, degree, n, why, sizeof why);
  if (rc) return rc;
  *rt = (nx_route){.world = n, .me = me, .topology = topology, .degree = degree};
  if (topology == NEXAR_TOPO_FULL_MESH) return 0;
  uint32_t maxdeg = topology == NEXAR_TOPO_K_REGULAR ? degree : 32;
  rt->hop = malloc((size_t)n * sizeof *rt->hop);
  rt->dist = malloc((size_t)n * sizeof *rt->dist);
  uint32_t *queue = malloc((size_t)n * sizeof *queue);
  uint32_t *nb = malloc((size_t)maxdeg * sizeof *nb);
  if (!rt->hop || !rt->dist || !queue || !nb) {
    free(queue), free(nb);
    nx_route_free(rt);
    return NEXAR_ERR_NOMEM;
  }
  for (uint32_t v = 0; v < n; v++)
    rt->hop[v] = rt->dist[v] = UINT32_MAX;
  if (me < n && !(dead && dead[me])) {
    /* BFS from me; a node's hop is the lowest hop among its predecessors (the
     * neighbours one layer closer), all of which FIFO order settles before the
     * node itself is expanded */
    size_t qh = 0, qt = 0;
    rt->dist[me] = 0;
    rt->hop[me] = me;
    queue[qt++] = me;
    while (qh < qt) {
      uint32_t u = queue[qh++];
      uint32_t k = nx_topo_neighbors(topology, degree, n, u, dead, nb, maxdeg);
      for (uint32_t i = 0; i < k && i < maxdeg; i++) {
        uint32_t v = nb[i], h = u == me ? v : rt->hop[u];
        if (rt->dist[v] == UINT32_MAX) {
          rt->dist[v] = rt->dist[u] + 1;
          rt->hop[v] = h;
          queue[qt++] = v;
        } else if (rt->dist[v] == rt->dist[u] + 1 && h < rt->hop[v]) {
          rt->hop[v] = h;
        }
      }
    }
  }
  free(queue);
  free(nb);
  return 0;
}

int nx_route_adjacent(const nx_route *rt, uint32_t a, uint32_t b) {
  return nx_topo_adjacent(rt->topology, rt->degree, rt->world, a, b);
}

int nx_route_dials(const nx_route *rt, uint32_t a, uint32_t b) {
  return nx_route_adjacent(rt, a, b) && a < b;
}

uint32_t nx_route_next_hop(const nx_route *rt, uint32_t dst) {
  if (dst >= rt->world) return UINT32_MAX;
  if (rt->topology == NEXAR_TOPO_FULL_MESH || !rt->hop) return dst;
  return dst == rt->me ? dst : rt->hop[dst];
}

static uint32_t max_degree(int topology, uint32_t degree) {
  return topology == NEXAR_TOPO_K_REGULAR ? degree : 32;
}

int nx_route_dist_to(int topology, uint32_t degree, uint32_t n, const uint8_t *dead, uint32_t dst,
                     uint32_t *dist) {
  uint32_t maxdeg = max_degree(topology, degree);
  uint32_t *queue = malloc((size_t)n * sizeof *queue), *nb = malloc((size_t)maxdeg * sizeof *nb);
  if (!queue || !nb) {
    free(queue), free(nb);
    return NEXAR_ERR_NOMEM;
  }
  for (uint32_t v = 0; v < n; v++)
    dist[v] = UINT32_MAX;
  size_t qh = 0, qt = 0;
  if (dst < n && !(dead && dead[dst])) dist[dst] = 0, queue[qt++] = dst;
  while (qh < qt) { /* the graph is undirected: distances to dst = from dst */
    uint32_t u = queue[qh++];
    uint32_t m = nx_topo_neighbors(topology, degree, n, u, dead, nb, maxdeg);
    for (uint32_t i = 0; i < m && i < maxdeg; i++)
      if (dist[nb[i]] == UINT32_MAX) dist[nb[i]] = dist[u] + 1, queue[qt++] = nb[i];
  }
  free(queue), free(nb);
  return 0;
}

uint32_t nx_route_toward(int topology, uint32_t degree, uint32_t n, const uint8_t *dead,
                         const uint32_t *dist, uint32_t u) {
  if (u >= n || dist[u] == 0 || dist[u] == UINT32_MAX) return UINT32_MAX;
  uint32_t maxdeg = max_degree(topology, degree), buf[64];
  uint32_t *nb = maxdeg <= 64 ? buf : malloc((size_t)maxdeg * sizeof *nb), next = UINT32_MAX;
  if (!nb) return UINT32_MAX;
  uint32_t m = nx_topo_neighbors(topology, degree, n, u, dead, nb, maxdeg);
  for (uint32_t i = 0; i < m && i < maxdeg && next == UINT32_MAX; i++)
    if (dist[nb[i]] + 1 == dist[u]) next = nb[i]; /* ascending: the first is the lowest */
  if (nb != buf) free(nb);
  return next;
}

uint32_t nx_route_path(int topology, uint32_t degree, uint32_t n, const uint8_t *dead, uint32_t src,
                       uint32_t dst, uint32_t *out, uint32_t cap) {
  if (src >= n || dst >= n || src == dst || (dead && (dead[src] || dead[dst]))) return 0;
  if (topology == NEXAR_TOPO_FULL_MESH) {
    if (cap) out[0] = dst;
    return 1;
  }
  uint32_t *dist = malloc((size_t)n * sizeof *dist), k = 0;
  if (!dist || nx_route_dist_to(topology, degree, n, dead, dst, dist) || dist[src] == UINT32_MAX) {
    free(dist);
    return 0;
  }
  for (uint32_t u = src; u != dst; k++) { /* each node: its own next hop */
    u = nx_route_toward(topology, degree, n, dead, dist, u);
    if (k < cap) out[k] = u;
  }
  free(dist);
  return k;
}

uint32_t nx_route_unreachable(const nx_route *rt, const uint8_t *dead, uint32_t *out,
                              uint32_t cap) {
  uint32_t k = 0;
  if (rt->topology == NEXAR_TOPO_FULL_MESH || !rt->hop) return 0;
  for (uint32_t v = 0; v < rt->world; v++)
    if (v != rt->me && !(dead && dead[v]) && rt->hop[v] == UINT32_MAX) {
      if (k < cap) out[k] = v;
      k++;
    }
  return k;
}
