/* libFuzzer target for datagrams from unauthenticated sources: the QUIC
 * admission path of nx_quic_on_datagram (connection-id routing,
 * ngtcp2_accept, the member-address check, Retry tokens, Retry, the
 * pending-handshake bounds) and, with a valid token, a server connection's
 * first packets, on an endpoint (rank 1 of 2) whose socket is closed.
 * Input: byte 0 = mode (bit 0: the source is rank 0's address, else a
 * stranger's; bit 1: first a real client Initial carrying a valid Retry
 * token, whose destination id is bytes 1..18), then datagrams separated by
 * 0xff 0xfe. Smoke run without libFuzzer: -DNX_FUZZ_STANDALONE. */
#include <string.h>

#include "fuzz_ep.h"
#include "quic_initial.h"
#include "runtime/quic_glue.h"
#include "transport/quic_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sockaddr_in addr_of(uint16_t port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  static gnutls_certificate_credentials_t creds;
  if (!creds && gnutls_certificate_allocate_credentials(&creds) < 0) return 0;
  nx_ep *ep = make_endpoint();
  if (!ep) return 0;
  ep->rank = 1;
  ep->route.me = 1;
  ep->peers[0]->rank = 0;
  ep->peers[0]->state = NX_PEER_CONNECTING;
  ep->peers[1]->state = NX_PEER_INIT;
  struct sockaddr_in member = addr_of(4000), stranger = addr_of(5555), self = addr_of(4001);
  memcpy(&ep->peers[0]->addr, &member, sizeof member);
  ep->peers[0]->addrlen = sizeof member;
  memcpy(&ep->udp.local, &self, sizeof self);
  ep->udp.locallen = sizeof self;
  ep->udp.fd = -1; /* sends fail quietly */
  ep->creds = creds;
  ep->hb_timeout_ns = 5000000000ull;
  if (nx_quic_glue_new(ep)) {
    ep->creds = NULL;
    drop_endpoint(ep);
    return 0;
  }
  nx_quic *q = ep->quic;
  nx_quic_start(q, creds, ep->cluster_id, ep->world);
  memset(q->retry_secret, 7, sizeof q->retry_secret);
  q->retry_secret_ok = 1;
  const struct sockaddr *from =
      (const struct sockaddr *)(data[0] & 1 ? (void *)&member : (void *)&stranger);
  const uint8_t *d = data + 1;
  size_t n = size - 1;
  pthread_mutex_lock(&ep->mu);
  if ((data[0] & 2) && n >= 18) { /* a real Initial with a valid token first */
    ngtcp2_cid dcid, odcid;
    dcid.datalen = 18;
    memcpy(dcid.data, d, 18);
    odcid.datalen = 8;
    memset(odcid.data, 1, 8);
    uint8_t token[NGTCP2_CRYPTO_MAX_RETRY_TOKENLEN], pkt[1500];
    ngtcp2_ssize tl = ngtcp2_crypto_generate_retry_token(
        token, q->retry_secret, sizeof q->retry_secret, NGTCP2_PROTO_VER_V1,
        (const ngtcp2_sockaddr *)from, sizeof member, &dcid, &odcid, now_ns());
    size_t pl = tl > 0 ? make_initial(creds, &self, token, (size_t)tl, &dcid, pkt, 1200) : 0;
    if (pl) nx_quic_on_datagram(q, from, sizeof member, pkt, pl);
    d += 18;
    n -= 18;
  }
  while (n > 0) {
    const uint8_t *sep = n >= 2 ? memmem(d, n, "\xff\xfe", 2) : NULL;
    size_t l = sep ? (size_t)(sep - d) : n;
    static uint8_t buf[65536];
    if (l > sizeof buf) l = sizeof buf;
    memcpy(buf, d, l); /* ngtcp2 may decrypt in place */
    nx_quic_on_datagram(q, from, sizeof member, buf, l);
    if (!sep) break;
    n -= (size_t)(sep - d) + 2;
    d = sep + 2;
  }
  nx_quic_service(q, nx_now_ns());
  nx_quic_del(q);
  ep->quic = NULL;
  pthread_mutex_unlock(&ep->mu);
  ep->creds = NULL;
  drop_endpoint(ep);
  return 0;
}

NX_FUZZ_MAIN("fuzz_initial")
