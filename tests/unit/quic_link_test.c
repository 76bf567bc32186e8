/* The QUIC link on its own, driven by a fake engine in one thread: it needs
 * nothing of the runtime (only core and transport headers are included),
 * and everything it does reaches the engine through nx_quic_cbs.
 *  1. rank 0 dials rank 1 over loopback: member_addr and admit are asked,
 *     both sides report up() once;
 *  2. a 300 KiB message handed over by tx_next arrives whole and in order
 *     through stream_open/stream_data/stream_close, and the sender gets
 *     tx_acked up to its total and exactly one tx_done;
 *  3. a message tx_next holds back (the fake engine's policy) is never sent;
 *  4. a client whose certificate names a rank admit refuses is never
 *     admitted, and the refusal is recorded (nx_quic_auth_why) (the client
 *     itself may report up(): TLS 1.3 completes on its side first);
 *  5. nx_qconn_abandon with a reason: the peer reports dead(PEER_LOST) with
 *     that reason, the side that let go reports nothing. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "core/addr.h"
#include "transport/pki.h"
#include "transport/quic.h"
#include "check.h"

static const uint8_t CID[16] = {7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

typedef struct rx {
  uint8_t *buf;
  size_t got, cap;
  int fin, closed;
} rx;

typedef struct side {
  uint32_t rank;
  nx_udp udp;
  nx_quic *q;
  gnutls_certificate_credentials_t creds;
  const struct sockaddr *members[4]; /* sources member_addr accepts */
  int nmembers;
  uint32_t admits; /* the rank admit accepts */
  int peer_handle; /* the engine's "peer": its address is the handle */
  int up, dead, dead_code, departed, admitted, heard;
  char dead_why[200];
  nx_qtx *waiting[4];
  int nwait;
  int hold; /* policy: tx_next hands nothing over */
  int done;
  rx streams[4];
  int nstreams;
} side;

static int cb_member_addr(void *user, const struct sockaddr *from) {
  side *s = user;
  for (int i = 0; i < s->nmembers; i++)
    if (nx_sockaddr_same(s->members[i], from) == 1) return 1;
  return 0;
}

static int cb_admit(void *user, nx_qconn *qc, uint32_t rank, void **peer, char *why, size_t cap) {
  (void)qc;
  side *s = user;
  if (rank != s->admits) {
    snprintf(why, cap, "test engine admits only rank %u, not rank %u", s->admits, rank);
    return -1;
  }
  s->admitted++;
  *peer = &s->peer_handle;
  return 0;
}

static void cb_up(void *user, void *peer) {
  side *s = user;
  CHECK(peer == &s->peer_handle, "up: foreign peer handle");
  s->up++;
}

static void cb_dead(void *user, void *peer, int code, const char *why) {
  side *s = user;
  CHECK(peer == &s->peer_handle, "dead: foreign peer handle");
  s->dead++;
  s->dead_code = code;
  snprintf(s->dead_why, sizeof s->dead_why, "%s", why);
}

static void cb_departed(void *user, void *peer) {
  (void)peer;
  ((side *)user)->departed++;
}

static void cb_heard(void *user, void *peer, uint64_t now) {
  (void)peer, (void)now;
  ((side *)user)->heard++;
}

static void cb_path_stats(void *user, void *peer, double srtt_us, uint64_t lost) {
  (void)user, (void)peer, (void)lost;
  CHECK(srtt_us >= 0, "negative RTT");
}

static void *cb_stream_open(void *user, void *peer, int64_t sid) {
  side *s = user;
  (void)peer, (void)sid;
  if (s->nstreams == 4) return NULL;
  return &s->streams[s->nstreams++];
}

static int cb_stream_data(void *user, void *stream, const uint8_t *data, size_t len, int fin,
                          uint64_t *credit_now, uint64_t *conn_held) {
  (void)user;
  rx *r = stream;
  if (r->got + len > r->cap) {
    size_t cap = (r->got + len) * 2;
    uint8_t *b = realloc(r->buf, cap);
    if (!b) return NEXAR_ERR_NOMEM;
    r->buf = b, r->cap = cap;
  }
  if (len) memcpy(r->buf + r->got, data, len);
  r->got += len;
  r->fin |= fin;
  *credit_now = len; /* consumed at once */
  *conn_held = 0;
  return 0;
}

static int cb_stream_close(void *user, void *stream) {
  (void)user;
  ((rx *)stream)->closed = 1;
  return 0;
}

static int cb_tx_waiting(void *user, void *peer) {
  (void)peer;
  return ((side *)user)->nwait > 0;
}

static nx_qtx *cb_tx_next(void *user, void *peer, uint64_t data_left, uint64_t streams_left) {
  (void)peer, (void)data_left;
  side *s = user;
  if (s->hold || !s->nwait || !streams_left) return NULL;
  nx_qtx *m = s->waiting[0];
  memmove(s->waiting, s->waiting + 1, (size_t)--s->nwait * sizeof *s->waiting);
  return m;
}

static void cb_tx_return(void *user, void *peer, nx_qtx *m) {
  (void)peer;
  side *s = user;
  memmove(s->waiting + 1, s->waiting, (size_t)s->nwait++ * sizeof *s->waiting);
  s->waiting[0] = m;
}

static void cb_tx_acked(void *user, nx_qtx *m, uint64_t offset, uint64_t len) {
  (void)user;
  if (offset + len > m->acked) m->acked = offset + len;
}

static void cb_tx_done(void *user, nx_qtx *m) {
  m->acked = m->total;
  ((side *)user)->done++;
}

static const nx_quic_cbs CBS = {
    .member_addr = cb_member_addr,
    .admit = cb_admit,
    .up = cb_up,
    .dead = cb_dead,
    .departed = cb_departed,
    .heard = cb_heard,
    .path_stats = cb_path_stats,
    .stream_open = cb_stream_open,
    .stream_data = cb_stream_data,
    .stream_close = cb_stream_close,
    .tx_waiting = cb_tx_waiting,
    .tx_next = cb_tx_next,
    .tx_return = cb_tx_return,
    .tx_acked = cb_tx_acked,
    .tx_done = cb_tx_done,
};

static void make_side(side *s, uint32_t rank, nx_ca *ca) {
  memset(s, 0, sizeof *s);
  s->rank = rank;
  s->admits = UINT32_MAX;
  CHECK(nx_udp_open(&s->udp, "127.0.0.1", 0) == 0, "udp");
  nx_key *k;
  uint8_t *csr, *cert, *cacert;
  size_t csrlen, certlen, calen;
  CHECK(nx_key_new(&k) == 0, "key");
  CHECK(nx_csr_new(k, &csr, &csrlen) == 0, "csr");
  CHECK(nx_ca_sign(ca, csr, csrlen, rank, &cert, &certlen) == 0, "sign");
  CHECK(nx_ca_cert(ca, &cacert, &calen) == 0, "ca cert");
  CHECK(nx_tls_creds_new(&s->creds, k, cert, certlen, cacert, calen) == 0, "creds");
  free(csr), free(cert), free(cacert);
  nx_key_del(k);
  int cc;
  CHECK(nx_quic_cc_by_name(NULL, &cc) == 0, "cc");
  nx_quic_cfg cfg = {.udp = &s->udp,
                     .cc_algo = cc,
                     .conn_window = 16u << 20,
                     .conn_param = 4u << 20,
                     .conn_reserve = 8u << 20,
                     .stream_window = 512u << 10,
                     .max_streams = 64,
                     .handshake_ms = 1000,
                     .idle_timeout_ms = 20000};
  CHECK(nx_quic_new(&s->q, &cfg, &CBS, s) == 0, "link");
  nx_quic_start(s->q, s->creds, CID, 4);
}

static void drop_side(side *s) {
  nx_quic_del(s->q);
  nx_udp_close(&s->udp);
  gnutls_certificate_free_credentials(s->creds);
  for (int i = 0; i < s->nstreams; i++)
    free(s->streams[i].buf);
}

static void on_dgram(void *ud, const struct sockaddr *from, socklen_t fromlen, uint8_t *pkt,
                     size_t len) {
  nx_quic_on_datagram(ud, from, fromlen, pkt, len);
}

/* Drives every side (receive, timers, writes) until done(arg) or ms pass. */
static int pump(side **v, int n, int ms, int (*done)(void *), void *arg) {
  uint64_t end = nx_now_ns() + (uint64_t)ms * 1000000ull;
  while (nx_now_ns() < end) {
    for (int i = 0; i < n; i++) {
      while (nx_udp_recv(&v[i]->udp, on_dgram, v[i]->q) > 0) {
      }
      nx_quic_service(v[i]->q, nx_now_ns());
    }
    if (done && done(arg)) return 1;
    struct pollfd p[4];
    for (int i = 0; i < n; i++)
      p[i] = (struct pollfd){.fd = v[i]->udp.fd, .events = POLLIN};
    poll(p, (nfds_t)n, 1);
  }
  return 0;
}

static side A, B, C;

static int both_up(void *a) {
  (void)a;
  return A.up && B.up;
}
static int delivered(void *a) {
  rx *r = &B.streams[0];
  return B.nstreams && r->fin && r->closed && A.done == 1 && ((nx_qtx *)a)->acked >= 1;
}
static int refused(void *a) {
  (void)a;
  return nx_quic_auth_why(B.q)[0] != 0;
}
static int b_dead(void *a) {
  (void)a;
  return B.dead > 0;
}

int main(void) {
  nx_tls_global_init();
  nx_ca *ca;
  CHECK(nx_ca_new(&ca, CID) == 0, "ca");
  make_side(&A, 0, ca);
  make_side(&B, 1, ca);
  make_side(&C, 2, ca);
  B.members[B.nmembers++] = (const struct sockaddr *)&A.udp.local;
  B.members[B.nmembers++] = (const struct sockaddr *)&C.udp.local;
  B.admits = 0;
  side *all[3] = {&A, &B, &C};

  /* 1 */
  nx_qconn *qa;
  CHECK(nx_quic_dial(A.q, &A.peer_handle, 1, (const struct sockaddr *)&B.udp.local, B.udp.locallen,
                     "B", &qa) == 0,
        "dial");
  CHECK(pump(all, 2, 5000, both_up, NULL), "handshake: A up %d, B up %d", A.up, B.up);
  CHECK(A.up == 1 && B.up == 1 && B.admitted == 1, "up once each, admitted once");

  /* 2 and 3 */
  enum { N = 300 * 1024 };
  uint8_t *payload = malloc(N);
  CHECK(payload, "payload");
  for (size_t i = 0; i < N; i++)
    payload[i] = (uint8_t)(i * 131 + 7);
  nexar_iovec iov = {payload, N};
  nx_qtx m = {.sid = -1, .iov = &iov, .niov = 1, .total = NX_FRAME_HDR_LEN + N};
  memset(m.hdr, 0xab, sizeof m.hdr);
  nx_qtx held = m;
  A.waiting[A.nwait++] = &m;
  CHECK(pump(all, 2, 5000, delivered, &m), "delivery: got %zu of %llu, done %d",
        B.nstreams ? B.streams[0].got : 0, (unsigned long long)m.total, A.done);
  rx *r = &B.streams[0];
  CHECK(r->got == m.total && !memcmp(r->buf, m.hdr, NX_FRAME_HDR_LEN) &&
            !memcmp(r->buf + NX_FRAME_HDR_LEN, payload, N),
        "bytes arrived whole and in order");
  CHECK(m.acked == m.total && A.done == 1 && m.sid >= 0, "acked in full, released once");
  CHECK(B.heard > 0, "heard() reported datagrams");
  A.hold = 1;
  A.waiting[A.nwait++] = &held;
  pump(all, 2, 100, NULL, NULL);
  CHECK(held.sid == -1 && B.nstreams == 1 && A.nwait == 1, "a held message was not sent");
  A.nwait = 0;

  /* 4 */
  nx_qconn *qc;
  CHECK(nx_quic_dial(C.q, &C.peer_handle, 1, (const struct sockaddr *)&B.udp.local, B.udp.locallen,
                     "B", &qc) == 0,
        "dial from C");
  pump(all, 3, 5000, refused, NULL);
  CHECK(B.up == 1 && B.admitted == 1, "a refused rank was admitted (C up %d, B up %d, admitted %d)",
        C.up, B.up, B.admitted);
  CHECK(strstr(nx_quic_auth_why(B.q), "not rank 2"), "refusal recorded: '%s'",
        nx_quic_auth_why(B.q));

  /* 5 */
  nx_qconn_abandon(qa, "rank 0 gave up on you: test");
  CHECK(pump(all, 2, 5000, b_dead, NULL), "the peer did not learn it was given up");
  CHECK(B.dead_code == NEXAR_ERR_PEER_LOST && strstr(B.dead_why, "gave up on you: test"),
        "dead(%d, %s)", B.dead_code, B.dead_why);
  CHECK(A.dead == 0 && A.departed == 0, "the side that let go reported nothing");

  drop_side(&A);
  drop_side(&B);
  drop_side(&C);
  nx_ca_del(ca);
  free(payload);
  printf("quic_link_test: ok\n");
  return 0;
}
