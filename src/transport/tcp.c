/* Bulk TCP streams (see tcp.h). TLS records carry at most 16 KiB, so writes
 * go record by record (corking would add a copy); plaintext streams use
 * writev and MSG_WAITALL reads straight into the destination. */
#include "transport/tcp.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <time.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/addr.h"
#include "core/common.h"
#include "transport/pki.h"

#define TCP_PRIO                                                                                   \
  "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:+CHACHA20-POLY1305:"        \
  "%DISABLE_TLS13_COMPAT_MODE"
#define TCP_READ_MAX (64u << 20) /* per call: GnuTLS refuses sizes past INT_MAX */

struct nx_tcp {
  int fd;
  gnutls_session_t s; /* NULL: plaintext */
};

static void set_port(struct sockaddr_storage *ss, uint16_t port) {
  nx_sockaddr_set_port((struct sockaddr *)ss, port);
}

static void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void set_timeout(int fd, int ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int nx_tcp_listen(const struct sockaddr *local, socklen_t len, int *fd, uint16_t *port) {
  struct sockaddr_storage ss;
  memcpy(&ss, local, len);
  set_port(&ss, 0);
  int s = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return nx_fail(NEXAR_ERR_IO, "bulk listener: socket: %s", strerror(errno));
  /* on "::" (the UDP socket's dual stack), IPv4 peers dial in too */
  int zero = 0;
  if (ss.ss_family == AF_INET6 &&
      IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&ss)->sin6_addr))
    setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(s, (struct sockaddr *)&ss, len) || listen(s, 64)) {
    int e = errno;
    close(s);
    return nx_fail(NEXAR_ERR_IO, "bulk listener: %s", strerror(e));
  }
  int fl = fcntl(s, F_GETFL);
  if (fl >= 0) fcntl(s, F_SETFL, fl | O_NONBLOCK); /* accept never blocks */
  socklen_t sl = sizeof ss;
  getsockname(s, (struct sockaddr *)&ss, &sl);
  *port = nx_sockaddr_port((struct sockaddr *)&ss);
  *fd = s;
  return 0;
}

int nx_tcp_accept(int lfd, int *fd, struct sockaddr_storage *peer, int timeout_ms) {
  struct pollfd p = {.fd = lfd, .events = POLLIN};
  int n = poll(&p, 1, timeout_ms);
  if (n < 0) return errno == EINTR ? 1 : -1;
  if (n == 0) return 1;
  if (p.revents & (POLLERR | POLLNVAL)) return -1;
  for (;;) {
    socklen_t sl = sizeof *peer;
    int s = accept4(lfd, (struct sockaddr *)peer, &sl, SOCK_CLOEXEC);
    if (s >= 0) {
      tune(s);
      *fd = s;
      return 0;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return (p.revents & POLLHUP) ? -1 : 1;
    if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
      /* the connection stays queued; do not spin on it */
      struct timespec ts = {0, 50 * 1000000L};
      nanosleep(&ts, NULL);
      return 1;
    }
    return -1; /* EINVAL after shutdown */
  }
}

static const uint8_t *ip_bytes(const struct sockaddr_storage *a, size_t *n) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (a->ss_family == AF_INET) {
    *n = 4;
    return (const uint8_t *)&((const struct sockaddr_in *)a)->sin_addr;
  }
  if (a->ss_family == AF_INET6) {
    const uint8_t *b = ((const struct sockaddr_in6 *)a)->sin6_addr.s6_addr;
    if (!memcmp(b, mapped, 12)) {
      *n = 4;
      return b + 12;
    }
    *n = 16;
    return b;
  }
  *n = 0;
  return NULL;
}

int nx_tcp_same_family(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  size_t na, nb;
  return ip_bytes(a, &na) && ip_bytes(b, &nb) && na == nb;
}

int nx_tcp_same_ip(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  size_t na, nb;
  const uint8_t *pa = ip_bytes(a, &na), *pb = ip_bytes(b, &nb);
  return pa && pb && na == nb && !memcmp(pa, pb, na);
}

static int tls_fail(const char *op, int ret) {
  return nx_fail(ret == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR ? NEXAR_ERR_AUTH : NEXAR_ERR_TLS,
                 "bulk %s: %s", op, gnutls_strerror(ret));
}

/* GnuTLS's default push may raise SIGPIPE on a closed peer: ours never does. */
static ssize_t push_vec(gnutls_transport_ptr_t p, const giovec_t *iov, int n) {
  nx_tcp *t = p;
  struct msghdr mh = {.msg_iov = (struct iovec *)iov, .msg_iovlen = (size_t)n};
  ssize_t r = sendmsg(t->fd, &mh, MSG_NOSIGNAL);
  if (r < 0) gnutls_transport_set_errno(t->s, errno == EWOULDBLOCK ? EAGAIN : errno);
  return r;
}

static ssize_t pull(gnutls_transport_ptr_t p, void *buf, size_t n) {
  nx_tcp *t = p;
  ssize_t r = recv(t->fd, buf, n, 0);
  if (r < 0) gnutls_transport_set_errno(t->s, errno == EWOULDBLOCK ? EAGAIN : errno);
  return r;
}

static int handshake(nx_tcp *t, int server, const nx_tcp_id *id, uint32_t *rank) {
  int ret = gnutls_init(&t->s, (server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_TICKETS);
  if (ret < 0) return tls_fail("tls init", ret);
  if ((ret = gnutls_priority_set_direct(t->s, TCP_PRIO, NULL)) < 0 ||
      (ret = gnutls_credentials_set(t->s, GNUTLS_CRD_CERTIFICATE, id->creds)) < 0)
    return tls_fail("tls setup", ret);
  if (server) gnutls_certificate_server_set_request(t->s, GNUTLS_CERT_REQUIRE);
  gnutls_transport_set_ptr(t->s, t);
  gnutls_transport_set_vec_push_function(t->s, push_vec);
  gnutls_transport_set_pull_function(t->s, pull);
  gnutls_handshake_set_timeout(t->s, 0); /* the socket timeouts bound it */
  do {
    ret = gnutls_handshake(t->s);
  } while (ret < 0 && !gnutls_error_is_fatal(ret) && ret != GNUTLS_E_AGAIN);
  if (ret < 0) return tls_fail("handshake", ret);
  return nx_tls_peer_rank(t->s, id->cluster_id, rank);
}

nx_tcp *nx_tcp_wrap(int fd) {
  nx_tcp *t = nx_calloc(1, sizeof *t);
  if (!t) {
    close(fd);
    return NULL;
  }
  t->fd = fd;
  return t;
}

nx_tcp *nx_tcp_open(int family) {
  int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    nx_fail(NEXAR_ERR_IO, "bulk connect: socket: %s", strerror(errno));
    return NULL;
  }
  tune(fd);
  return nx_tcp_wrap(fd);
}

void nx_tcp_bind_source(nx_tcp *t, const struct sockaddr_storage *ip) {
  struct sockaddr_storage ss;
  memcpy(&ss, ip, sizeof ss);
  set_port(&ss, 0);
  socklen_t len =
      ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  if (bind(t->fd, (struct sockaddr *)&ss, len) != 0)
    NX_DEBUG("bulk connect: cannot leave from the advertised address: %s", strerror(errno));
}

void nx_tcp_set_timeout(nx_tcp *t, int ms) {
  set_timeout(t->fd, ms);
}

int nx_tcp_connect(nx_tcp *t, const struct sockaddr *addr, socklen_t len, uint16_t port,
                   const nx_tcp_id *id, uint32_t expect_rank, int timeout_ms) {
  struct sockaddr_storage ss;
  memcpy(&ss, addr, len);
  set_port(&ss, port);
  set_timeout(t->fd, timeout_ms); /* connect honours SO_SNDTIMEO */
  if (connect(t->fd, (struct sockaddr *)&ss, len)) {
    int e = errno;
    char to[NX_ADDR_TEXT_MAX];
    nx_addr_format((struct sockaddr *)&ss, len, to, sizeof to, 1);
    return nx_fail(NEXAR_ERR_IO, "bulk connect to rank %u at %s: %s", expect_rank, to, strerror(e));
  }
  uint32_t rank = UINT32_MAX;
  int rc = id->creds ? handshake(t, 0, id, &rank) : 0;
  if (!rc && id->creds && rank != expect_rank)
    rc = nx_fail(NEXAR_ERR_AUTH, "bulk connect: expected rank %u, its certificate names rank %u",
                 expect_rank, rank);
  return rc;
}

int nx_tcp_server(nx_tcp *t, const nx_tcp_id *id, uint32_t *rank, int timeout_ms) {
  set_timeout(t->fd, timeout_ms);
  *rank = UINT32_MAX;
  return id->creds ? handshake(t, 1, id, rank) : 0;
}

static int io_fail(const char *op, ssize_t ret) {
  if (ret == 0) return nx_fail(NEXAR_ERR_IO, "bulk %s: connection closed", op);
  return nx_fail(NEXAR_ERR_IO, "bulk %s: %s", op, strerror(errno));
}

int nx_tcp_read(nx_tcp *t, void *buf, size_t n, int *eof) {
  uint8_t *p = buf;
  *eof = 0;
  while (n) {
    ssize_t r;
    size_t want = n < TCP_READ_MAX ? n : TCP_READ_MAX;
    if (t->s) {
      r = gnutls_record_recv(t->s, p, want);
      if (r == GNUTLS_E_INTERRUPTED) continue; /* AGAIN: a socket timeout */
      /* a FIN without close_notify: frames carry their lengths, so a cut
       * message is caught by its reader; the close itself is an EOF */
      if (r == GNUTLS_E_PREMATURE_TERMINATION) r = 0;
      if (r < 0) return nx_fail(NEXAR_ERR_TLS, "bulk read: %s", gnutls_strerror((int)r));
    } else {
      r = recv(t->fd, p, want, MSG_WAITALL);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return io_fail("read", r);
    }
    if (r == 0) {
      *eof = 1;
      return io_fail("read", 0);
    }
    p += r, n -= (size_t)r;
  }
  return 0;
}

static int tls_write(nx_tcp *t, const uint8_t *p, size_t n) {
  while (n) {
    ssize_t r = gnutls_record_send(t->s, p, n);
    if (r == GNUTLS_E_INTERRUPTED) continue;
    if (r < 0) return nx_fail(NEXAR_ERR_TLS, "bulk write: %s", gnutls_strerror((int)r));
    p += r, n -= (size_t)r;
  }
  return 0;
}

int nx_tcp_writev(nx_tcp *t, const struct iovec *iov, size_t niov) {
  if (t->s) { /* one record per call: GnuTLS encrypts straight from our buffer */
    for (size_t i = 0; i < niov; i++)
      if (tls_write(t, iov[i].iov_base, iov[i].iov_len)) return -1;
    return 0;
  }
  struct iovec v[64];
  size_t i = 0, off = 0; /* position: iov[i] + off */
  while (i < niov) {
    size_t n = 0;
    for (size_t j = i; j < niov && n < 64; j++, n++) {
      v[n].iov_base = (uint8_t *)iov[j].iov_base + (j == i ? off : 0);
      v[n].iov_len = iov[j].iov_len - (j == i ? off : 0);
    }
    struct msghdr mh = {.msg_iov = v, .msg_iovlen = n};
    ssize_t r = sendmsg(t->fd, &mh, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_fail("write", r);
    size_t w = (size_t)r;
    while (i < niov && w >= iov[i].iov_len - off)
      w -= iov[i].iov_len - off, i++, off = 0;
    off += w;
  }
  return 0;
}

void nx_tcp_shutdown(nx_tcp *t) {
  if (t && t->fd >= 0) shutdown(t->fd, SHUT_RDWR);
}

void nx_tcp_free(nx_tcp *t) {
  if (!t) return;
  if (t->s) gnutls_deinit(t->s);
  if (t->fd >= 0) close(t->fd);
  free(t);
}

int nx_tcp_is_tls(const nx_tcp *t) {
  return t->s != NULL;
}
