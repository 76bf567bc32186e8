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

#include "runtime/comm.h" /* the forged-segment check feeds the relay directly */

#define MAXR 16
#define BIG (1u << 20) /* a p2p message over several segments */

#include "mtcheck.h"

typedef struct world {
  int topo;
  uint32_t k, n;
  nexar_client *c[MAXR];
} world;

typedef struct rank_arg {
  world *w;
  uint32_t r;
  int phase; /* 0: collectives, 1: p2p and RPC */
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

static void collectives(world *w, uint32_t r);

static void *rank_main(void *p) {
  rank_arg *a = p;
  world *w = a->w;
  uint32_t r = a->r, n = w->n;
  nexar_client *c = w->c[r];
  if (a->phase == 0) {
    collectives(w, r);
    return NULL;
  }
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
  CHECK(nexar_barrier(c) == 0, "final barrier");
  free(big);
  free(rb);
  return NULL;
}

/* Every collective with exact results; on the graphs whose schedules are
 * neighbour-only (a power-of-two hypercube, k-regular) nothing is relayed. */
static void collectives(world *w, uint32_t r) {
  uint32_t n = w->n;
  nexar_client *c = w->c[r];
  size_t counts[] = {1, 256, 20000, 1u << 20, 3u << 20};
  for (size_t t = 0; t < sizeof counts / sizeof counts[0]; t++) {
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
  for (uint32_t root = 0; root < n; root += 2) { /* large broadcast (chain), reduce */
    size_t cnt = 1u << 18;
    float *v = malloc(cnt * sizeof *v);
    for (size_t i = 0; i < cnt; i++)
      v[i] = r == root ? (float)(i % 1000) : -1.0f;
    CHECK(nexar_broadcast(c, v, cnt, NEXAR_F32, root) == 0, "large broadcast %u", root);
    for (size_t i = 0; i < cnt; i++)
      if (v[i] != (float)(i % 1000)) {
        CHECK(0, "rank %u large broadcast from %u [%zu]", r, root, i);
        break;
      }
    for (size_t i = 0; i < 64; i++)
      v[i] = (float)(r + i);
    CHECK(nexar_reduce(c, v, 64, NEXAR_F32, NEXAR_SUM, root) == 0, "reduce %u", root);
    if (r == root)
      for (size_t i = 0; i < 64; i++)
        CHECK(v[i] == (float)(n * (n - 1) / 2 + n * i), "reduce to %u [%zu]", root, i);
    free(v);
  }
  uint32_t *big_in = malloc(4u * 5000 * MAXR * sizeof *big_in);
  uint32_t *big_out = malloc(4u * 5000 * sizeof *big_out);
  for (uint32_t i = 0; i < 4u * 5000 * n; i++)
    big_in[i] = i + r;
  CHECK(nexar_reduce_scatter(c, big_in, big_out, 4u * 5000, NEXAR_U32, NEXAR_SUM) == 0,
        "large reduce_scatter");
  for (uint32_t i = 0; i < 4u * 5000; i++)
    if (big_out[i] != n * (r * 4u * 5000 + i) + n * (n - 1) / 2) {
      CHECK(0, "rank %u large reduce_scatter [%u]", r, i);
      break;
    }
  free(big_in);
  free(big_out);
  CHECK(nexar_barrier(c) == 0, "barrier after the collectives");
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
  int neighbour_only =
      (topo == NEXAR_TOPO_HYPERCUBE && (n & (n - 1)) == 0) || topo == NEXAR_TOPO_K_REGULAR;
  for (int phase = 0; phase < 2; phase++) {
    for (uint32_t r = 0; r < n; r++) {
      args[r] = (rank_arg){&w, r, phase};
      pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (uint32_t r = 0; r < n; r++)
      pthread_join(th[r], NULL);
    if (phase) break;
    uint64_t f = 0;
    for (uint32_t r = 0; r < n; r++) {
      nexar_relay_stats rs;
      CHECK(nexar_relay_stats_get(w.c[r], &rs) == 0, "relay stats");
      f += rs.forwarded_bytes;
    }
    printf("topo %d k %u n %u: collectives relayed %llu bytes\n", topo, k, n,
           (unsigned long long)f);
    /* on k-regular the all-to-all of 4 elements relays (documented); on a
     * power-of-two hypercube nothing does */
    if (topo == NEXAR_TOPO_HYPERCUBE)
      CHECK(!neighbour_only || f == 0, "collectives relayed %llu bytes", (unsigned long long)f);
    else
      CHECK(f < 4096ull * n * n, "collectives relayed %llu bytes", (unsigned long long)f);
  }
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

/* Hypercube of 8: segments for rank 3 handed to its relay code as if they
 * came from its neighbour 1. A genuine one from rank 0 is delivered; one the
 * relay signed itself but claims comes from 0, a tampered one and a replay
 * are dropped and counted; a TTL that ran out is dropped; garbage is
 * PROTOCOL. */
static void forged(void) {
  nexar_client *c[8];
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.topology = NEXAR_TOPO_HYPERCUBE;
  CHECK(nexar_bootstrap_local(c, 8, &cfg) == 0, "bootstrap");
  nx_ep *e0 = c[0]->ep, *e1 = c[1]->ep, *e3 = c[3]->ep;
  nx_frame f = {0};
  f.kind = NX_KIND_P2P;
  f.tag = 77;
  uint8_t *seg = NULL, *fake = NULL;
  size_t n = 0, fn = 0;
  pthread_mutex_lock(&e0->mu);
  CHECK(nx_relay_test_message(e0, 3, 1000, &f, "hello", 5, &seg, &n, 1) == 1, "genuine");
  pthread_mutex_unlock(&e0->mu);
  pthread_mutex_lock(&e1->mu);
  CHECK(nx_relay_test_message(e1, 3, 1001, &f, "HELLO", 5, &fake, &fn, 1) == 1, "relay's own");
  pthread_mutex_unlock(&e1->mu);
  fake[4] = 0; /* origin: claims rank 0 */
  nexar_relay_stats st0, st;
  nexar_relay_stats_get(c[3], &st0);
  pthread_mutex_lock(&e3->mu);
  nx_peer *from = e3->peers[1];
  CHECK(nx_relay_deliver_locked(e3, from, seg, n) == 0, "deliver genuine");
  CHECK(nx_relay_deliver_locked(e3, from, fake, fn) == 0, "deliver forged");
  CHECK(nx_relay_deliver_locked(e3, from, seg, n) == 0, "deliver replay");
  uint8_t *t = malloc(n);
  memcpy(t, seg, n);
  t[16] = 0xee; /* a new sequence number the signature does not cover */
  CHECK(nx_relay_deliver_locked(e3, from, t, n) == 0, "deliver tampered");
  memcpy(t, seg, n);
  t[8] = 7, t[2] = 1; /* for rank 7, TTL 1: not forwarded */
  CHECK(nx_relay_deliver_locked(e3, from, t, n) == 0, "deliver ttl");
  CHECK(nx_relay_deliver_locked(e3, from, t, 30) == NEXAR_ERR_PROTOCOL, "truncated");
  pthread_mutex_unlock(&e3->mu);
  char buf[5];
  CHECK(nexar_recv(c[3], buf, 5, 0, 77) == 0 && memcmp(buf, "hello", 5) == 0, "genuine arrives");
  /* three segments, only the first and last signed: a middle one altered on
   * the way fails the receive at the last; the genuine message then arrives */
  size_t big = 300000, ml[2][4];
  uint8_t *pay = malloc(big), *got = malloc(big), *ms[2][4];
  for (size_t i = 0; i < big; i++)
    pay[i] = (uint8_t)(i * 7);
  f.tag = 78;
  pthread_mutex_lock(&e0->mu);
  int k0 = nx_relay_test_message(e0, 3, 1002, &f, pay, big, ms[0], ml[0], 4);
  int k1 = nx_relay_test_message(e0, 3, 1003, &f, pay, big, ms[1], ml[1], 4);
  pthread_mutex_unlock(&e0->mu);
  CHECK(k0 == 3 && k1 == 3, "3 segments (%d, %d)", k0, k1);
  nexar_request *rq = NULL;
  CHECK(nexar_recv_nb(c[3], got, big, 0, 78, &rq) == 0, "recv_nb");
  if (k0 == 3) ms[0][1][200] ^= 1; /* a payload byte of the middle segment */
  pthread_mutex_lock(&e3->mu);
  for (int i = 0; i < k0; i++)
    nx_relay_deliver_locked(e3, from, ms[0][i], ml[0][i]);
  pthread_mutex_unlock(&e3->mu);
  CHECK(nexar_wait(rq) == NEXAR_ERR_PROTOCOL, "altered middle segment fails the receive");
  pthread_mutex_lock(&e3->mu);
  for (int i = 0; i < k1; i++)
    nx_relay_deliver_locked(e3, from, ms[1][i], ml[1][i]);
  pthread_mutex_unlock(&e3->mu);
  CHECK(nexar_recv(c[3], got, big, 0, 78) == 0 && memcmp(got, pay, big) == 0,
        "the genuine 3-segment message arrives");
  for (int m = 0; m < 2; m++)
    for (int i = 0; i < (m ? k1 : k0); i++)
      free(ms[m][i]);
  free(pay), free(got);
  nexar_relay_stats_get(c[3], &st);
  CHECK(st.dropped_auth == st0.dropped_auth + 4, "dropped_auth %llu -> %llu (want +4)",
        (unsigned long long)st0.dropped_auth, (unsigned long long)st.dropped_auth);
  CHECK(st.dropped_ttl == st0.dropped_ttl + 1, "dropped_ttl");
  printf("forged: %llu dropped (forged, replayed, tampered, altered middle), %llu TTL\n",
         (unsigned long long)(st.dropped_auth - st0.dropped_auth),
         (unsigned long long)(st.dropped_ttl - st0.dropped_ttl));
  free(t), free(seg), free(fake);
  for (int r = 0; r < 8; r++)
    nexar_client_del(c[r]);
}

/* A zero-copy relayed send that times out (its destination's engine is held
 * still) stops reading the caller's buffer at once: the buffer is freed
 * right after the call returns (ASan catches any later read), the
 * destination drops the part it got, and the next message arrives. */
typedef struct stall_arg {
  nexar_client *c;
  uint8_t *buf;
  size_t len;
  int rc;
} stall_arg;

static void *stall_send(void *p) {
  stall_arg *a = p;
  a->rc = nexar_send(a->c, a->buf, a->len, 3, 90);
  return NULL;
}

static void cancelled(void) {
  nexar_client *c[8];
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.topology = NEXAR_TOPO_HYPERCUBE;
  cfg.collective_timeout_ms = 800;
  CHECK(nexar_bootstrap_local(c, 8, &cfg) == 0, "bootstrap");
  stall_arg a = {c[0], calloc(1, 4u << 20), 4u << 20, 0};
  pthread_mutex_lock(&c[3]->ep->mu); /* rank 3 stops: the flow's window fills */
  pthread_t t;
  pthread_create(&t, NULL, stall_send, &a);
  pthread_join(t, NULL);
  free(a.buf);
  pthread_mutex_unlock(&c[3]->ep->mu);
  CHECK(a.rc == NEXAR_ERR_TIMEOUT, "stalled relayed send: %d, want TIMEOUT", a.rc);
  char buf[2] = {0};
  CHECK(nexar_send(c[0], "k", 2, 3, 91) == 0, "send after the timeout");
  CHECK(nexar_recv(c[3], buf, 2, 0, 91) == 0 && buf[0] == 'k', "the next message arrives");
  for (int r = 0; r < 8; r++)
    nexar_client_del(c[r]);
  printf("cancelled: a stalled relayed send timed out and let go of its buffer\n");
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
  forged();
  cancelled();
  if (g_fail) {
    printf("sparse_local_test: %d failures\n", g_fail);
    return 1;
  }
  printf("sparse_local_test: ok\n");
  return 0;
}
