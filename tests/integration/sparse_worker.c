/*
 * One rank of the sparse-topology tests (sparse_test.sh), written against the
 * public API only: nexar.h and API.md "Topologies" (K_REGULAR connects r to
 * r +- 1 .. r +- K/2 mod world, HYPERCUBE r to r XOR 2^i below the world; a
 * rank connects only to its neighbours, and p2p, RPC and collectives to any
 * rank are relayed along shortest paths of live neighbours), and the
 * nexar_peer_stats fields neighbor and relayed_bytes.
 *
 *   sparse_worker MODE [--max-seconds S] [--big-mib M] [--recover-bound-ms B]
 *                      [--max-ratio-pct P] [--min-near-ms T]
 *   sparse_worker echo PORT SECONDS   harness: UDP and TCP echo on PORT
 *   sparse_worker probe HOST PORT     harness: exit 0 if HOST answers on UDP
 *                                     and TCP within 700 ms, else 1
 *
 * The topology comes from the environment (NEXAR_TOPOLOGY, read through
 * nexar_config_default); the worker computes the graph, distances and next
 * hops itself from the documented rule (next hop: among the live neighbours on
 * a shortest path, the lowest rank). It joins with nexar_init_from_env, checks
 * that its rank is NEXAR_RANK and its world NEXAR_WORLD_SIZE, meets the others
 * at a barrier and prints "rank R: ready pid P world N topology T".
 *
 * MODE ops: allreduce SUM f32 of 1 KiB and M MiB (default 32; small integers,
 * so the sums are exact), broadcast from several roots, reduce_scatter,
 * all_gather, all_to_all, barrier, p2p between every ordered pair (a small and
 * a 64 KiB message each, 4 MiB for the pairs farthest apart from ranks 0, 1
 * and N-1; bytes encode (src, dst, len, offset)), RPC between every pair; the
 * neighbor flag of every peer is checked against the graph before and after,
 * then "rank R: relayed to P: B bytes" per peer and "rank R: relayed total B"
 * (bytes relayed to a peer that is not a neighbour fail the run).
 *
 * MODE kill_relay: src 0, dst the lowest rank two hops away, relay R the next
 * hop from 0 to dst (printed as "rank X: plan src=0 dst=D relay=R"). src
 * streams 16 MiB messages to dst; the script SIGKILLs R. src must fail with
 * PEER_LOST naming "rank R" ("rank 0: stream failed with CODE at U: why"); a
 * 64 KiB p2p right after to dst must succeed (around R); then every survivor
 * calls nexar_recover and runs the ops suite on the new view (smaller sizes).
 * The other ranks wait for a go message from src (or a revoke) first.
 *
 * MODE partition: small allreduces in a loop; the script kills ranks (k_regular
 * K=2 N=6: 1 and 4 split the ring); on the first failure the survivors call
 * nexar_recover, which must fail with ABORTED naming "partitioned" within B ms
 * (default 6000); a view forming is a failure.
 *
 * MODE close: every rank but 0 and the one farthest from it (dst) deletes its
 * client right after the first barrier and exits; 0 waits 500 ms, sends 1 KiB
 * (copied at once) and 256 KiB to dst and deletes its client; dst must
 * receive both intact. The relays on the way must still forward: a rank that
 * closes stays until no rank can still need it ("rank R: closed in T ms").
 *
 * MODE cut: rank 0 times 16 MiB (plus a 4-byte ack) to its lowest neighbour
 * and to the lowest rank farthest from it (twice each, the faster kept), prints
 * "rank 0: cut near=A hops=1 T ms far=B hops=H T ms ratio X" and requires
 * ratio < P/100 (default 150) and the near time >= T (default 0: unchecked).
 *
 * SPARSE_GRAPH (full_mesh | hypercube | k_regular:K), for debugging the
 * harness, replaces the configured topology in the worker's own plans and
 * expectations (the library still gets NEXAR_TOPOLOGY).
 *
 * On a recovered view the expected graph follows SPARSE_VIEW_GRAPH: "live"
 * (default; the first world's graph without the dead, in world ranks) or
 * "renumbered" (the topology rebuilt over the new world's ranks).
 *
 * Exit codes: 0 pass, 2 watchdog (S seconds, default 90), 3 wrong rank or
 * world, 4 wrong data, 5 an operation failed, 6 an expectation failed
 * (neighbor flag, error code or message, timing), 10 init_from_env failed
 * ("rank R: init_from_env -> CODE: why"), 64 usage.
 */
#include <nexar/nexar.h>

#include "codes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_WORLD 64
#define FN_ECHO 0x5a1
#define TAG_SMALL 1001u
#define TAG_MID 1002u
#define TAG_BIG 1003u
#define TAG_LOOP 2001u
#define TAG_AFTER 2002u
#define TAG_GO 2003u
#define TAG_CUT 3001u
#define TAG_ACK 3002u
#define STREAM_BYTES (16u << 20)
#define AFTER_BYTES (64u << 10)

static uint32_t g_rank;        /* world rank, for messages */
static int g_topo, g_lib_topo; /* the graph expected; the library's (the config) */
static uint32_t g_degree, g_world0;

/* ------------------------------------------------------------ the graph */

/* 1 if a and b are neighbours in a world of n (API.md "Topologies"). */
static int adjacent(int topo, uint32_t k, uint32_t n, uint32_t a, uint32_t b) {
  if (a == b || a >= n || b >= n) return 0;
  if (topo == NEXAR_TOPO_HYPERCUBE) {
    uint32_t x = a ^ b;
    return (x & (x - 1)) == 0;
  }
  if (topo == NEXAR_TOPO_K_REGULAR) {
    uint32_t d = a > b ? a - b : b - a;
    if (n - d < d) d = n - d;
    return d <= k / 2;
  }
  return 1;
}

/* The view a communicator stands for: its members' world ranks. */
typedef struct view {
  uint32_t n, me;
  uint32_t members[MAX_WORLD];
  int renumbered; /* expected graph rebuilt over the view's own ranks */
} view;

static int view_adjacent(const view *v, uint32_t i, uint32_t j) {
  if (v->renumbered) return adjacent(g_topo, g_degree, v->n, i, j);
  return adjacent(g_topo, g_degree, g_world0, v->members[i], v->members[j]);
}

/* Hop counts from src over v's graph without dead (v->n bytes or NULL);
 * UINT32_MAX when unreachable. */
static void distances(const view *v, uint32_t src, const uint8_t *dead, uint32_t *dist) {
  uint32_t n = v->n, q[MAX_WORLD], qh = 0, qt = 0;
  for (uint32_t x = 0; x < n; x++)
    dist[x] = UINT32_MAX;
  dist[src] = 0;
  q[qt++] = src;
  while (qh < qt) {
    uint32_t u = q[qh++];
    for (uint32_t x = 0; x < n; x++)
      if (dist[x] == UINT32_MAX && !(dead && dead[x]) && view_adjacent(v, u, x)) {
        dist[x] = dist[u] + 1;
        q[qt++] = x;
      }
  }
}

static uint32_t distance(const view *v, uint32_t a, uint32_t b, const uint8_t *dead) {
  uint32_t d[MAX_WORLD];
  distances(v, b, dead, d);
  return d[a];
}

/* The documented next hop from a to b: among a's live neighbours on a
 * shortest path, the lowest rank. */
static uint32_t next_hop(const view *v, uint32_t a, uint32_t b, const uint8_t *dead) {
  uint32_t d[MAX_WORLD];
  distances(v, b, dead, d);
  for (uint32_t x = 0; x < v->n; x++)
    if (!(dead && dead[x]) && view_adjacent(v, a, x) && d[x] != UINT32_MAX && d[x] + 1 == d[a])
      return x;
  return UINT32_MAX;
}

static const char *topo_name(void) {
  static char b[32];
  if (g_topo == NEXAR_TOPO_HYPERCUBE) return "hypercube";
  if (g_topo == NEXAR_TOPO_K_REGULAR) {
    snprintf(b, sizeof b, "k_regular:%u", g_degree);
    return b;
  }
  return "full_mesh";
}

/* -------------------------------------------------------------- helpers */

static void watchdog(int sig) {
  (void)sig;
  static const char m[] = "sparse_worker: watchdog: max seconds passed\n";
  ssize_t w = write(1, m, sizeof m - 1);
  (void)w;
  _exit(2);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  va_list ap;
  printf("rank %u: ", g_rank);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
  fflush(stdout);
}

/* An operation failed: report and exit 5. */
static void op_fail(const char *what, int rc) {
  say("FAIL %s -> %s: %s", what, code_name(rc), nexar_last_error());
  exit(5);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    say("FAIL out of memory (%zu bytes)", n);
    exit(5);
  }
  return p;
}

/* Byte k of a message src -> dst of len bytes. */
static uint8_t pat(uint32_t src, uint32_t dst, size_t len, size_t k) {
  uint32_t h = (uint32_t)k * 2654435761u ^ src << 24 ^ dst << 16 ^ (uint32_t)len * 40503u;
  return (uint8_t)(h >> 24 ^ h >> 9 ^ (uint32_t)(k >> 12));
}

static void fill(uint8_t *b, uint32_t src, uint32_t dst, size_t len) {
  for (size_t k = 0; k < len; k++)
    b[k] = pat(src, dst, len, k);
}

/* 0 if b holds the message src -> dst of len bytes, else reports and exits 4. */
static void check_pat(const char *what, const uint8_t *b, uint32_t src, uint32_t dst, size_t len) {
  for (size_t k = 0; k < len; k++)
    if (b[k] != pat(src, dst, len, k)) {
      say("FAIL %s: %zu-byte message %u -> %u: byte %zu is 0x%02x, want 0x%02x", what, len, src,
          dst, k, b[k], pat(src, dst, len, k));
      exit(4);
    }
}

/* ------------------------------------------------------------ neighbours */

static int check_neighbors(nexar_client *c, const view *v, const char *when) {
  int bad = 0;
  for (uint32_t p = 0; p < v->n; p++) {
    if (p == v->me) continue;
    nexar_peer_stats st;
    memset(&st, 0, sizeof st);
    int rc = nexar_peer_stats_get(c, p, &st);
    if (rc) op_fail("peer_stats_get", rc);
#ifdef SPARSE_HAVE_NEIGHBOR_STATS
    int want = view_adjacent(v, v->me, p);
    if (!!st.neighbor != want) {
      say("FAIL neighbor %s: peer %u (world rank %u) has neighbor=%d, the %s graph says %d", when,
          p, v->members[p], st.neighbor, topo_name(), want);
      bad = 1;
    }
#endif
  }
#ifndef SPARSE_HAVE_NEIGHBOR_STATS
  if (g_lib_topo != NEXAR_TOPO_FULL_MESH) {
    say("FAIL neighbor %s: this build's nexar.h has no nexar_peer_stats.neighbor", when);
    bad = 1;
  } else {
    say("note: nexar.h has no nexar_peer_stats.neighbor yet: neighbor check skipped (full mesh)");
  }
#endif
  if (bad) exit(6);
  return 0;
}

/* Prints what this rank forwarded to each peer; forwarding to a peer that is
 * not a neighbour is a failure (exit 6): a relay hands frames to a neighbour. */
static void print_relayed(nexar_client *c, const view *v) {
  uint64_t total = 0;
  int bad = 0;
  for (uint32_t p = 0; p < v->n; p++) {
    if (p == v->me) continue;
    nexar_peer_stats st;
    memset(&st, 0, sizeof st);
    if (nexar_peer_stats_get(c, p, &st)) continue;
#ifdef SPARSE_HAVE_NEIGHBOR_STATS
    say("relayed to %u: %llu bytes (neighbor %d)", v->members[p],
        (unsigned long long)st.relayed_bytes, st.neighbor);
    total += st.relayed_bytes;
    if (st.relayed_bytes && !view_adjacent(v, v->me, p)) {
      say("FAIL relayed %llu bytes to %u, which is not a neighbour",
          (unsigned long long)st.relayed_bytes, v->members[p]);
      bad = 1;
    }
#endif
  }
  say("relayed total %llu", (unsigned long long)total);
  if (bad) exit(6);
}

/* ----------------------------------------------------------- collectives */

static void t_allreduce(nexar_client *c, const view *v, size_t bytes) {
  size_t count = bytes / sizeof(float);
  float *b = xmalloc(count * sizeof *b);
  for (size_t i = 0; i < count; i++)
    b[i] = (float)((i % 1024) + v->me);
  int rc = nexar_all_reduce(c, b, count, NEXAR_F32, NEXAR_SUM);
  if (rc) op_fail("all_reduce", rc);
  for (size_t i = 0; i < count; i++) {
    float want = (float)(v->n * (i % 1024) + v->n * (v->n - 1) / 2);
    if (b[i] != want) {
      say("FAIL all_reduce %zu bytes: element %zu = %g, want %g", bytes, i, (double)b[i],
          (double)want);
      exit(4);
    }
  }
  free(b);
  say("ok all_reduce f32 %zu bytes", bytes);
}

static void t_broadcast(nexar_client *c, const view *v) {
  uint32_t roots[3] = {0, v->n / 2, v->n - 1};
  for (int k = 0; k < 3; k++) {
    uint32_t root = roots[k];
    if (k && root == roots[k - 1]) continue;
    size_t count = k == 2 ? (1u << 18) : 4096; /* 1 MiB from the last root */
    uint32_t *b = xmalloc(count * sizeof *b);
    for (size_t i = 0; i < count; i++)
      b[i] = v->me == root ? root * 1000003u + (uint32_t)i : 0xdeadbeefu;
    int rc = nexar_broadcast(c, b, count, NEXAR_U32, root);
    if (rc) op_fail("broadcast", rc);
    for (size_t i = 0; i < count; i++)
      if (b[i] != root * 1000003u + (uint32_t)i) {
        say("FAIL broadcast from %u: element %zu = %u", root, i, b[i]);
        exit(4);
      }
    free(b);
  }
  say("ok broadcast from 0, %u, %u", v->n / 2, v->n - 1);
}

static void t_reduce_scatter(nexar_client *c, const view *v) {
  size_t count = 1024, n = v->n;
  uint32_t *s = xmalloc(count * n * sizeof *s), *r = xmalloc(count * sizeof *r);
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < count; i++)
      s[j * count + i] = (uint32_t)(v->me + j + i);
  int rc = nexar_reduce_scatter(c, s, r, count, NEXAR_U32, NEXAR_SUM);
  if (rc) op_fail("reduce_scatter", rc);
  for (size_t i = 0; i < count; i++) {
    uint32_t want = (uint32_t)(n * (n - 1) / 2 + n * (v->me + i));
    if (r[i] != want) {
      say("FAIL reduce_scatter: element %zu = %u, want %u", i, r[i], want);
      exit(4);
    }
  }
  free(s), free(r);
  say("ok reduce_scatter");
}

static void t_all_gather(nexar_client *c, const view *v) {
  size_t count = 512, n = v->n;
  uint32_t *s = xmalloc(count * sizeof *s), *r = xmalloc(count * n * sizeof *r);
  for (size_t i = 0; i < count; i++)
    s[i] = v->me * 65536u + (uint32_t)i;
  int rc = nexar_all_gather(c, s, r, count, NEXAR_U32);
  if (rc) op_fail("all_gather", rc);
  for (size_t q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      if (r[q * count + i] != (uint32_t)(q * 65536u + i)) {
        say("FAIL all_gather: block %zu element %zu = %u", q, i, r[q * count + i]);
        exit(4);
      }
  free(s), free(r);
  say("ok all_gather");
}

static void t_all_to_all(nexar_client *c, const view *v) {
  size_t count = 256, n = v->n;
  uint32_t *s = xmalloc(count * n * sizeof *s), *r = xmalloc(count * n * sizeof *r);
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < count; i++)
      s[j * count + i] = (uint32_t)(v->me * 1000000u + j * 1000u + i);
  int rc = nexar_all_to_all(c, s, r, count, NEXAR_U32);
  if (rc) op_fail("all_to_all", rc);
  for (size_t q = 0; q < n; q++)
    for (size_t i = 0; i < count; i++)
      if (r[q * count + i] != (uint32_t)(q * 1000000u + v->me * 1000u + i)) {
        say("FAIL all_to_all: block from %zu element %zu = %u", q, i, r[q * count + i]);
        exit(4);
      }
  free(s), free(r);
  say("ok all_to_all");
}

/* ------------------------------------------------------------------ p2p */

/* The rank farthest from a (the lowest of them), on the view's graph. */
static uint32_t farthest(const view *v, uint32_t a) {
  uint32_t best = a == 0 ? 1 : 0, bd = 0, d[MAX_WORLD];
  distances(v, a, NULL, d);
  for (uint32_t b = 0; b < v->n; b++)
    if (b != a && d[b] != UINT32_MAX && d[b] > bd) bd = d[b], best = b;
  return best;
}

/* 1 if src -> dst also carries a 4 MiB message. */
static int big_pair(const view *v, uint32_t src, uint32_t dst) {
  uint32_t s[3] = {0, 1, v->n - 1};
  for (int i = 0; i < 3; i++) {
    if (s[i] >= v->n) continue;
    uint32_t f = farthest(v, s[i]);
    if ((src == s[i] && dst == f) || (dst == s[i] && src == f)) return 1;
  }
  return 0;
}

static size_t len_of(int kind, uint32_t src, uint32_t dst, uint32_t n) {
  if (kind == 0) return 1 + (src * 7u + dst * 3u) % 61u;
  if (kind == 1) return (64u << 10) + src * n + dst + 1;
  return (4u << 20) + src + dst;
}

typedef struct xfer {
  nexar_request *req;
  uint8_t *buf;
  uint32_t peer;
  int kind, is_recv;
  size_t len;
} xfer;

static void t_p2p(nexar_client *c, const view *v) {
  uint32_t n = v->n, me = v->me;
  xfer *x = xmalloc(sizeof *x * 6 * n);
  size_t nx = 0, bytes = 0;
  static const uint32_t tags[3] = {TAG_SMALL, TAG_MID, TAG_BIG};
  for (int pass = 0; pass < 2; pass++) /* every receive posted before any send */
    for (uint32_t p = 0; p < n; p++) {
      if (p == me) continue;
      for (int kind = 0; kind < 3; kind++) {
        uint32_t src = pass ? me : p, dst = pass ? p : me;
        if (kind == 2 && !big_pair(v, src, dst)) continue;
        xfer *t = &x[nx++];
        *t = (xfer){.peer = p, .kind = kind, .is_recv = !pass, .len = len_of(kind, src, dst, n)};
        t->buf = xmalloc(t->len);
        int rc;
        if (pass) {
          fill(t->buf, src, dst, t->len);
          rc = nexar_send_nb(c, t->buf, t->len, p, tags[kind], &t->req);
        } else {
          memset(t->buf, 0, t->len);
          rc = nexar_recv_nb(c, t->buf, t->len, p, tags[kind], &t->req);
        }
        if (rc) {
          char w[96];
          snprintf(w, sizeof w, "%s_nb %zu bytes %s rank %u", pass ? "send" : "recv", t->len,
                   pass ? "to" : "from", p);
          op_fail(w, rc);
        }
      }
    }
  for (size_t i = 0; i < nx; i++) {
    xfer *t = &x[i];
    int rc = nexar_wait(t->req);
    char w[96];
    snprintf(w, sizeof w, "p2p %s %zu bytes %s rank %u (world %u)", t->is_recv ? "recv" : "send",
             t->len, t->is_recv ? "from" : "to", t->peer, v->members[t->peer]);
    if (rc) op_fail(w, rc);
    if (t->is_recv) {
      check_pat(w, t->buf, t->peer, me, t->len);
      bytes += t->len;
    }
    free(t->buf);
  }
  free(x);
  say("ok p2p every ordered pair (%zu bytes received)", bytes);
}

/* ------------------------------------------------------------------ RPC */

/* Reply: {callee world rank, caller, args_len} then args reversed ^ 0xA5. */
static int h_echo(void *ctx, uint32_t caller, const void *args, size_t args_len, void **reply,
                  size_t *reply_len) {
  (void)ctx;
  uint8_t *r = malloc(12 + args_len);
  if (!r) return -1;
  uint32_t hdr[3] = {g_rank, caller, (uint32_t)args_len};
  memcpy(r, hdr, sizeof hdr);
  const uint8_t *a = args;
  for (size_t i = 0; i < args_len; i++)
    r[12 + i] = (uint8_t)(a[args_len - 1 - i] ^ 0xA5);
  *reply = r;
  *reply_len = 12 + args_len;
  return 0;
}

static void t_rpc(nexar_client *c, const view *v) {
  uint32_t n = v->n, me = v->me;
  for (uint32_t p = 0; p < n; p++) {
    if (p == me) continue;
    size_t len = 100 + me * n + p;
    if (big_pair(v, me, p)) len = (64u << 10) + p;
    uint8_t *a = xmalloc(len);
    fill(a, me, p, len);
    void *reply = NULL;
    size_t rlen = 0;
    int rc = nexar_rpc(c, p, FN_ECHO, a, len, &reply, &rlen);
    char w[80];
    snprintf(w, sizeof w, "rpc to rank %u (world %u), %zu bytes", p, v->members[p], len);
    if (rc) op_fail(w, rc);
    uint32_t hdr[3] = {0, 0, 0};
    if (rlen == 12 + len) memcpy(hdr, reply, sizeof hdr);
    if (rlen != 12 + len || hdr[0] != v->members[p] || hdr[1] != me || hdr[2] != len) {
      say("FAIL %s: reply of %zu bytes, header callee %u caller %u len %u", w, rlen, hdr[0], hdr[1],
          hdr[2]);
      exit(4);
    }
    const uint8_t *r = (const uint8_t *)reply + 12;
    for (size_t i = 0; i < len; i++)
      if (r[i] != (uint8_t)(a[len - 1 - i] ^ 0xA5)) {
        say("FAIL %s: reply byte %zu wrong", w, i);
        exit(4);
      }
    nexar_free(reply);
    free(a);
  }
  say("ok rpc to every rank");
}

/* The whole suite on c; big: the large allreduce's size. */
static void run_ops(nexar_client *c, const view *v, size_t big) {
  int rc = nexar_rpc_register(c, FN_ECHO, h_echo, NULL);
  if (rc) op_fail("rpc_register", rc);
  check_neighbors(c, v, "before the ops");
  t_allreduce(c, v, 1024);
  t_allreduce(c, v, big);
  t_broadcast(c, v);
  t_reduce_scatter(c, v);
  t_all_gather(c, v);
  t_all_to_all(c, v);
  if ((rc = nexar_barrier(c))) op_fail("barrier", rc);
  say("ok barrier");
  t_p2p(c, v);
  if ((rc = nexar_barrier(c))) op_fail("barrier", rc); /* every handler registered */
  t_rpc(c, v);
  if ((rc = nexar_barrier(c))) op_fail("barrier", rc); /* nobody is still calling us */
  check_neighbors(c, v, "after the ops");
  if ((rc = nexar_barrier(c))) op_fail("barrier", rc); /* nobody has left during the check */
  print_relayed(c, v);
}

/* Fills v for c: the members' world ranks by an all_gather. */
static void learn_view(nexar_client *c, view *v, int renumbered) {
  v->n = nexar_world_size(c);
  v->me = nexar_rank(c);
  v->renumbered = renumbered;
  if (v->n > MAX_WORLD) {
    say("FAIL world %u over %u", v->n, MAX_WORLD);
    exit(6);
  }
  uint32_t mine = g_rank;
  int rc = nexar_all_gather(c, &mine, v->members, 1, NEXAR_U32);
  if (rc) op_fail("all_gather of the view's members", rc);
}

/* ------------------------------------------------------------ kill_relay */

/* 1 if msg names "rank R" (not a longer number). */
/* "rank R" or "relay R" (the library says "send to rank D via relay R") */
static int names_rank(const char *msg, uint32_t r) {
  for (int k = 0; k < 2; k++) {
    char w[24];
    snprintf(w, sizeof w, k ? "relay %u" : "rank %u", r);
    for (const char *p = strstr(msg, w); p; p = strstr(p + 1, w)) {
      char after = p[strlen(w)];
      if (after < '0' || after > '9') return 1;
    }
  }
  return 0;
}

static int kill_relay(nexar_client *c, const view *v0, size_t big) {
  uint32_t n = g_world0, src = 0, dst = UINT32_MAX;
  for (uint32_t b = 0; b < n && dst == UINT32_MAX; b++)
    if (distance(v0, src, b, NULL) == 2) dst = b;
  if (dst == UINT32_MAX) {
    say("FAIL kill_relay: no rank two hops from 0 in %s over %u", topo_name(), n);
    exit(6);
  }
  uint32_t relay = next_hop(v0, src, dst, NULL);
  uint8_t dead[MAX_WORLD] = {0};
  dead[relay] = 1;
  uint32_t alt = next_hop(v0, src, dst, dead);
  say("plan src=%u dst=%u relay=%u alt=%u", src, dst, relay, alt);
  int bad = 0, rc;
  nexar_request *pending = NULL;
  void *pending_buf = NULL;
  if (g_rank == src) {
    uint8_t *b = xmalloc(STREAM_BYTES);
    fill(b, src, dst, STREAM_BYTES);
    unsigned long sent = 0;
    double t0 = mono_ms();
    for (;;) {
      rc = nexar_send(c, b, STREAM_BYTES, dst, TAG_LOOP);
      if (rc) break;
      if (++sent == 1) say("streaming to %u", dst);
      if (mono_ms() - t0 > 30000) {
        say("FAIL kill_relay: %lu sends to %u in 30 s and none failed", sent, dst);
        exit(6);
      }
    }
    char why[512];
    snprintf(why, sizeof why, "%s", nexar_last_error());
    say("stream failed with %s after %lu sends at %lld: %s", code_name(rc), sent, unix_ms(), why);
    if (rc != NEXAR_ERR_PEER_LOST) {
      say("FAIL kill_relay: the stream failed with %s, want PEER_LOST", code_name(rc));
      bad = 1;
    }
    if (!names_rank(why, relay)) {
      say("FAIL kill_relay: the error does not name the relay (rank %u)", relay);
      bad = 1;
    }
    fill(b, src, dst, AFTER_BYTES);
    rc = nexar_send(c, b, AFTER_BYTES, dst, TAG_AFTER);
    say("p2p after to %u (around %u via %u) -> %s%s%s", dst, relay, alt, code_name(rc),
        rc ? ": " : "", rc ? nexar_last_error() : "");
    if (rc) bad = 1;
    uint32_t go = 1, got_it = 0; /* the others recover (a revoke) only once dst has it */
    if (!rc && (rc = nexar_recv(c, &got_it, sizeof got_it, dst, TAG_GO)))
      say("ack of the p2p after from %u -> %s: %s", dst, code_name(rc), nexar_last_error());
    for (uint32_t p = 0; p < n; p++)
      if (p != src && p != dst && p != relay) (void)nexar_send(c, &go, sizeof go, p, TAG_GO);
    free(b);
  } else if (g_rank == dst) {
    uint8_t *lb = xmalloc(STREAM_BYTES), *ab = xmalloc(AFTER_BYTES);
    nexar_request *after = NULL, *loop = NULL;
    if ((rc = nexar_recv_nb(c, ab, AFTER_BYTES, src, TAG_AFTER, &after))) op_fail("recv_nb", rc);
    unsigned long got = 0;
    int after_done = 0;
    while (!after_done) {
      if (!loop && (rc = nexar_recv_nb(c, lb, STREAM_BYTES, src, TAG_LOOP, &loop))) {
        say("stream recv_nb -> %s: %s", code_name(rc), nexar_last_error());
        loop = NULL;
      }
      int done = 0;
      if (loop && nexar_test(loop, &done) == 0 && done) {
        rc = nexar_wait(loop);
        loop = NULL;
        if (rc) {
          say("stream recv after %lu -> %s: %s", got, code_name(rc), nexar_last_error());
          break; /* no more receives on the stream */
        }
        check_pat("stream", lb, src, dst, STREAM_BYTES);
        got++;
      }
      if (nexar_test(after, &after_done) || !after_done) usleep(1000);
    }
    if (!after_done) (void)nexar_test(after, &after_done);
    rc = nexar_wait(after); /* blocks until the p2p after arrives or c fails */
    say("p2p after from %u -> %s%s%s", src, code_name(rc), rc ? ": " : "",
        rc ? nexar_last_error() : "");
    if (rc)
      bad = 1;
    else
      check_pat("p2p after", ab, src, dst, AFTER_BYTES);
    uint32_t ack = 1;
    if (!rc) (void)nexar_send(c, &ack, sizeof ack, src, TAG_GO);
    free(ab);
    /* lb may still belong to a pending receive: the revoke by nexar_recover
     * below ends it */
    pending = loop;
    pending_buf = lb;
  } else {
    uint32_t go = 0;
    rc = nexar_recv(c, &go, sizeof go, src, TAG_GO);
    say("go from %u -> %s%s%s", src, code_name(rc), rc ? ": " : "", rc ? nexar_last_error() : "");
  }
  fflush(stdout);
  double t1 = mono_ms();
  nexar_client *nc = NULL;
  rc = nexar_recover(c, &nc);
  if (rc) {
    say("FAIL recover -> %s in %.0f ms: %s", code_name(rc), mono_ms() - t1, nexar_last_error());
    exit(5);
  }
  double t2 = mono_ms();
  if (pending) { /* the old communicator is revoked: its receive must end */
    rc = nexar_wait(pending);
    say("stream recv pending at the recovery -> %s", code_name(rc));
  }
  free(pending_buf);
  nexar_client_del(c);
  t2 = mono_ms() - t2;
  const char *vg = getenv("SPARSE_VIEW_GRAPH");
  view v;
  learn_view(nc, &v, vg && strcmp(vg, "renumbered") == 0);
  char m[400];
  size_t o = 0;
  for (uint32_t i = 0; i < v.n && o + 12 < sizeof m; i++)
    o += (size_t)snprintf(m + o, sizeof m - o, "%s%u", i ? "," : "", v.members[i]);
  m[o] = 0;
  say("view epoch=%llu world=%u rank=%u members=[%s] in %.0f ms",
      (unsigned long long)nexar_view_epoch(nc), v.n, v.me, m, mono_ms() - t1 - t2);
  if (v.n != n - 1) {
    say("FAIL recover: a view of %u, want %u", v.n, n - 1);
    bad = 1;
  }
  run_ops(nc, &v, big);
  nexar_client_del(nc);
  return bad ? 6 : 0;
}

/* ----------------------------------------------------------------- close */

#define CLOSE_SMALL 1024u
#define CLOSE_BIG (256u << 10)
#define TAG_CLOSE 77u

/* Returns 0, or 5 when an operation failed; exits 4 on wrong data. */
static int close_early(nexar_client *c, const view *v) {
  uint32_t dst = farthest(v, 0);
  int rc = 0;
  if (g_rank == 0) {
    usleep(500 * 1000); /* the others are closing by now */
    uint8_t *a = xmalloc(CLOSE_SMALL), *b = xmalloc(CLOSE_BIG);
    fill(a, 0, dst, CLOSE_SMALL);
    fill(b, 0, dst, CLOSE_BIG);
    rc = nexar_send(c, a, CLOSE_SMALL, dst, TAG_CLOSE);
    if (!rc) rc = nexar_send(c, b, CLOSE_BIG, dst, TAG_CLOSE);
    say("close: sends to %u -> %s%s%s", dst, code_name(rc), rc ? ": " : "",
        rc ? nexar_last_error() : "");
    free(a);
    free(b);
  } else if (g_rank == dst) {
    uint8_t *a = xmalloc(CLOSE_SMALL), *b = xmalloc(CLOSE_BIG);
    rc = nexar_recv(c, a, CLOSE_SMALL, 0, TAG_CLOSE);
    if (!rc) rc = nexar_recv(c, b, CLOSE_BIG, 0, TAG_CLOSE);
    say("close: receives from 0 -> %s%s%s", code_name(rc), rc ? ": " : "",
        rc ? nexar_last_error() : "");
    if (!rc) {
      check_pat("close small", a, 0, dst, CLOSE_SMALL);
      check_pat("close big", b, 0, dst, CLOSE_BIG);
    }
    free(a);
    free(b);
  }
  double t0 = mono_ms();
  nexar_client_del(c);
  say("closed in %.0f ms", mono_ms() - t0);
  return rc ? 5 : 0;
}

/* ------------------------------------------------------------- partition */

static int partition(nexar_client *c, unsigned long bound_ms) {
  float b[256];
  int rc;
  unsigned long it = 0;
  double t0 = mono_ms();
  for (;; it++) {
    for (int i = 0; i < 256; i++)
      b[i] = 1.0f;
    rc = nexar_all_reduce(c, b, 256, NEXAR_F32, NEXAR_SUM);
    if (rc) break;
    if (it == 0) say("looping");
    usleep(10000);
    if (mono_ms() - t0 > 30000) {
      say("FAIL partition: no failure within 30 s");
      exit(6);
    }
  }
  say("op failed with %s after %lu rounds at %lld: %s", code_name(rc), it, unix_ms(),
      nexar_last_error());
  double t1 = mono_ms();
  nexar_client *nc = NULL;
  rc = nexar_recover(c, &nc);
  double dt = mono_ms() - t1;
  char why[512];
  snprintf(why, sizeof why, "%s", rc ? nexar_last_error() : "");
  say("recover -> %s in %.0f ms: %s", code_name(rc), dt, why);
  if (rc == 0) {
    say("FAIL partition: a view of %u formed across a split graph", nexar_world_size(nc));
    return 6;
  }
  int bad = 0;
  if (rc != NEXAR_ERR_ABORTED) say("FAIL partition: recover -> %s, want ABORTED", code_name(rc));
  if (rc != NEXAR_ERR_ABORTED) bad = 1;
  if (!strstr(why, "partitioned")) {
    say("FAIL partition: the message does not say \"partitioned\"");
    bad = 1;
  }
  if (dt > (double)bound_ms) {
    say("FAIL partition: recover took %.0f ms (bound %lu)", dt, bound_ms);
    bad = 1;
  }
  return bad ? 6 : 0;
}

/* ------------------------------------------------------------------ cut */

/* One timed transfer 0 -> t (16 MiB, then a 4-byte ack back); ms on rank 0. */
static double cut_once(nexar_client *c, uint8_t *b, uint32_t t) {
  int rc = nexar_barrier(c);
  if (rc) op_fail("barrier", rc);
  uint32_t ack = 0;
  double ms = 0;
  if (g_rank == 0) {
    fill(b, 0, t, STREAM_BYTES);
    double t0 = mono_ms();
    if ((rc = nexar_send(c, b, STREAM_BYTES, t, TAG_CUT))) op_fail("cut send", rc);
    if ((rc = nexar_recv(c, &ack, sizeof ack, t, TAG_ACK))) op_fail("cut ack recv", rc);
    ms = mono_ms() - t0;
  } else if (g_rank == t) {
    if ((rc = nexar_recv(c, b, STREAM_BYTES, 0, TAG_CUT))) op_fail("cut recv", rc);
    ack = 1;
    if ((rc = nexar_send(c, &ack, sizeof ack, 0, TAG_ACK))) op_fail("cut ack send", rc);
    check_pat("cut", b, 0, t, STREAM_BYTES);
  }
  return ms;
}

static int cut(nexar_client *c, const view *v0, double max_ratio, unsigned long min_near_ms) {
  uint32_t n = g_world0, near = UINT32_MAX, far = 0, fd = 0;
  for (uint32_t b = 1; b < n; b++) {
    uint32_t d = distance(v0, 0, b, NULL);
    if (d == 1 && near == UINT32_MAX) near = b;
    if (d > fd) fd = d, far = b;
  }
  say("plan near=%u far=%u hops=%u", near, far, fd);
  uint8_t *b = xmalloc(STREAM_BYTES);
  double tn = 1e18, tf = 1e18;
  for (int rep = 0; rep < 2; rep++) {
    double x = cut_once(c, b, near), y = cut_once(c, b, far);
    if (x < tn) tn = x;
    if (y < tf) tf = y;
  }
  int rc = nexar_barrier(c);
  if (rc) op_fail("barrier", rc);
  free(b);
  /* a relay holds at most one flow's window: 8 segments of 128 KiB plus their
   * headers, certificate and signature (runtime/relay.c), never the message */
  nexar_relay_stats rs;
  if ((rc = nexar_relay_stats_get(c, &rs))) op_fail("relay_stats", rc);
  const uint64_t window = 8ull * (128u * 1024u + 48u + 4096u + 80u);
  say("relay: forwarded %llu bytes, peak held %llu bytes (bound %llu)",
      (unsigned long long)rs.forwarded_bytes, (unsigned long long)rs.peak_buffered_bytes,
      (unsigned long long)window);
  if (rs.peak_buffered_bytes > window) {
    say("FAIL cut: a relay held %llu bytes, more than a window (%llu)",
        (unsigned long long)rs.peak_buffered_bytes, (unsigned long long)window);
    return 6;
  }
  if (g_rank != 0) return 0;
  /* the window bound above is what rules store-and-forward out; the time
   * ratio (3 hops vs 1: >= 3x when each relay waits for the whole message)
   * backs it up with a margin for relays that share 2 CPUs with 6 ranks */
  double ratio = tf / tn;
  say("cut near=%u hops=1 %.0f ms far=%u hops=%u %.0f ms ratio %.2f", near, tn, far, fd, tf, ratio);
  int bad = 0;
  if (!(ratio < max_ratio)) {
    say("FAIL cut: %u hops take %.2fx one hop (bound %.2f): store-and-forward?", fd, ratio,
        max_ratio);
    bad = 1;
  }
  if (tn < (double)min_near_ms) {
    say("FAIL cut: one hop took %.0f ms, under %lu: is the link shaped?", tn, min_near_ms);
    bad = 1;
  }
  return bad ? 6 : 0;
}

/* ---------------------------------------------------- harness: echo/probe */

static int echo(unsigned long port, unsigned long secs) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  int u = socket(AF_INET, SOCK_DGRAM, 0), t = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (u < 0 || t < 0) return 1;
  setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(u, (struct sockaddr *)&a, sizeof a) || bind(t, (struct sockaddr *)&a, sizeof a) ||
      listen(t, 64)) {
    perror("echo: bind");
    return 1;
  }
  double end = mono_ms() + (double)secs * 1000;
  while (mono_ms() < end) {
    struct pollfd p[2] = {{.fd = u, .events = POLLIN}, {.fd = t, .events = POLLIN}};
    if (poll(p, 2, 100) <= 0) continue;
    if (p[0].revents & POLLIN) {
      char buf[64];
      struct sockaddr_in from;
      socklen_t fl = sizeof from;
      ssize_t k = recvfrom(u, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
      if (k > 0) (void)sendto(u, buf, (size_t)k, 0, (struct sockaddr *)&from, fl);
    }
    if (p[1].revents & POLLIN) {
      int s = accept(t, NULL, NULL);
      if (s >= 0) {
        ssize_t w = write(s, "ok", 2);
        (void)w;
        close(s);
      }
    }
  }
  return 0;
}

static int probe(const char *host, unsigned long port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) return 64;
  int u = socket(AF_INET, SOCK_DGRAM, 0), ok_udp = 0, ok_tcp = 0;
  if (u < 0) return 1;
  for (int tries = 0; tries < 3 && !ok_udp; tries++) {
    (void)sendto(u, "ping", 4, 0, (struct sockaddr *)&a, sizeof a);
    struct pollfd p = {.fd = u, .events = POLLIN};
    char buf[8];
    if (poll(&p, 1, 200) == 1 && recv(u, buf, sizeof buf, 0) == 4) ok_udp = 1;
  }
  close(u);
  int t = socket(AF_INET, SOCK_STREAM, 0);
  if (t < 0) return 1;
  fcntl(t, F_SETFL, O_NONBLOCK);
  if (connect(t, (struct sockaddr *)&a, sizeof a) == 0) {
    ok_tcp = 1;
  } else {
    struct pollfd p = {.fd = t, .events = POLLOUT};
    int err = 0;
    socklen_t el = sizeof err;
    if (poll(&p, 1, 700) == 1 && getsockopt(t, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && !err)
      ok_tcp = 1;
  }
  close(t);
  printf("probe %s:%lu udp=%d tcp=%d\n", host, port, ok_udp, ok_tcp);
  return ok_udp && ok_tcp ? 0 : 1;
}

/* ----------------------------------------------------------------- main */

int main(int argc, char **argv) {
  if (argc < 2) return 64;
  const char *mode = argv[1];
  unsigned long a1, a2;
  if (!strcmp(mode, "echo"))
    return argc == 4 && !parse_u(argv[2], 65535, &a1) && !parse_u(argv[3], 3600, &a2) ? echo(a1, a2)
                                                                                      : 64;
  if (!strcmp(mode, "probe"))
    return argc == 4 && !parse_u(argv[3], 65535, &a1) ? probe(argv[2], a1) : 64;
  if (strcmp(mode, "ops") && strcmp(mode, "kill_relay") && strcmp(mode, "partition") &&
      strcmp(mode, "cut") && strcmp(mode, "close"))
    return 64;
  unsigned long max_s = 90, big_mib = 32, bound_ms = 6000, min_near_ms = 0, ratio_pct = 200;
  for (int i = 2; i < argc; i++) {
    unsigned long *dst = !strcmp(argv[i], "--max-seconds")        ? &max_s
                         : !strcmp(argv[i], "--big-mib")          ? &big_mib
                         : !strcmp(argv[i], "--recover-bound-ms") ? &bound_ms
                         : !strcmp(argv[i], "--min-near-ms")      ? &min_near_ms
                         : !strcmp(argv[i], "--max-ratio-pct")    ? &ratio_pct
                                                                  : NULL;
    if (!dst || i + 1 >= argc || parse_u(argv[++i], 1ul << 20, dst)) return 64;
  }
  unsigned long want_rank, want_world;
  const char *er = getenv("NEXAR_RANK"), *ew = getenv("NEXAR_WORLD_SIZE");
  if (!er || !ew || parse_u(er, MAX_WORLD - 1, &want_rank) || parse_u(ew, MAX_WORLD, &want_world)) {
    printf("sparse_worker: NEXAR_RANK and NEXAR_WORLD_SIZE (<= %d) are required\n", MAX_WORLD);
    return 64;
  }
  g_rank = (uint32_t)want_rank;
  g_world0 = (uint32_t)want_world;
  signal(SIGALRM, watchdog);
  alarm((unsigned)max_s);
  say("start pid %d", (int)getpid());

  nexar_config cfg;
  int rc = nexar_config_default(&cfg);
  if (rc) {
    say("init_from_env -> %s: %s", code_name(rc), nexar_last_error());
    return 10;
  }
  g_topo = g_lib_topo = cfg.topology;
  g_degree = cfg.topology_degree;
  const char *graph = getenv("SPARSE_GRAPH"); /* harness debugging: plans on another graph */
  if (graph && *graph) {
    unsigned long k = 0;
    if (!strcmp(graph, "hypercube"))
      g_topo = NEXAR_TOPO_HYPERCUBE;
    else if (!strncmp(graph, "k_regular:", 10) && !parse_u(graph + 10, MAX_WORLD, &k))
      g_topo = NEXAR_TOPO_K_REGULAR, g_degree = (uint32_t)k;
    else if (!strcmp(graph, "full_mesh"))
      g_topo = NEXAR_TOPO_FULL_MESH;
    else
      return 64;
    say("note: SPARSE_GRAPH=%s: plans and expectations on that graph", graph);
  }
  nexar_client *c = NULL;
  rc = nexar_init_from_env(&c);
  if (rc) {
    say("init_from_env -> %s: %s", code_name(rc), nexar_last_error());
    return 10;
  }
  if (nexar_rank(c) != g_rank || nexar_world_size(c) != g_world0) {
    say("FAIL got rank %u of %u, asked for %u of %u", nexar_rank(c), nexar_world_size(c), g_rank,
        g_world0);
    return 3;
  }
  if ((rc = nexar_barrier(c))) op_fail("first barrier", rc);
  say("ready pid %d world %u topology %s", (int)getpid(), g_world0, topo_name());

  view v = {.n = g_world0, .me = g_rank};
  for (uint32_t i = 0; i < g_world0; i++)
    v.members[i] = i;
  int res = 0;
  if (!strcmp(mode, "ops")) {
    run_ops(c, &v, (size_t)big_mib << 20);
  } else if (!strcmp(mode, "kill_relay")) {
    res = kill_relay(c, &v, (size_t)big_mib << 20);
    c = NULL; /* recovered: its successor was deleted there */
  } else if (!strcmp(mode, "close")) {
    res = close_early(c, &v);
    c = NULL; /* deleted there, timed */
  } else if (!strcmp(mode, "partition")) {
    res = partition(c, bound_ms);
  } else {
    if ((rc = nexar_rpc_register(c, FN_ECHO, h_echo, NULL))) op_fail("rpc_register", rc);
    check_neighbors(c, &v, "before the cut");
    res = cut(c, &v, (double)ratio_pct / 100.0, min_near_ms);
  }
  say("%s", res ? "done with failures" : "done");
  if (c) nexar_client_del(c);
  return res;
}
