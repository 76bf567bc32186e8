/* Sparse topologies with ranks as threads (loopback): each rank connects only
 * to its graph neighbours (nexar_peer_stats.neighbor), and p2p between every
 * pair, RPC to every rank and every collective still give exact results,
 * relayed where no connection exists; relays count what they forwarded and
 * never hold more than the window allows.
 *   sparse_local_test            (processes in namespaces with nft drops
 *                                 between non-neighbours: sparse_test.sh) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nexar/nexar.h>

#define MAXR 16
#define BIG (1u << 20) /* a p2p message over several segments */

static atomic_int g_fail;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf(" (%s)\n", nexar_last_error());                                                       \
      atomic_fetch_add(&g_fail, 1);                                                                \
    }                                                                                              \
  } while (0)

typedef struct world {
  int topo;
  uint32_t k, n;
  nexar_client *c[MAXR];
} world;

typedef struct rank_arg {
  world *w;
  uint32_t r;
} rank_arg;

static int adjacent(const world *w, uint32_t a, uint32_t b) {
  if (a == b) return 0;
  if (w->topo == NEXAR_TOPO_HYPERCUBE) return __builtin_popcount(a ^ b) == 1;
  uint32_t d = a > b ? a - b : b - a;
  if (w->n - d < d) d = w->n - d;
  return d <= w->k / 2;
}

static uint8_t pat(uint32_t src, uint32_t dst, size_t i) {
  return (uint8_t)(src * 31 + dst * 7 + i * 13 + (i >> 9));
}

static int echo(void *ctx, uint32_t caller, const void *args, size_t len, void **reply,
                size_t *rlen) {
  uint32_t me = *(uint32_t *)ctx;
  *reply = malloc(len + 8);
  if (!*reply) return NEXAR_ERR_NOMEM;
  memcpy(*reply, &me, 4);
  memcpy((char *)*reply + 4, &caller, 4);
  memcpy((char *)*reply + 8, args, len);
  *rlen = len + 8;
  return 0;
}

static void *rank_main(void *p) {
  rank_arg *a = p;
  world *w = a->w;
  uint32_t r = a->r, n = w->n;
  nexar_client *c = w->c[r];
  for (uint32_t j = 0; j < n; j++) {
    nexar_peer_stats st;
    if (j == r) continue;
    CHECK(nexar_peer_stats_get(c, j, &st) == 0 && st.neighbor == adjacent(w, r, j),
          "rank %u: peer %u neighbor=%d", r, j, st.neighbor);
  }
  /* p2p: every ordered pair, small and (to the farthest rank) large */
  uint8_t *big = malloc(BIG), *rb = malloc(BIG);
  for (uint32_t j = 0; j < n; j++) {
    if (j == r) continue;
    uint8_t small[300];
    for (size_t i = 0; i < sizeof small; i++)
      small[i] = pat(r, j, i);
    CHECK(nexar_send(c, small, sizeof small, j, 5) == 0, "send %u -> %u", r, j);
  }
  uint32_t far = (r + n / 2) % n;
  for (size_t i = 0; i < BIG; i++)
    big[i] = pat(r, far, i);
  nexar_request *bigreq = NULL; /* a direct same-host send waits for its reader */
  CHECK(nexar_send_nb(c, big, BIG, far, 6, &bigreq) == 0, "big send %u -> %u", r, far);
  for (uint32_t j = 0; j < n; j++) {
    if (j == r) continue;
    uint8_t small[300];
    CHECK(nexar_recv(c, small, sizeof small, j, 5) == 0, "recv %u <- %u", r, j);
    for (size_t i = 0; i < sizeof small; i++)
      if (small[i] != pat(j, r, i)) {
        CHECK(0, "rank %u: byte %zu from %u", r, i, j);
        break;
      }
  }
  for (uint32_t j = 0; j < n; j++) {
    if ((j + n / 2) % n != r || j == r) continue;
    CHECK(nexar_recv(c, rb, BIG, j, 6) == 0, "big recv %u <- %u", r, j);
    for (size_t i = 0; i < BIG; i++)
      if (rb[i] != pat(j, r, i)) {
        CHECK(0, "rank %u: big byte %zu from %u", r, i, j);
        break;
      }
  }
  CHECK(nexar_wait(bigreq) == 0, "big send %u -> %u completes", r, far);
  /* RPC to every rank */
  CHECK(nexar_barrier(c) == 0, "barrier");
  for (uint32_t j = 0; j < n; j++) {
    uint32_t arg = r * 1000 + j;
    void *rep = NULL;
    size_t rl = 0;
    CHECK(nexar_rpc(c, j, 3, &arg, sizeof arg, &rep, &rl) == 0 && rl == 12, "rpc %u -> %u", r, j);
    if (rep && rl == 12) {
      uint32_t v[3];
      memcpy(v, rep, 12);
      CHECK(v[0] == j && v[1] == r && v[2] == arg, "rpc reply %u -> %u", r, j);
    }
    nexar_free(rep);
  }
  /* collectives */
  size_t counts[] = {1, 256, 1u << 20};
  for (size_t t = 0; t < 3; t++) {
    size_t cnt = counts[t];
    float *v = malloc(cnt * sizeof *v);
    for (size_t i = 0; i < cnt; i++)
      v[i] = (float)(r + 1) + (float)(i % 7);
    CHECK(nexar_all_reduce(c, v, cnt, NEXAR_F32, NEXAR_SUM) == 0, "allreduce %zu", cnt);
    for (size_t i = 0; i < cnt; i++)
      if (v[i] != (float)(n * (n + 1) / 2) + (float)(n * (i % 7))) {
        CHECK(0, "rank %u allreduce %zu: [%zu] = %g", r, cnt, i, v[i]);
        break;
      }
    free(v);
  }
  for (uint32_t root = 0; root < n; root += 3) {
    uint64_t b[100];
    for (int i = 0; i < 100; i++)
      b[i] = r == root ? root * 100 + (uint64_t)i : 0;
    CHECK(nexar_broadcast(c, b, 100, NEXAR_U64, root) == 0, "broadcast %u", root);
    for (int i = 0; i < 100; i++)
      if (b[i] != root * 100 + (uint64_t)i) {
        CHECK(0, "rank %u broadcast from %u", r, root);
        break;
      }
  }
  uint32_t mine[4], all[4 * MAXR], rs_in[4 * MAXR], rs_out[4], a2a_in[4 * MAXR], a2a_out[4 * MAXR];
  for (int i = 0; i < 4; i++)
    mine[i] = r * 10 + (uint32_t)i;
  CHECK(nexar_all_gather(c, mine, all, 4, NEXAR_U32) == 0, "all_gather");
  for (uint32_t j = 0; j < n; j++)
    for (int i = 0; i < 4; i++)
      CHECK(all[j * 4 + i] == j * 10 + (uint32_t)i, "all_gather [%u][%d]", j, i);
  for (uint32_t i = 0; i < 4 * n; i++)
    rs_in[i] = i + r, a2a_in[i] = r * 1000 + i;
  CHECK(nexar_reduce_scatter(c, rs_in, rs_out, 4, NEXAR_U32, NEXAR_SUM) == 0, "reduce_scatter");
  for (int i = 0; i < 4; i++)
    CHECK(rs_out[i] == n * (r * 4 + (uint32_t)i) + n * (n - 1) / 2, "reduce_scatter [%d]", i);
  CHECK(nexar_all_to_all(c, a2a_in, a2a_out, 4, NEXAR_U32) == 0, "all_to_all");
  for (uint32_t j = 0; j < n; j++)
    for (uint32_t i = 0; i < 4; i++)
      CHECK(a2a_out[j * 4 + i] == j * 1000 + r * 4 + i, "all_to_all from %u [%u]", j, i);
  CHECK(nexar_barrier(c) == 0, "final barrier");
  free(big);
  free(rb);
  return NULL;
}

static void run(int topo, uint32_t k, uint32_t n) {
  world w = {.topo = topo, .k = k, .n = n};
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.topology = topo;
  cfg.topology_degree = k;
  int rc = nexar_bootstrap_local(w.c, n, &cfg);
  CHECK(rc == 0, "bootstrap topo %d k %u n %u", topo, k, n);
  if (rc) return;
  uint32_t ids[MAXR];
  for (uint32_t r = 0; r < n; r++) {
    ids[r] = r;
    nexar_rpc_register(w.c[r], 3, echo, &ids[r]);
  }
  pthread_t th[MAXR];
  rank_arg args[MAXR];
  for (uint32_t r = 0; r < n; r++) {
    args[r] = (rank_arg){&w, r};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  for (uint32_t r = 0; r < n; r++)
    pthread_join(th[r], NULL);
  uint64_t fwd = 0, peak = 0;
  for (uint32_t r = 0; r < n; r++) {
    nexar_relay_stats rs;
    CHECK(nexar_relay_stats_get(w.c[r], &rs) == 0, "relay stats");
    fwd += rs.forwarded_bytes;
    if (rs.peak_buffered_bytes > peak) peak = rs.peak_buffered_bytes;
    CHECK(rs.dropped_auth == 0 && rs.dropped_ttl == 0, "rank %u dropped %llu/%llu", r,
          (unsigned long long)rs.dropped_auth, (unsigned long long)rs.dropped_ttl);
  }
  printf("topo %d k %u n %u: %llu bytes relayed, peak relay buffer %llu bytes\n", topo, k, n,
         (unsigned long long)fwd, (unsigned long long)peak);
  CHECK(fwd > 0, "nothing was relayed");
  for (uint32_t r = 0; r < n; r++)
    nexar_client_del(w.c[r]);
}

int main(int argc, char **argv) {
  if (argc == 4) { /* one case: topology k n */
    run(atoi(argv[1]), (uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[3]));
    return g_fail != 0;
  }
  run(NEXAR_TOPO_HYPERCUBE, 0, 8);
  run(NEXAR_TOPO_K_REGULAR, 4, 8);
  run(NEXAR_TOPO_K_REGULAR, 2, 6);
  run(NEXAR_TOPO_HYPERCUBE, 0, 6); /* incomplete hypercube */
  if (g_fail) {
    printf("sparse_local_test: %d failures\n", g_fail);
    return 1;
  }
  printf("sparse_local_test: ok\n");
  return 0;
}
