/* Allocation failures in the receive order surface as NEXAR_ERR_NOMEM: a
 * stream cancelled before its header whose id cannot be recorded used to be
 * forgotten silently, so every later stream of that peer waited forever.
 * Also: with the record made, later messages are still delivered in order.
 * And a connection whose id cannot enter the connection-id table is not
 * kept (it used to stay, unable to receive, until its handshake timed out). */
#include <stdlib.h>
#include <string.h>

#include "core/frame.h"
#include "runtime/comm.h"

#include "../../fuzz/fuzz_ep.h"
#include "../../fuzz/quic_initial.h"
#include "runtime/quic_glue.h"
#include "transport/quic_int.h"
#include "check.h"

static nx_rxstream *open_stream(nx_ep *ep, int64_t sid) {
  nx_rxstream *rs = NULL;
  nx_rx_stream_open(ep, ep->peers[1], sid, &rs);
  CHECK(rs != NULL, "open stream %lld", (long long)sid);
  return rs;
}

/* a whole 0-byte P2P message with tag on stream sid */
static void message(nx_ep *ep, int64_t sid, uint64_t tag) {
  nx_rxstream *rs = open_stream(ep, sid);
  nx_frame f = {.kind = NX_KIND_P2P, .src = 1, .tag = tag};
  uint8_t hdr[NX_FRAME_HDR_LEN];
  nx_frame_encode(&f, hdr);
  uint64_t credit, held;
  CHECK(nx_rx_stream_data(ep, rs, hdr, sizeof hdr, 1, &credit, &held) == 0, "stream data");
  CHECK(nx_rx_stream_close(ep, rs) == 0, "close after FIN");
}

static int queued(nx_ep *ep, uint64_t tag) {
  for (nx_msg *m = ep->unexp_head; m; m = m->next)
    if (m->f.tag == tag) return 1;
  return 0;
}

int main(void) {
  nx_ep *ep = make_endpoint();
  CHECK(ep, "endpoint");
  ep->peers[1]->rx_next_sid = 0;
  /* stream 4 is cancelled before its header while 0 is outstanding: its id
   * must be recorded; the record's allocation fails */
  nx_rxstream *rs = open_stream(ep, 4);
  nx_realloc_fail_at = 1;
  int rc = nx_rx_stream_close(ep, rs);
  nx_realloc_fail_at = 0;
  CHECK(rc == NEXAR_ERR_NOMEM, "failed record: got %d, want NEXAR_ERR_NOMEM", rc);
  drop_endpoint(ep);

  /* the same with memory: messages on 0 and 8 are delivered around 4 */
  ep = make_endpoint();
  CHECK(ep, "endpoint");
  rs = open_stream(ep, 4);
  CHECK(nx_rx_stream_close(ep, rs) == 0, "record cancelled stream");
  message(ep, 0, 10);
  message(ep, 8, 11);
  CHECK(queued(ep, 10) && queued(ep, 11), "messages after a cancelled stream were delivered");
  drop_endpoint(ep);
  /* a member's Initial with a valid Retry token while the CID table cannot
   * grow: no connection may be left behind */
  ep = make_endpoint();
  CHECK(ep, "endpoint");
  gnutls_certificate_credentials_t creds;
  CHECK(gnutls_certificate_allocate_credentials(&creds) >= 0, "credentials");
  struct sockaddr_in member = {.sin_family = AF_INET, .sin_port = htons(4000)};
  member.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct sockaddr_in self = member;
  self.sin_port = htons(4001);
  ep->rank = 1;
  ep->route.me = 1;
  ep->peers[0]->rank = 0;
  memcpy(&ep->peers[0]->addr, &member, sizeof member);
  ep->peers[0]->addrlen = sizeof member;
  memcpy(&ep->udp.local, &self, sizeof self);
  ep->udp.locallen = sizeof self;
  ep->udp.fd = -1;
  ep->creds = creds;
  ep->hb_timeout_ns = 5000000000ull;
  CHECK(nx_quic_glue_new(ep) == 0, "QUIC link");
  nx_quic *q = ep->quic;
  nx_quic_start(q, creds, ep->cluster_id, ep->world);
  memset(q->retry_secret, 7, sizeof q->retry_secret);
  q->retry_secret_ok = 1;
  ngtcp2_cid dcid = {.datalen = 18}, odcid = {.datalen = 8};
  memset(dcid.data, 3, 18);
  uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], pkt[1500];
  ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(
      token, q->retry_secret, sizeof q->retry_secret, NGTCP2_PROTO_VER_V1,
      (const ngtcp2_sockaddr *)&member, sizeof member, &dcid, &odcid, now_ns());
  CHECK(tl > 0, "retry token");
  size_t pl = make_initial(creds, &self, token, (size_t)tl, &dcid, pkt, 1200);
  CHECK(pl > 0, "initial");
  nx_realloc_fail_at = 1; /* the table's first allocation */
  nx_quic_on_datagram(q, (struct sockaddr *)&member, sizeof member, pkt, pl);
  nx_realloc_fail_at = 0;
  CHECK(q->conns == NULL, "a connection without a connection id was kept");
  CHECK(q->cids == NULL, "the table did not grow");
  /* with memory the same Initial gets its ids in the table (its handshake
   * then fails: these credentials have no certificate) */
  pl = make_initial(creds, &self, token, (size_t)tl, &dcid, pkt, 1200);
  nx_quic_on_datagram(q, (struct sockaddr *)&member, sizeof member, pkt, pl);
  CHECK(q->cids != NULL, "the admitted Initial was not registered");
  nx_quic_del(q);
  ep->quic = NULL;
  ep->creds = NULL;
  drop_endpoint(ep);
  gnutls_certificate_free_credentials(creds);
  printf("nomem_test: ok\n");
  return 0;
}
