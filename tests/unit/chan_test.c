/* Bootstrap channel: TLS-PSK handshake over loopback TCP, messages both ways, wrong token,
 * oversize and split messages from a hand-made TLS peer, deadlines, addresses. */
#include "cluster/chan.h"
#include "core/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: %s)\n", __FILE__, __LINE__, #cond,     \
              nexar_last_error());                                                                 \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

static const char TOKEN[] = "correct horse battery staple 0123456789";
#define TMO 5000

static int accept_within(int lfd, int ms) {
  struct pollfd p = {.fd = lfd, .events = POLLIN};
  if (poll(&p, 1, ms) != 1) return -1;
  return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

static uint16_t port_of(const char *bound) {
  const char *c = strrchr(bound, ':');
  return c ? (uint16_t)strtoul(c + 1, NULL, 10) : 0;
}

/* ------------------------------------------------------------ echo server */

typedef struct srv {
  int lfd;
  const char *token;
  uint32_t timeout_ms;
  int rc;          /* nx_chan_server result */
  int recv_rc;     /* first recv result */
  char err[512];   /* server thread's error sentence */
  int closed_seen; /* nx_chan_closed reported the client leaving */
  int eof_rc;      /* recv after the client left */
} srv;

/* Accepts one client, echoes messages back (prefixed with "re:") until "bye", then waits for
 * the client to close. */
static void *echo_server(void *arg) {
  srv *s = arg;
  int fd = accept_within(s->lfd, TMO);
  if (fd < 0) {
    s->rc = -100;
    return NULL;
  }
  nx_chan *ch = NULL;
  s->rc = nx_chan_server(&ch, fd, s->token, s->timeout_ms);
  snprintf(s->err, sizeof s->err, "%s", nexar_last_error());
  if (s->rc) return NULL;
  for (int first = 1;; first = 0) {
    void *m = NULL;
    size_t n = 0;
    int rc = nx_chan_recv(ch, &m, &n, TMO);
    if (first) s->recv_rc = rc;
    if (rc) break;
    int bye = n == 3 && memcmp(m, "bye", 3) == 0;
    uint8_t *r = malloc(n + 3);
    if (r) {
      memcpy(r, "re:", 3);
      if (n) memcpy(r + 3, m, n);
      rc = nx_chan_send(ch, r, n + 3, TMO);
      free(r);
    }
    free(m);
    if (rc || bye) break;
  }
  for (int i = 0; i < 200 && !s->closed_seen; i++) {
    s->closed_seen = nx_chan_closed(ch);
    if (!s->closed_seen) usleep(10000);
  }
  void *m = NULL;
  size_t n = 0;
  s->eof_rc = nx_chan_recv(ch, &m, &n, TMO);
  free(m);
  nx_chan_del(ch);
  return NULL;
}

static int listen_local(char *bound, size_t cap) {
  int lfd = -1;
  CHECK(nx_chan_listen(&lfd, "127.0.0.1:0", bound, cap) == 0);
  return lfd;
}

static void test_echo(void) {
  char bound[64];
  int lfd = listen_local(bound, sizeof bound);
  CHECK(strncmp(bound, "127.0.0.1:", 10) == 0 && port_of(bound) != 0);
  srv s = {.lfd = lfd, .token = TOKEN, .timeout_ms = TMO};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, echo_server, &s) == 0);

  nx_chan *c = NULL;
  CHECK(nx_chan_connect(&c, bound, TOKEN, TMO) == 0);
  if (c) {
    char ip[64], peer[64];
    CHECK(nx_chan_local_ip(c, ip, sizeof ip) == 0 && strcmp(ip, "127.0.0.1") == 0);
    CHECK(nx_chan_peer_addr(c, peer, sizeof peer) == 0 && strcmp(peer, bound) == 0);
    CHECK(nx_chan_local_ip(c, ip, 4) == NEXAR_ERR_INVALID_ARGUMENT);
    CHECK(nx_chan_closed(c) == 0);

    /* Nothing sent yet: recv times out and the channel stays usable. */
    void *m = NULL;
    size_t n = 0;
    uint64_t t0 = nx_now_ns();
    CHECK(nx_chan_recv(c, &m, &n, 100) == NEXAR_ERR_TIMEOUT);
    uint64_t dt = (nx_now_ns() - t0) / 1000000;
    CHECK(dt >= 90 && dt < 1000);

    /* Small, empty and large (multi-record) messages. */
    size_t sizes[] = {5, 0, 100000, NX_CHAN_MAX_MSG - 3};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t len = sizes[k];
      uint8_t *b = malloc(len ? len : 1);
      CHECK(b != NULL);
      if (!b) break;
      for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)(i * 31 + k);
      CHECK(nx_chan_send(c, b, len, TMO) == 0);
      CHECK(nx_chan_recv(c, &m, &n, TMO) == 0);
      CHECK(n == len + 3 && m && memcmp(m, "re:", 3) == 0 && memcmp((uint8_t *)m + 3, b, len) == 0);
      free(m);
      free(b);
    }
    /* Too big to send. */
    uint8_t *big = calloc(NX_CHAN_MAX_MSG + 1, 1);
    if (big) CHECK(nx_chan_send(c, big, NX_CHAN_MAX_MSG + 1, TMO) == NEXAR_ERR_INVALID_ARGUMENT);
    free(big);
    CHECK(nx_chan_send(c, "bye", 3, TMO) == 0);
    CHECK(nx_chan_recv(c, &m, &n, TMO) == 0 && n == 6);
    free(m);
    nx_chan_del(c); /* the server notices, and its next recv reports the close */
  }
  pthread_join(t, NULL);
  CHECK(s.rc == 0 && s.recv_rc == 0);
  CHECK(s.closed_seen == 1);
  CHECK(s.eof_rc == NEXAR_ERR_IO);
  close(lfd);
}

static void test_wrong_token(void) {
  char bound[64];
  int lfd = listen_local(bound, sizeof bound);
  srv s = {.lfd = lfd, .token = TOKEN, .timeout_ms = TMO};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, echo_server, &s) == 0);
  nx_chan *c = NULL;
  CHECK(nx_chan_connect(&c, bound, "not the token", TMO) == NEXAR_ERR_AUTH);
  CHECK(c == NULL);
  CHECK(strstr(nexar_last_error(), "refused the cluster token") != NULL);
  pthread_join(t, NULL);
  CHECK(s.rc == NEXAR_ERR_AUTH);
  if (s.rc != NEXAR_ERR_AUTH) fprintf(stderr, "  server said: %s\n", s.err);
  CHECK(nx_chan_connect(&c, bound, "", TMO) == NEXAR_ERR_INVALID_ARGUMENT);
  close(lfd);
}

/* --------------------------------------------- hand-made TLS-PSK client */

/* A TLS client built directly on gnutls with the documented key derivation, so the test can
 * put arbitrary bytes on the wire (and checks the derivation is what chan.h says). */
typedef struct raw {
  int fd;
  gnutls_session_t s;
  gnutls_psk_client_credentials_t cred;
} raw;

static int raw_connect(raw *r, uint16_t port, const char *token) {
  memset(r, 0, sizeof *r);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (r->fd < 0 || connect(r->fd, (struct sockaddr *)&a, sizeof a) != 0) return -1;
  uint8_t psk[32];
  static const char label[] = "nexar bootstrap psk v1";
  if (gnutls_hmac_fast(GNUTLS_MAC_SHA256, token, strlen(token), label, sizeof label - 1, psk) < 0)
    return -1;
  gnutls_datum_t key = {psk, sizeof psk};
  if (gnutls_psk_allocate_client_credentials(&r->cred) < 0 ||
      gnutls_psk_set_client_credentials(r->cred, "nexar-bootstrap-v1", &key, GNUTLS_PSK_KEY_RAW) <
          0 ||
      gnutls_init(&r->s, GNUTLS_CLIENT | GNUTLS_NO_TICKETS) < 0 ||
      gnutls_priority_set_direct(r->s, "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK", NULL) <
          0 ||
      gnutls_credentials_set(r->s, GNUTLS_CRD_PSK, r->cred) < 0)
    return -1;
  gnutls_transport_set_int(r->s, r->fd);
  gnutls_handshake_set_timeout(r->s, TMO);
  int ret;
  do {
    ret = gnutls_handshake(r->s);
  } while (ret < 0 && !gnutls_error_is_fatal(ret));
  return ret;
}

static void raw_close(raw *r) {
  if (r->s) gnutls_deinit(r->s);
  if (r->cred) gnutls_psk_free_client_credentials(r->cred);
  if (r->fd >= 0) close(r->fd);
}

typedef struct rawsrv {
  int lfd;
  int rc[4];
} rawsrv;

/* Server side for the raw client: a split message, then an oversize declared length. */
static void *split_server(void *arg) {
  rawsrv *s = arg;
  int fd = accept_within(s->lfd, TMO);
  nx_chan *ch = NULL;
  s->rc[0] = fd < 0 ? -100 : nx_chan_server(&ch, fd, TOKEN, TMO);
  if (s->rc[0]) return NULL;
  void *m = NULL;
  size_t n = 0;
  /* Only the header and part of the body arrive first: time out, keep state, then finish. */
  s->rc[1] = nx_chan_recv(ch, &m, &n, 200);
  s->rc[2] = nx_chan_recv(ch, &m, &n, TMO);
  if (s->rc[2] == 0 && (n != 10 || memcmp(m, "0123456789", 10) != 0)) s->rc[2] = -200;
  free(m);
  /* Declared length 2 MiB: refused before allocating. */
  s->rc[3] = nx_chan_recv(ch, &m, &n, TMO);
  nx_chan_del(ch);
  return NULL;
}

static void test_raw_peer(void) {
  char bound[64];
  int lfd = listen_local(bound, sizeof bound);
  rawsrv s = {.lfd = lfd};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, split_server, &s) == 0);
  raw r;
  CHECK(raw_connect(&r, port_of(bound), TOKEN) == 0);
  if (r.s) {
    const uint8_t part1[] = {10, 0, 0, 0, '0', '1', '2'};
    CHECK(gnutls_record_send(r.s, part1, sizeof part1) == (ssize_t)sizeof part1);
    usleep(400000); /* let the 200 ms recv expire */
    CHECK(gnutls_record_send(r.s, "3456789", 7) == 7);
    const uint8_t huge[] = {0, 0, 0x20, 0, 'x'};
    CHECK(gnutls_record_send(r.s, huge, sizeof huge) == (ssize_t)sizeof huge);
  }
  pthread_join(t, NULL);
  CHECK(s.rc[0] == 0);
  CHECK(s.rc[1] == NEXAR_ERR_TIMEOUT);
  CHECK(s.rc[2] == 0);
  CHECK(s.rc[3] == NEXAR_ERR_PROTOCOL);
  raw_close(&r);
  close(lfd);
}

/* --------------------------------------------------------------- deadlines */

typedef struct silent {
  int lfd;
  int rc;
  uint64_t ms;
} silent;

static void *silent_accept_then_server(void *arg) {
  silent *s = arg;
  int fd = accept_within(s->lfd, TMO);
  uint64_t t0 = nx_now_ns();
  nx_chan *ch = NULL;
  s->rc = fd < 0 ? -100 : nx_chan_server(&ch, fd, TOKEN, 300);
  s->ms = (nx_now_ns() - t0) / 1000000;
  nx_chan_del(ch);
  return NULL;
}

static void test_deadlines(void) {
  char bound[64];
  int lfd = listen_local(bound, sizeof bound);

  /* A client that connects and says nothing: the server's handshake times out on time. */
  silent s = {.lfd = lfd};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, silent_accept_then_server, &s) == 0);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port_of(bound))};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  pthread_join(t, NULL);
  CHECK(s.rc == NEXAR_ERR_TIMEOUT);
  CHECK(s.ms >= 290 && s.ms < 1500);
  close(fd);

  /* A "seed" whose kernel accepts the connection but which never answers: client handshake
   * times out. (Nobody calls accept on lfd here.) */
  nx_chan *c = NULL;
  uint64_t t0 = nx_now_ns();
  CHECK(nx_chan_connect(&c, bound, TOKEN, 300) == NEXAR_ERR_TIMEOUT);
  uint64_t ms = (nx_now_ns() - t0) / 1000000;
  CHECK(ms >= 290 && ms < 1500);
  close(lfd);

  /* Nothing listening: refused -> IO. */
  CHECK(nx_chan_connect(&c, bound, TOKEN, 1000) == NEXAR_ERR_IO);
  CHECK(nx_chan_connect(&c, "no-port", TOKEN, 1000) == NEXAR_ERR_INVALID_ARGUMENT);
}

/* A "seed" that is not TLS at all. */
static void *http_server(void *arg) {
  int lfd = *(int *)arg;
  int fd = accept_within(lfd, TMO);
  if (fd < 0) return NULL;
  char buf[512];
  ssize_t n = recv(fd, buf, sizeof buf, 0);
  (void)n;
  static const char resp[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
  n = send(fd, resp, sizeof resp - 1, MSG_NOSIGNAL);
  close(fd);
  return NULL;
}

static void test_not_a_seed(void) {
  char bound[64];
  int lfd = listen_local(bound, sizeof bound);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, http_server, &lfd) == 0);
  nx_chan *c = NULL;
  CHECK(nx_chan_connect(&c, bound, TOKEN, TMO) == NEXAR_ERR_AUTH);
  pthread_join(t, NULL);
  close(lfd);
}

/* A seed shedding load closes (or resets) before answering: the joiner must
 * see a retryable IO error, not AUTH (which would stop its retries). */
static void *shed_server(void *arg) {
  int lfd = *(int *)arg;
  for (int i = 0; i < 2; i++) {
    int fd = accept_within(lfd, TMO);
    if (fd < 0) continue;
    if (i == 1) { /* the second one with a reset */
      struct linger lg = {1, 0};
      setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
    close(fd);
  }
  return NULL;
}

static void test_shed_for_load(void) {
  char bound[64];
  int lfd = listen_local(bound, sizeof bound);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, shed_server, &lfd) == 0);
  for (int i = 0; i < 2; i++) {
    nx_chan *c = NULL;
    CHECK(nx_chan_connect(&c, bound, TOKEN, TMO) == NEXAR_ERR_IO);
    CHECK(c == NULL);
  }
  pthread_join(t, NULL);
  close(lfd);
}

static void test_listen_forms(void) {
  char bound[80];
  int fd = -1;
  CHECK(nx_chan_listen(&fd, "0.0.0.0:0", bound, sizeof bound) == 0);
  CHECK(strncmp(bound, "0.0.0.0:", 8) == 0 && port_of(bound) != 0);
  close(fd);
  CHECK(nx_chan_listen(&fd, "localhost:0", bound, sizeof bound) == 0);
  CHECK(strncmp(bound, "127.0.0.1:", 10) == 0 || strncmp(bound, "[::1]:", 6) == 0);
  close(fd);
  CHECK(nx_chan_listen(&fd, "127.0.0.1:0", bound, 5) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(nx_chan_listen(&fd, "256.1.1.1:0", bound, sizeof bound) == NEXAR_ERR_INVALID_ARGUMENT);

  /* IPv6 loopback, where the machine has it. */
  if (nx_chan_listen(&fd, "[::1]:0", bound, sizeof bound) == 0) {
    CHECK(strncmp(bound, "[::1]:", 6) == 0);
    srv s = {.lfd = fd, .token = TOKEN, .timeout_ms = TMO};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, echo_server, &s) == 0);
    nx_chan *c = NULL;
    CHECK(nx_chan_connect(&c, bound, TOKEN, TMO) == 0);
    char ip[64];
    if (c) CHECK(nx_chan_local_ip(c, ip, sizeof ip) == 0 && strcmp(ip, "::1") == 0);
    if (c) CHECK(nx_chan_send(c, "bye", 3, TMO) == 0);
    nx_chan_del(c);
    pthread_join(t, NULL);
    CHECK(s.rc == 0);
    close(fd);
  } else {
    printf("chan_test: no IPv6 loopback, skipping [::1] (%s)\n", nexar_last_error());
  }
  if (nx_chan_listen(&fd, "[::]:0", bound, sizeof bound) == 0) {
    CHECK(strncmp(bound, "[::]:", 5) == 0);
    close(fd);
  }
}

int main(void) {
  test_echo();
  test_wrong_token();
  test_raw_peer();
  test_deadlines();
  test_not_a_seed();
  test_shed_for_load();
  test_listen_forms();
  if (failures) {
    fprintf(stderr, "chan_test: %d failure(s)\n", failures);
    return 1;
  }
  printf("chan_test: ok\n");
  return 0;
}
