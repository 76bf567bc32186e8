/* One rank of a multi-host check (network namespaces): joins through
 * nexar_init_from_env, then point-to-point rings of patterned messages of
 * several sizes, an RPC to the next rank and a final all-to-all handshake.
 * Exit 0 when every byte arrived intact. */
#include <nexar/nexar.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(const char *what, int rc) {
  fprintf(stderr, "mesh_worker: %s: %s (%s)\n", what, nexar_strerror(rc), nexar_last_error());
  return 1;
}

static int echo(void *ctx, uint32_t caller, const void *args, size_t len, void **reply,
                size_t *rlen) {
  (void)ctx, (void)caller;
  *reply = malloc(len ? len : 1);
  if (!*reply) return 1;
  memcpy(*reply, args, len);
  *rlen = len;
  return 0;
}

int main(void) {
  nexar_client *c;
  int rc = nexar_init_from_env(&c);
  if (rc) return fail("init_from_env", rc);
  uint32_t r = nexar_rank(c), n = nexar_world_size(c);
  if ((rc = nexar_rpc_register(c, 1, echo, NULL))) return fail("rpc_register", rc);
  /* MESH_WANT_BULK=1|2: the bulk TCP stream (2: with TLS) must carry the large
   * messages; it is dialled in the background after the mesh is up, so wait
   * for it (to the next and the previous rank) before the rounds */
  const char *want = getenv("MESH_WANT_BULK");
  for (int i = 0; want && i < 500; i++) {
    nexar_peer_stats a, b;
    nexar_peer_stats_get(c, (r + 1) % n, &a);
    nexar_peer_stats_get(c, (r + n - 1) % n, &b);
    if (a.bulk_stream == atoi(want) && b.bulk_stream == atoi(want)) break;
    struct timespec ts = {0, 10000000L};
    nanosleep(&ts, NULL);
  }
  static const size_t sizes[] = {0, 1, 1000, 65536, 1 << 20, 8 << 20};
  uint8_t *out = malloc(8 << 20), *in = malloc(8 << 20);
  if (!out || !in) return 1;
  for (int round = 0; round < 3; round++) {
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
      size_t len = sizes[s];
      for (size_t i = 0; i < len; i++)
        out[i] = (uint8_t)(i * 31 + r * 7 + s + round);
      nexar_request *rq;
      uint32_t prev = (r + n - 1) % n, next = (r + 1) % n;
      if ((rc = nexar_recv_nb(c, in, len, prev, (uint32_t)s, &rq))) return fail("recv_nb", rc);
      if ((rc = nexar_send(c, out, len, next, (uint32_t)s))) return fail("send", rc);
      if ((rc = nexar_wait(rq))) return fail("wait", rc);
      for (size_t i = 0; i < len; i++)
        if (in[i] != (uint8_t)(i * 31 + prev * 7 + s + round)) {
          fprintf(stderr, "mesh_worker: rank %u: byte %zu of %zu from rank %u is wrong\n", r, i,
                  len, prev);
          return 1;
        }
    }
  }
  /* every rank tells every other it is done, so no one leaves early */
  for (uint32_t j = 0; j < n; j++)
    if (j != r && (rc = nexar_send(c, &r, sizeof r, j, 999))) return fail("done send", rc);
  for (uint32_t j = 0; j < n; j++) {
    uint32_t v;
    if (j != r && (rc = nexar_recv(c, &v, sizeof v, j, 999))) return fail("done recv", rc);
  }
  char msg[64];
  snprintf(msg, sizeof msg, "hello from %u", r);
  void *rep;
  size_t rlen;
  if ((rc = nexar_rpc(c, (r + 1) % n, 1, msg, strlen(msg) + 1, &rep, &rlen)))
    return fail("rpc", rc);
  if (rlen != strlen(msg) + 1 || memcmp(rep, msg, rlen)) return fail("rpc reply", -1);
  nexar_free(rep);
  nexar_peer_stats st; /* before the goodbye: a departed peer has no stream */
  nexar_peer_stats_get(c, (r + 1) % n, &st);
  for (uint32_t j = 0; j < n; j++)
    if (j != r && (rc = nexar_send(c, &r, sizeof r, j, 998))) return fail("bye send", rc);
  for (uint32_t j = 0; j < n; j++) {
    uint32_t v;
    if (j != r && (rc = nexar_recv(c, &v, sizeof v, j, 998))) return fail("bye recv", rc);
  }
  printf("mesh_worker: rank %u of %u ok (sent %llu bytes to rank %u, %llu of them on the bulk "
         "path, bulk stream %d, rtt %.0f us)\n",
         r, n, (unsigned long long)st.bytes_sent, (r + 1) % n,
         (unsigned long long)st.bulk_bytes_sent, st.bulk_stream, st.smoothed_rtt_us);
  if (want && (st.bulk_stream != atoi(want) || st.bulk_bytes_sent < 3ull * (8 << 20)))
    return fail("bulk path not used", -1);
  free(out);
  free(in);
  nexar_client_del(c);
  return 0;
}
