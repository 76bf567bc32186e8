/* Bootstrap channel: TCP + TLS 1.3 (EC)DHE-PSK with deadlines (see chan.h). */
#include "cluster/chan.h"

#include "core/addr.h"
#include "core/common.h"
#include "transport/pki.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* TLS 1.3 only, and only PSK modes that add an (EC)DHE share (psk_dhe_ke): forward secrecy. */
#define CHAN_PRIORITY "NORMAL:-VERS-ALL:+VERS-TLS1.3:-KX-ALL:+ECDHE-PSK:+DHE-PSK"
#define PSK_LABEL "nexar bootstrap psk v1"
#define PSK_IDENTITY "nexar-bootstrap-v1" /* fixed, public: the secret is the key alone */
#define PSK_LEN 32

struct nx_chan {
  int fd;
  gnutls_session_t s;
  gnutls_psk_client_credentials_t ccred;
  gnutls_psk_server_credentials_t scred;
  uint8_t psk[PSK_LEN]; /* wiped after the handshake */
  int established;      /* handshake completed */
  int broken;           /* framing or TLS state lost: every further call fails */
  int io_errno;         /* errno of the last failed send/recv on fd */
  size_t rx_bytes;      /* bytes received so far (0: the peer never answered) */
  /* Receive state, kept across timeouts so a later recv continues the same message. */
  uint8_t hdr[4];
  size_t hdr_got;
  uint8_t *body;
  size_t body_len, body_got;
  char peer[80]; /* "ip:port" or the address we dialled, for error sentences */
};

/* ------------------------------------------------------------------ helpers */

static uint64_t deadline_after(uint32_t timeout_ms) {
  return nx_now_ns() + (uint64_t)timeout_ms * 1000000ull;
}

/* Milliseconds left, rounded up so we never wake just before the deadline. */
static int remaining_ms(uint64_t deadline) {
  uint64_t now = nx_now_ns();
  if (now >= deadline) return 0;
  uint64_t ms = (deadline - now + 999999ull) / 1000000ull;
  return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* Waits until fd is ready for events or the deadline passes: 0, TIMEOUT or IO. */
static int wait_fd(int fd, short events, uint64_t deadline) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    int n = poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return 0; /* readable, writable, or an error the next call will report */
    if (n == 0) return NEXAR_ERR_TIMEOUT;
    if (errno != EINTR) return NEXAR_ERR_IO;
  }
}

static void wipe(void *p, size_t n) {
  explicit_bzero(p, n);
}

/* Numeric "ip", "ip:port" or "[v6]:port"; 0, or -1 (buf holds "?") if it does not fit. */
static int format_addr(const struct sockaddr *sa, socklen_t len, char *buf, size_t cap,
                       int with_port) {
  return nx_addr_format(sa, len, buf, cap, with_port);
}

/* Non-blocking transport for gnutls: never waits, whatever the fd's O_NONBLOCK flag says;
 * we poll with the caller's deadline when gnutls reports GNUTLS_E_AGAIN. */
static ssize_t chan_push(gnutls_transport_ptr_t p, const void *buf, size_t n) {
  nx_chan *c = p;
  ssize_t r = send(c->fd, buf, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (r < 0) {
    c->io_errno = errno;
    gnutls_transport_set_errno(c->s, errno == EWOULDBLOCK ? EAGAIN : errno);
  }
  return r;
}

static ssize_t chan_pull(gnutls_transport_ptr_t p, void *buf, size_t n) {
  nx_chan *c = p;
  ssize_t r = recv(c->fd, buf, n, MSG_DONTWAIT);
  if (r > 0) c->rx_bytes += (size_t)r;
  if (r < 0) {
    c->io_errno = errno;
    gnutls_transport_set_errno(c->s, errno == EWOULDBLOCK ? EAGAIN : errno);
  }
  return r;
}

/* After GNUTLS_E_AGAIN: waits for the direction gnutls is blocked on. */
static int wait_tls(nx_chan *c, uint64_t deadline) {
  short ev = gnutls_record_get_direction(c->s) ? POLLOUT : POLLIN;
  return wait_fd(c->fd, ev, deadline);
}

static int derive_psk(const char *token, uint8_t psk[PSK_LEN]) {
  if (!token || !*token) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "empty cluster token");
  int ret = gnutls_hmac_fast(GNUTLS_MAC_SHA256, token, strlen(token), PSK_LABEL,
                             sizeof PSK_LABEL - 1, psk);
  if (ret < 0)
    return nx_fail(NEXAR_ERR_TLS, "deriving the bootstrap key: %s", gnutls_strerror(ret));
  return 0;
}

/* Server PSK lookup: the session pointer is the channel holding the derived key. */
static int server_psk_cb(gnutls_session_t s, const gnutls_datum_t *user, gnutls_datum_t *key) {
  nx_chan *c = gnutls_session_get_ptr(s);
  if (!c || user->size != sizeof PSK_IDENTITY - 1 ||
      memcmp(user->data, PSK_IDENTITY, user->size) != 0)
    return -1;
  key->data = gnutls_malloc(PSK_LEN);
  if (!key->data) return -1;
  memcpy(key->data, c->psk, PSK_LEN);
  key->size = PSK_LEN;
  return 0;
}

static nx_chan *chan_alloc(int fd) {
  nx_chan *c = nx_calloc(1, sizeof *c);
  if (!c) return NULL;
  c->fd = fd;
  return c;
}

static void set_nodelay(int fd) {
  int one = 1;
  /* Bootstrap messages are small request/response pairs: do not let Nagle delay them. */
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    NX_DEBUG("bootstrap channel: TCP_NODELAY: %s", strerror(errno));
}

/* Creates the session, runs the handshake within the deadline and checks what was agreed. */
static int chan_handshake(nx_chan *c, int server, const char *token, uint64_t deadline) {
  int rc = derive_psk(token, c->psk);
  if (rc) return rc;
  int ret;
  const char *err_pos = NULL;
  if (server) {
    ret = gnutls_psk_allocate_server_credentials(&c->scred);
    if (ret >= 0) gnutls_psk_set_server_credentials_function2(c->scred, server_psk_cb);
  } else {
    gnutls_datum_t key = {c->psk, PSK_LEN};
    ret = gnutls_psk_allocate_client_credentials(&c->ccred);
    if (ret >= 0)
      ret = gnutls_psk_set_client_credentials(c->ccred, PSK_IDENTITY, &key, GNUTLS_PSK_KEY_RAW);
  }
  if (ret >= 0)
    ret = gnutls_init(&c->s, (server ? GNUTLS_SERVER : GNUTLS_CLIENT) | GNUTLS_NO_TICKETS |
                                 GNUTLS_NO_SIGNAL);
  if (ret >= 0) ret = gnutls_priority_set_direct(c->s, CHAN_PRIORITY, &err_pos);
  if (ret >= 0)
    ret =
        gnutls_credentials_set(c->s, GNUTLS_CRD_PSK, server ? (void *)c->scred : (void *)c->ccred);
  if (ret < 0)
    return nx_fail(NEXAR_ERR_TLS, "bootstrap channel with %s: TLS setup: %s", c->peer,
                   gnutls_strerror(ret));
  gnutls_session_set_ptr(c->s, c);
  gnutls_transport_set_ptr(c->s, c);
  gnutls_transport_set_push_function(c->s, chan_push);
  gnutls_transport_set_pull_function(c->s, chan_pull);
  gnutls_handshake_set_timeout(c->s, 0); /* our deadline governs, not gnutls's default */

  for (;;) {
    ret = gnutls_handshake(c->s);
    if (ret == 0) break;
    if (ret == GNUTLS_E_AGAIN || ret == GNUTLS_E_INTERRUPTED) {
      rc = wait_tls(c, deadline);
      if (rc == NEXAR_ERR_TIMEOUT)
        return nx_fail(rc, "bootstrap channel with %s: TLS handshake timed out", c->peer);
      if (rc) return nx_fail(rc, "bootstrap channel with %s: poll: %s", c->peer, strerror(errno));
      continue;
    }
    if (!gnutls_error_is_fatal(ret)) continue; /* e.g. a warning alert */
    if (ret == GNUTLS_E_PUSH_ERROR || ret == GNUTLS_E_PULL_ERROR)
      return nx_fail(NEXAR_ERR_IO, "bootstrap channel with %s: %s during the TLS handshake",
                     c->peer, strerror(c->io_errno));
    /* A seed that closes before sending one byte has not judged our token: it is shedding
     * load (or is not a seed). That is worth a retry, not an authentication failure. */
    if (!server && c->rx_bytes == 0)
      return nx_fail(NEXAR_ERR_IO,
                     "seed at %s closed the connection before answering the handshake "
                     "(busy, or not a seed)",
                     c->peer);
    /* Anything else (alerts, bad binder, unknown identity, a non-TLS or non-PSK peer, EOF in
     * the middle) means the peer does not hold our token. Tell the peer why (gnutls does not
     * send the alert by itself; this never waits), then let it see FIN rather than a reset. */
    char why[160];
    if (ret == GNUTLS_E_FATAL_ALERT_RECEIVED)
      snprintf(why, sizeof why, "%s (%s)", gnutls_strerror(ret),
               gnutls_alert_get_name(gnutls_alert_get(c->s)));
    else
      snprintf(why, sizeof why, "%s", gnutls_strerror(ret));
    if (ret != GNUTLS_E_FATAL_ALERT_RECEIVED) gnutls_alert_send_appropriate(c->s, ret);
    shutdown(c->fd, SHUT_WR);
    if (server)
      return nx_fail(NEXAR_ERR_AUTH,
                     "bootstrap client %s failed the cluster-token handshake (wrong token or "
                     "not a nexar worker): %s",
                     c->peer, why);
    return nx_fail(NEXAR_ERR_AUTH, "seed at %s refused the cluster token or is not our seed: %s",
                   c->peer, why);
  }
  wipe(c->psk, sizeof c->psk);
  /* Defence in depth: insist on what the priority string asked for. */
  gnutls_kx_algorithm_t kx = gnutls_kx_get(c->s);
  if (gnutls_protocol_get_version(c->s) != GNUTLS_TLS1_3 ||
      gnutls_auth_get_type(c->s) != GNUTLS_CRD_PSK ||
      (kx != GNUTLS_KX_ECDHE_PSK && kx != GNUTLS_KX_DHE_PSK))
    return nx_fail(NEXAR_ERR_AUTH,
                   "bootstrap channel with %s: negotiated %s/%s, not TLS 1.3 "
                   "(EC)DHE-PSK",
                   c->peer, gnutls_protocol_get_name(gnutls_protocol_get_version(c->s)),
                   gnutls_kx_get_name(kx));
  c->established = 1;
  return 0;
}

/* -------------------------------------------------------------------- client */

/* Non-blocking connect to one address within the deadline: fd, or a negative code with
 * *err set to the errno that explains it. */
static int connect_one(const struct addrinfo *ai, uint64_t deadline, int *err) {
  int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
  if (fd < 0) {
    *err = errno;
    return NEXAR_ERR_IO;
  }
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      *err = errno;
      close(fd);
      return NEXAR_ERR_IO;
    }
    int rc = wait_fd(fd, POLLOUT, deadline);
    if (rc) {
      *err = rc == NEXAR_ERR_TIMEOUT ? ETIMEDOUT : errno;
      close(fd);
      return rc;
    }
    int soerr = 0;
    socklen_t sl = sizeof soerr;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0) soerr = errno;
    if (soerr) {
      *err = soerr;
      close(fd);
      return NEXAR_ERR_IO;
    }
  }
  /* Back to a blocking socket; our own send/recv calls pass MSG_DONTWAIT anyway. */
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

int nx_chan_connect(nx_chan **out, const char *hostport, const char *token, uint32_t timeout_ms) {
  if (!out || !hostport || !token)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_chan_connect: NULL");
  *out = NULL;
  if (!*token) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "empty cluster token");
  nx_tls_global_init();
  uint64_t deadline = deadline_after(timeout_ms);
  char host[256], port[8];
  uint16_t p;
  int rc = nx_addr_split(hostport, "seed address", host, sizeof host, &p);
  if (rc) return rc;
  snprintf(port, sizeof port, "%u", (unsigned)p);
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  int gai = getaddrinfo(host, port, &hints, &res);
  if (gai != 0)
    return nx_fail(NEXAR_ERR_IO, "seed at %s: cannot resolve '%s': %s", hostport, host,
                   gai_strerror(gai));
  int fd = -1, err = 0;
  rc = NEXAR_ERR_IO;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    fd = connect_one(ai, deadline, &err);
    if (fd >= 0) break;
    rc = fd;
    if (rc == NEXAR_ERR_TIMEOUT) break; /* the deadline is shared: nothing left for others */
  }
  freeaddrinfo(res);
  if (fd < 0) {
    if (rc == NEXAR_ERR_TIMEOUT)
      return nx_fail(rc, "seed at %s: connect timed out after %u ms", hostport,
                     (unsigned)timeout_ms);
    return nx_fail(NEXAR_ERR_IO, "seed at %s: connect: %s", hostport, strerror(err));
  }
  set_nodelay(fd);
  nx_chan *c = chan_alloc(fd);
  if (!c) {
    close(fd);
    return nx_fail(NEXAR_ERR_NOMEM, "bootstrap channel: out of memory");
  }
  snprintf(c->peer, sizeof c->peer, "%s", hostport);
  rc = chan_handshake(c, 0, token, deadline);
  if (rc) {
    nx_chan_del(c);
    return rc;
  }
  *out = c;
  return 0;
}

/* -------------------------------------------------------------------- server */

int nx_chan_server(nx_chan **out, int fd, const char *token, uint32_t timeout_ms) {
  if (!out || fd < 0 || !token) {
    if (fd >= 0) close(fd);
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_chan_server: bad argument");
  }
  *out = NULL;
  nx_tls_global_init();
  uint64_t deadline = deadline_after(timeout_ms);
  set_nodelay(fd);
  nx_chan *c = chan_alloc(fd);
  if (!c) {
    close(fd);
    return nx_fail(NEXAR_ERR_NOMEM, "bootstrap channel: out of memory");
  }
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0 &&
      (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
    format_addr((struct sockaddr *)&ss, sl, c->peer, sizeof c->peer, 1);
  else
    snprintf(c->peer, sizeof c->peer, "fd %d", fd);
  int rc = chan_handshake(c, 1, token, deadline);
  if (rc) {
    nx_chan_del(c);
    return rc;
  }
  *out = c;
  return 0;
}

static int is_wildcard(const char *host) {
  return nx_addr_is_wildcard(host);
}

int nx_chan_listen(int *fd, const char *hostport, char *bound, size_t cap) {
  if (!fd || !hostport || (!bound && cap))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_chan_listen: NULL");
  *fd = -1;
  char host[256], port[8];
  uint16_t p;
  int rc = nx_addr_split(hostport, "seed listen address", host, sizeof host, &p);
  if (rc) return rc;
  snprintf(port, sizeof port, "%u", (unsigned)p);
  int wild = is_wildcard(host);
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  int gai = getaddrinfo(strcmp(host, "*") == 0 ? NULL : host, port, &hints, &res);
  if (gai != 0)
    return nx_fail(NEXAR_ERR_IO, "listen on %s: cannot resolve '%s': %s", hostport, host,
                   gai_strerror(gai));
  int s = -1, err = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0) {
      err = errno;
      continue;
    }
    int one = 1, zero = 0;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* "::" serves IPv4 clients too (dual stack), where the system allows it. */
    if (ai->ai_family == AF_INET6 && wild)
      setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(s, ai->ai_addr, ai->ai_addrlen) == 0 && listen(s, SOMAXCONN) == 0) break;
    err = errno;
    close(s);
    s = -1;
  }
  freeaddrinfo(res);
  if (s < 0) return nx_fail(NEXAR_ERR_IO, "listen on %s: %s", hostport, strerror(err));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(s, (struct sockaddr *)&ss, &sl) != 0) {
    err = errno;
    close(s);
    return nx_fail(NEXAR_ERR_IO, "listen on %s: getsockname: %s", hostport, strerror(err));
  }
  if (cap) {
    int n;
    if (wild) {
      n = nx_addr_join(bound, cap, host, nx_sockaddr_port((struct sockaddr *)&ss)) ? -1 : 0;
    } else {
      n = format_addr((struct sockaddr *)&ss, sl, bound, cap, 1);
    }
    if (n) {
      close(s);
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                     "listen on %s: %zu bytes cannot hold the bound "
                     "address",
                     hostport, cap);
    }
  }
  *fd = s;
  return 0;
}

/* ------------------------------------------------------------------ messages */

static int chan_usable(nx_chan *c, const char *op) {
  if (!c) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: NULL channel", op);
  if (c->broken)
    return nx_fail(NEXAR_ERR_IO, "%s with %s: channel unusable after an earlier failure", op,
                   c->peer);
  return 0;
}

/* Maps a fatal gnutls record error and marks the channel broken. */
static int record_fail(nx_chan *c, int ret, const char *op) {
  c->broken = 1;
  if (ret == GNUTLS_E_PUSH_ERROR || ret == GNUTLS_E_PULL_ERROR)
    return nx_fail(NEXAR_ERR_IO, "%s with %s: %s", op, c->peer, strerror(c->io_errno));
  if (ret == GNUTLS_E_PREMATURE_TERMINATION)
    return nx_fail(NEXAR_ERR_IO, "%s with %s: peer closed the connection", op, c->peer);
  return nx_fail(NEXAR_ERR_TLS, "%s with %s: %s", op, c->peer, gnutls_strerror(ret));
}

int nx_chan_send(nx_chan *ch, const void *msg, size_t len, uint32_t timeout_ms) {
  int rc = chan_usable(ch, "bootstrap send");
  if (rc) return rc;
  if (!msg && len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "bootstrap send: NULL message");
  if (len > NX_CHAN_MAX_MSG)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "bootstrap send: %zu bytes exceeds %u", len,
                   NX_CHAN_MAX_MSG);
  uint64_t deadline = deadline_after(timeout_ms);
  /* One buffer so header and body usually share a TLS record. */
  uint8_t *buf = malloc(4 + len);
  if (!buf) return nx_fail(NEXAR_ERR_NOMEM, "bootstrap send: out of memory");
  for (int i = 0; i < 4; i++)
    buf[i] = (uint8_t)(len >> (8 * i));
  if (len) memcpy(buf + 4, msg, len);
  size_t off = 0, total = 4 + len;
  while (off < total) {
    ssize_t ret = gnutls_record_send(ch->s, buf + off, total - off);
    if (ret > 0) {
      off += (size_t)ret;
      continue;
    }
    if (ret == GNUTLS_E_AGAIN || ret == GNUTLS_E_INTERRUPTED) {
      rc = wait_tls(ch, deadline);
      if (rc == 0) continue;
      /* gnutls holds a half-sent record that must be resent as is: give the channel up. */
      ch->broken = 1;
      rc = nx_fail(rc, "bootstrap send to %s: %s", ch->peer,
                   rc == NEXAR_ERR_TIMEOUT ? "timed out (peer not reading)" : strerror(errno));
      break;
    }
    rc = record_fail(ch, (int)ret, "bootstrap send");
    break;
  }
  free(buf);
  return rc;
}

/* Reads up to n bytes into p (at least one) within the deadline. */
static int read_some(nx_chan *c, uint8_t *p, size_t n, size_t *got, uint64_t deadline) {
  for (;;) {
    ssize_t ret = gnutls_record_recv(c->s, p, n);
    if (ret > 0) {
      *got = (size_t)ret;
      return 0;
    }
    if (ret == 0) {
      c->broken = 1;
      return nx_fail(NEXAR_ERR_IO, "bootstrap recv from %s: peer closed the channel%s", c->peer,
                     c->hdr_got ? " in the middle of a message" : "");
    }
    if (ret == GNUTLS_E_AGAIN || ret == GNUTLS_E_INTERRUPTED) {
      int rc = wait_tls(c, deadline);
      if (rc == NEXAR_ERR_TIMEOUT) return nx_fail(rc, "bootstrap recv from %s: timed out", c->peer);
      if (rc) {
        c->broken = 1;
        return nx_fail(rc, "bootstrap recv from %s: poll: %s", c->peer, strerror(errno));
      }
      continue;
    }
    if (!gnutls_error_is_fatal((int)ret)) continue;
    return record_fail(c, (int)ret, "bootstrap recv");
  }
}

int nx_chan_recv(nx_chan *ch, void **msg, size_t *len, uint32_t timeout_ms) {
  int rc = chan_usable(ch, "bootstrap recv");
  if (rc) return rc;
  if (!msg || !len) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "bootstrap recv: NULL");
  *msg = NULL;
  *len = 0;
  uint64_t deadline = deadline_after(timeout_ms);
  size_t got;
  while (ch->hdr_got < 4) {
    rc = read_some(ch, ch->hdr + ch->hdr_got, 4 - ch->hdr_got, &got, deadline);
    if (rc) return rc;
    ch->hdr_got += got;
    if (ch->hdr_got < 4) continue;
    uint32_t n = (uint32_t)ch->hdr[0] | (uint32_t)ch->hdr[1] << 8 | (uint32_t)ch->hdr[2] << 16 |
                 (uint32_t)ch->hdr[3] << 24;
    if (n > NX_CHAN_MAX_MSG) {
      ch->broken = 1; /* framing is lost */
      return nx_fail(NEXAR_ERR_PROTOCOL, "bootstrap recv from %s: message of %u bytes (limit %u)",
                     ch->peer, (unsigned)n, NX_CHAN_MAX_MSG);
    }
    ch->body = malloc(n ? n : 1);
    if (!ch->body) {
      ch->broken = 1;
      return nx_fail(NEXAR_ERR_NOMEM, "bootstrap recv: out of memory for %u bytes", (unsigned)n);
    }
    ch->body_len = n;
    ch->body_got = 0;
  }
  while (ch->body_got < ch->body_len) {
    rc = read_some(ch, ch->body + ch->body_got, ch->body_len - ch->body_got, &got, deadline);
    if (rc) return rc;
    ch->body_got += got;
  }
  *msg = ch->body;
  *len = ch->body_len;
  ch->body = NULL;
  ch->body_len = ch->body_got = ch->hdr_got = 0;
  return 0;
}

/* -------------------------------------------------------------------- status */

int nx_chan_closed(nx_chan *ch) {
  if (!ch || ch->broken) return 1;
  if (ch->s && gnutls_record_check_pending(ch->s) > 0) return 0; /* data still to read */
  struct pollfd p = {.fd = ch->fd, .events = POLLIN | POLLRDHUP};
  int n;
  do {
    n = poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return 1;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) ? 1 : 0;
}

int nx_chan_local_ip(nx_chan *ch, char *buf, size_t cap) {
  if (!ch || !buf || !cap) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_chan_local_ip: NULL");
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getsockname(ch->fd, (struct sockaddr *)&ss, &sl) != 0)
    return nx_fail(NEXAR_ERR_IO, "bootstrap channel: getsockname: %s", strerror(errno));
  char ip[NI_MAXHOST];
  /* (a dual-stack socket that reached the seed over IPv4 prints the plain v4 form) */
  if (format_addr((struct sockaddr *)&ss, sl, ip, sizeof ip, 0)) {
    return nx_fail(NEXAR_ERR_IO, "bootstrap channel: local address is not printable");
  }
  if ((size_t)snprintf(buf, cap, "%s", ip) >= cap)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "local address '%s' does not fit %zu bytes", ip,
                   cap);
  return 0;
}

int nx_chan_peer_addr(nx_chan *ch, char *buf, size_t cap) {
  if (!ch || !buf || !cap) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "nx_chan_peer_addr: NULL");
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  if (getpeername(ch->fd, (struct sockaddr *)&ss, &sl) != 0)
    return nx_fail(NEXAR_ERR_IO, "bootstrap channel: getpeername: %s", strerror(errno));
  if (format_addr((struct sockaddr *)&ss, sl, buf, cap, 1))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "peer address does not fit %zu bytes", cap);
  return 0;
}

void nx_chan_del(nx_chan *ch) {
  if (!ch) return;
  if (ch->s) {
    /* Best effort, non-blocking: lets the peer tell a clean close from a crash. */
    if (ch->established && !ch->broken) gnutls_bye(ch->s, GNUTLS_SHUT_WR);
    gnutls_deinit(ch->s);
  }
  if (ch->ccred) gnutls_psk_free_client_credentials(ch->ccred);
  if (ch->scred) gnutls_psk_free_server_credentials(ch->scred);
  if (ch->fd >= 0) close(ch->fd);
  free(ch->body);
  wipe(ch->psk, sizeof ch->psk);
  free(ch);
}
