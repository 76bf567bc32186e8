/* Refusals: a wrong-token joiner, a member presenting another rank's (or a
 * foreign CA's) certificate, and malformed frames from an authenticated peer.
 * Uses internal APIs to build the impostors. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/mesh.h"
#include "runtime/comm.h"
#include "transport/pki.h"

#include "check.h"

static nexar_config base_cfg(const char *token, uint32_t connect_ms) {
  nexar_config c;
  nexar_config_default(&c);
  c.cluster_token = token;
  c.connect_timeout_ms = connect_ms;
  c.collective_timeout_ms = 5000;
  return c;
}

typedef struct {
  const char *seed;
  nexar_config cfg;
  nexar_client *c;
  int rc;
} joiner;

static void *join_thread(void *a) {
  joiner *j = a;
  j->rc = nexar_join(&j->c, j->seed, &j->cfg);
  return NULL;
}

/* A wrong-token joiner is refused with AUTH and does not disturb the others. */
static void test_wrong_token(void) {
  nexar_config cfg = base_cfg("right-token-0123456789abcdef", 10000);
  nexar_seed *s;
  CHECK(nexar_seed_new(&s, "127.0.0.1:0", 2, &cfg) == 0, "seed_new");
  joiner bad = {.seed = nexar_seed_addr(s), .cfg = base_cfg("wrong-token-0123456789abcdef", 5000)};
  pthread_t tb;
  pthread_create(&tb, NULL, join_thread, &bad);
  pthread_join(tb, NULL);
  CHECK(bad.rc == NEXAR_ERR_AUTH, "wrong token gave %d, want AUTH", bad.rc);
  CHECK(bad.c == NULL, "no client on failure");
  joiner good[2];
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    good[i] = (joiner){.seed = nexar_seed_addr(s), .cfg = cfg};
    pthread_create(&t[i], NULL, join_thread, &good[i]);
  }
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  for (int i = 0; i < 2; i++)
    CHECK(good[i].rc == 0, "good joiner %d: %d", i, good[i].rc);
  CHECK(nexar_seed_wait(s, 5000) == 0, "seed_wait");
  uint32_t r0 = nexar_rank(good[0].c), r1 = nexar_rank(good[1].c);
  CHECK(r0 != r1 && r0 < 2 && r1 < 2, "ranks %u %u", r0, r1);
  char msg[8] = "ping";
  CHECK(nexar_send(good[0].c, msg, 5, r1, 1) == 0, "send");
  char in[8];
  CHECK(nexar_recv(good[1].c, in, 5, r0, 1) == 0 && !strcmp(in, "ping"), "recv");
  for (int i = 0; i < 2; i++)
    nexar_client_del(good[i].c);
  nexar_seed_del(s);
  /* a joiner without any token is refused before it connects */
  nexar_config none = base_cfg(NULL, 1000);
  nexar_client *c = NULL;
  unsetenv("NEXAR_CLUSTER_TOKEN");
  CHECK(nexar_join(&c, "127.0.0.1:1", &none) == NEXAR_ERR_INVALID_ARGUMENT, "no token");
  printf("ok wrong token refused\n");
}

/* Two endpoints of one cluster where rank 1 holds a certificate that is not
 * its own: the mesh must not form. */
typedef struct {
  nx_ep *ep;
  uint32_t rank;
  uint8_t *cid;
  gnutls_certificate_credentials_t creds;
  char (*addrs)[128];
  nexar_client *out;
  int rc;
} former;

static void *form_thread(void *a) {
  former *f = a;
  f->rc = nx_mesh_form(f->ep, f->rank, 2, f->cid, f->creds, f->addrs, nx_now_ns() + 3000000000ull,
                       &f->out);
  return NULL;
}

static gnutls_certificate_credentials_t creds_for(nx_ca *ca, uint32_t rank) {
  nx_key *k;
  uint8_t *csr, *cert, *ca_der;
  size_t csr_len, cert_len, ca_len;
  gnutls_certificate_credentials_t cr;
  CHECK(nx_key_new(&k) == 0 && nx_csr_new(k, &csr, &csr_len) == 0, "key");
  CHECK(nx_ca_sign(ca, csr, csr_len, rank, &cert, &cert_len) == 0, "sign");
  CHECK(nx_ca_cert(ca, &ca_der, &ca_len) == 0, "ca cert");
  CHECK(nx_tls_creds_new(&cr, k, cert, cert_len, ca_der, ca_len) == 0, "creds");
  free(csr), free(cert), free(ca_der);
  nx_key_del(k);
  return cr;
}

static void impostor(int foreign_ca) {
  uint8_t cid[16] = {1, 2, 3};
  nx_ca *ca, *other;
  CHECK(nx_ca_new(&ca, cid) == 0 && nx_ca_new(&other, cid) == 0, "ca");
  nexar_config cfg = base_cfg("t", 3000);
  former f[2] = {{0}};
  char addrs[2][128];
  for (uint32_t i = 0; i < 2; i++) {
    CHECK(nx_mesh_bind(&f[i].ep, &cfg, "127.0.0.1") == 0, "bind");
    snprintf(addrs[i], sizeof addrs[i], "127.0.0.1:%u", nx_ep_port(f[i].ep));
    f[i].rank = i, f[i].cid = cid, f[i].addrs = addrs;
  }
  f[0].creds = creds_for(ca, 0);
  /* rank 1 presents rank 0's identity, or a certificate of a foreign CA */
  f[1].creds = foreign_ca ? creds_for(other, 1) : creds_for(ca, 0);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, form_thread, &f[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  CHECK(f[0].rc == NEXAR_ERR_AUTH && f[1].rc != 0, "impostor: rank 0 got %d (want AUTH), rank 1 %d",
        f[0].rc, f[1].rc);
  CHECK(f[0].out == NULL && f[1].out == NULL, "no communicator");
  for (int i = 0; i < 2; i++)
    nx_ep_unref(f[i].ep);
  nx_ca_del(ca);
  nx_ca_del(other);
  printf("ok impostor (%s) refused: %s\n", foreign_ca ? "foreign CA" : "other rank's identity",
         nexar_strerror(f[0].rc));
}

/* Sends a frame whose header bytes are patched after encoding. */
static void send_corrupt(nexar_client *c, uint32_t dest, int what) {
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  ep->in_progress = 1; /* keep it queued until patched */
  nx_frame f = {0};
  f.kind = NX_KIND_P2P;
  f.tag = 9;
  char payload[16] = "0123456789abcde";
  nexar_iovec v = {payload, sizeof payload};
  nx_txmsg *m = NULL;
  CHECK(nx_ep_send_locked(ep, c->members[dest], &f, &v, 1, NULL, &m) == 0 && m, "queue");
  if (what == 0) m->q.hdr[0] ^= 0xff;            /* bad magic */
  if (what == 1) m->q.hdr[16] ^= 0x01;           /* claims another source rank */
  if (what == 2) memset(m->q.hdr + 48, 0xff, 8); /* absurd payload length */
  ep->in_progress = 0;
  nx_ep_wake(ep);
  pthread_mutex_unlock(&ep->mu);
}

typedef struct split_arg {
  nexar_client *c, *child;
  int rc;
} split_arg;

static void *split_main(void *p) {
  split_arg *a = p;
  const uint32_t zero = 0;
  a->rc = nexar_rebuild_excluding(a->c, &zero, 1, &a->child);
  return NULL;
}

static void test_malformed(int what) {
  nexar_config cfg = base_cfg(NULL, 5000);
  nexar_client *c[3];
  CHECK(nexar_bootstrap_local(c, 3, &cfg) == 0, "bootstrap");
  send_corrupt(c[0], 1, what);
  char buf[16];
  int rc = nexar_recv(c[1], buf, sizeof buf, 0, 9);
  CHECK(rc == NEXAR_ERR_PROTOCOL, "recv after a malformed frame gave %d, want PROTOCOL", rc);
  CHECK(strstr(nexar_last_error(), "rank 0") != NULL, "error names the peer: %s",
        nexar_last_error());
  size_t n = 0;
  uint32_t dead[3];
  CHECK(nexar_failed_ranks(c[1], dead, 3, &n) == 0 && n == 1 && dead[0] == 0, "failed ranks");
  /* the world is revoked (an operation failed because a member is lost): the
   * notice wakes a receive on rank 2 that rank 1 never answers... */
  rc = nexar_recv(c[2], buf, 1, 1, 77);
  /* PEER_LOST when rank 0's notice (naming rank 1, which closed on it) came first */
  CHECK(rc == NEXAR_ERR_ABORTED || rc == NEXAR_ERR_PEER_LOST,
        "recv on the revoked world gave %d, want ABORTED or PEER_LOST", rc);
  /* ...and the other connections keep working: ranks 1 and 2 rebuild
   * without rank 0 (the successor of a revoked view is not revoked) */
  split_arg sa[3];
  pthread_t st[3];
  for (int i = 1; i < 3; i++) {
    sa[i] = (split_arg){c[i], NULL, -1};
    pthread_create(&st[i], NULL, split_main, &sa[i]);
  }
  for (int i = 1; i < 3; i++)
    pthread_join(st[i], NULL);
  CHECK(sa[1].rc == 0 && sa[2].rc == 0 && sa[1].child && sa[2].child, "rebuild without rank 0");
  CHECK(nexar_send(sa[2].child, "x", 1, 0, 3) == 0 && nexar_recv(sa[1].child, buf, 1, 1, 3) == 0,
        "rank 2 to rank 1 without rank 0");
  nexar_client_del(sa[1].child);
  nexar_client_del(sa[2].child);
  for (int i = 0; i < 3; i++)
    nexar_client_del(c[i]);
  printf("ok malformed frame %d closed the connection with PROTOCOL\n", what);
}

/* Random datagrams and fake QUIC Initials at a rank's port: dropped and
 * reported, and the cluster keeps working. */
static void test_garbage(void) {
  nexar_config cfg = base_cfg(NULL, 5000);
  nexar_client *c[2];
  CHECK(nexar_bootstrap_local(c, 2, &cfg) == 0, "bootstrap");
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(nx_ep_port(c[1]->ep))};
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  uint8_t b[1400];
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 3000; i++) {
    size_t len = 1 + (size_t)i % sizeof b;
    for (size_t j = 0; j < len; j++)
      x ^= x << 13, x ^= x >> 7, x ^= x << 17, b[j] = (uint8_t)x;
    if (i % 3 == 0 && len >= 1200) { /* looks like a QUIC v1 Initial */
      b[0] = 0xc0, b[1] = 0, b[2] = 0, b[3] = 0, b[4] = 1, b[5] = 8;
    }
    sendto(fd, b, len, 0, (struct sockaddr *)&to, sizeof to);
  }
  close(fd);
  char buf[8];
  for (int i = 0; i < 50; i++) {
    CHECK(nexar_send(c[0], "ok", 3, 1, 4) == 0, "send after garbage");
    CHECK(nexar_recv(c[1], buf, 3, 0, 4) == 0 && !strcmp(buf, "ok"), "recv after garbage");
  }
  pthread_mutex_lock(&c[1]->ep->mu);
  uint64_t dropped = nx_quic_dropped(c[1]->ep->quic);
  pthread_mutex_unlock(&c[1]->ep->mu);
  CHECK(dropped > 0, "garbage was not counted");
  for (int i = 0; i < 2; i++)
    nexar_client_del(c[i]);
  printf("ok garbage datagrams dropped (%llu) and reported; cluster unaffected\n",
         (unsigned long long)dropped);
}

/* Forged frames on the same-host lane from another process (another pid than
 * the peer proved) are dropped, never matched: the allreduces stay exact. */
typedef struct ar_arg {
  nexar_client *c;
  float v[4];
  int rc;
} ar_arg;

static void *ar_main(void *p) {
  ar_arg *a = p;
  a->rc = nexar_all_reduce(a->c, a->v, 4, NEXAR_F32, NEXAR_SUM);
  return NULL;
}

static void test_lane_forgery(void) {
  nexar_config cfg = base_cfg(NULL, 5000);
  nexar_client *c[2];
  CHECK(nexar_bootstrap_local(c, 2, &cfg) == 0, "bootstrap");
  int up = 0;
  struct sockaddr_un to;
  socklen_t tolen = 0;
  for (int i = 0; i < 200 && !up; i++) { /* until rank 1 answered rank 0's ping */
    usleep(5000);
    pthread_mutex_lock(&c[0]->ep->mu);
    up = c[0]->ep->peers[1]->lane_ok;
    to = c[0]->ep->peers[1]->lane_addr;
    tolen = c[0]->ep->peers[1]->lane_addrlen;
    pthread_mutex_unlock(&c[0]->ep->mu);
  }
  CHECK(up, "the lane came up between two ranks of one process");
  nx_ep *ep1 = c[1]->ep;
  pthread_mutex_lock(&ep1->mu);
  uint64_t seq = c[1]->next_seq, dropped0 = ep1->dropped_datagrams;
  pthread_mutex_unlock(&ep1->mu);
  pid_t kid = fork();
  if (kid == 0) { /* another process: frames claiming to be rank 0's next ones */
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    uint8_t b[NX_FRAME_HDR_LEN + 16];
    memset(b, 0x7f, sizeof b);
    for (uint64_t q = seq; q < seq + 4; q++)
      for (uint32_t rd = 0; rd < 4; rd++) {
        nx_frame f = {.kind = NX_KIND_COLL,
                      .comm_id = c[1]->id,
                      .src = 0,
                      .tag = q,
                      .round = rd,
                      .dtype = NEXAR_F32,
                      .redop = NEXAR_SUM,
                      .count = 4,
                      .length = 16};
        nx_frame_encode(&f, b);
        sendto(fd, b, sizeof b, 0, (struct sockaddr *)&to, tolen);
      }
    _exit(0);
  }
  int st = 0;
  waitpid(kid, &st, 0);
  for (int it = 0; it < 4; it++) {
    ar_arg a0 = {c[0], {1, 2, 3, 4}, 0}, a1 = {c[1], {10, 20, 30, 40}, 0};
    pthread_t t;
    pthread_create(&t, NULL, ar_main, &a1);
    ar_main(&a0);
    pthread_join(t, NULL);
    CHECK(a0.rc == 0 && a1.rc == 0, "allreduce after forged lane frames");
    for (int i = 0; i < 4; i++)
      CHECK(a0.v[i] == 11.0f * (float)(i + 1) && a1.v[i] == a0.v[i], "allreduce result exact");
  }
  pthread_mutex_lock(&ep1->mu);
  uint64_t dropped = ep1->dropped_datagrams - dropped0;
  pthread_mutex_unlock(&ep1->mu);
  CHECK(dropped >= 16, "forged lane frames were not all dropped");
  for (int i = 0; i < 2; i++)
    nexar_client_del(c[i]);
  printf("ok forged same-host lane frames from another process dropped (%llu)\n",
         (unsigned long long)dropped);
}

int main(void) {
  /* these checks patch QUIC frames: point-to-point must take QUIC, not the
   * shared-memory rings (whose forgeries integration.shm checks) */
  setenv("NEXAR_SHM", "0", 1);
  test_lane_forgery();
  test_garbage();
  test_wrong_token();
  impostor(0);
  impostor(1);
  for (int w = 0; w < 3; w++)
    test_malformed(w);
  printf("security_test: all passed\n");
  return 0;
}
