/* UDP I/O with GSO/GRO and a deterministic, test-only impairment hook. */
#include "transport/udp.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/addr.h"

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define NX_RX_BATCH NX_UDP_RX_BATCH
#define NX_RX_BUF 65536

/* ------------------------------------------------------------ impairment */

typedef struct nx_delayed {
  uint64_t due;
  struct sockaddr_storage to;
  socklen_t tolen;
  size_t len;
  struct nx_delayed *next;
  uint8_t data[];
} nx_delayed;

struct nx_impair {
  uint32_t loss_ppm, reorder_ppm, dup_ppm;
  uint64_t delay_ns, jitter_ns;
  uint64_t rng;
  nx_delayed *q; /* sorted by due time */
};

static uint64_t imp_rand(nx_impair *im) { /* xorshift64*: deterministic per seed */
  uint64_t x = im->rng;
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  im->rng = x;
  return x * 2685821657736338717ull;
}

static int parse_pct(const char *v, uint32_t *ppm) {
  char *end;
  double d = strtod(v, &end);
  if (end == v || d < 0 || d > 100) return -1;
  if (*end == '%') end++;
  if (*end && *end != ',') return -1;
  *ppm = (uint32_t)(d * 10000.0 + 0.5);
  return 0;
}

static int parse_dur(const char *v, uint64_t *ns) {
  char *end;
  double d = strtod(v, &end);
  if (end == v || d < 0) return -1;
  double mul = 1e6; /* default ms */
  if (strncmp(end, "us", 2) == 0)
    mul = 1e3, end += 2;
  else if (strncmp(end, "ms", 2) == 0)
    end += 2;
  else if (*end == 's')
    mul = 1e9, end += 1;
  if (*end && *end != ',') return -1;
  *ns = (uint64_t)(d * mul);
  return 0;
}

int nx_impair_parse(const char *spec, nx_impair **out) {
  *out = NULL;
  nx_impair *im = nx_calloc(1, sizeof *im);
  if (!im) return NEXAR_ERR_NOMEM;
  im->rng = 0x9e3779b97f4a7c15ull;
  const char *p = spec;
  while (p && *p) {
    const char *eq = strchr(p, '=');
    if (!eq) goto bad;
    size_t klen = (size_t)(eq - p);
    const char *v = eq + 1;
    int rc = -1;
    if (klen == 4 && !strncmp(p, "loss", 4))
      rc = parse_pct(v, &im->loss_ppm);
    else if (klen == 7 && !strncmp(p, "reorder", 7))
      rc = parse_pct(v, &im->reorder_ppm);
    else if (klen == 3 && !strncmp(p, "dup", 3))
      rc = parse_pct(v, &im->dup_ppm);
    else if (klen == 5 && !strncmp(p, "delay", 5))
      rc = parse_dur(v, &im->delay_ns);
    else if (klen == 6 && !strncmp(p, "jitter", 6))
      rc = parse_dur(v, &im->jitter_ns);
    else if (klen == 4 && !strncmp(p, "seed", 4)) {
      char *end;
      unsigned long long s = strtoull(v, &end, 10);
      if (end != v && (*end == 0 || *end == ',')) im->rng = s * 0x9e3779b97f4a7c15ull + 1, rc = 0;
    }
    if (rc) goto bad;
    p = strchr(v, ',');
    if (p) p++;
  }
  *out = im;
  return 0;
bad:
  free(im);
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "NEXAR_TEST_IMPAIR: cannot parse '%s'", spec);
}

static void imp_free(nx_impair *im) {
  if (!im) return;
  while (im->q) {
    nx_delayed *d = im->q;
    im->q = d->next;
    free(d);
  }
  free(im);
}

static void imp_enqueue(nx_impair *im, uint64_t due, const struct sockaddr *to, socklen_t tolen,
                        const uint8_t *pkt, size_t len) {
  nx_delayed *d = malloc(sizeof *d + len);
  if (!d) return; /* an impairment hook may drop under memory pressure */
  d->due = due;
  memcpy(&d->to, to, tolen);
  d->tolen = tolen;
  d->len = len;
  memcpy(d->data, pkt, len);
  nx_delayed **pp = &im->q;
  while (*pp && (*pp)->due <= due)
    pp = &(*pp)->next;
  d->next = *pp;
  *pp = d;
}

static void raw_send(nx_udp *u, const struct sockaddr *to, socklen_t tolen, const uint8_t *p,
                     size_t len) {
  while (sendto(u->fd, p, len, 0, to, tolen) < 0 && errno == EINTR) {
  }
  u->tx_packets++;
}

/* Every datagram passes here when impairment is on: drop, duplicate, delay or
 * reorder it, deterministically from the seed. */
static void imp_send(nx_udp *u, const struct sockaddr *to, socklen_t tolen, const uint8_t *p,
                     size_t len) {
  nx_impair *im = u->imp;
  if (imp_rand(im) % 1000000 < im->loss_ppm) {
    u->imp_dropped++;
    return;
  }
  int copies = (imp_rand(im) % 1000000 < im->dup_ppm) ? 2 : 1;
  for (int i = 0; i < copies; i++) {
    uint64_t delay = im->delay_ns;
    if (im->jitter_ns) delay += imp_rand(im) % im->jitter_ns;
    if (imp_rand(im) % 1000000 < im->reorder_ppm) delay += 1000000 + imp_rand(im) % 2000000;
    if (delay == 0)
      raw_send(u, to, tolen, p, len);
    else
      imp_enqueue(im, nx_now_ns() + delay, to, tolen, p, len);
  }
}

uint64_t nx_udp_flush_delayed(nx_udp *u, uint64_t now) {
  if (!u->imp) return UINT64_MAX;
  nx_impair *im = u->imp;
  while (im->q && im->q->due <= now) {
    nx_delayed *d = im->q;
    im->q = d->next;
    raw_send(u, (struct sockaddr *)&d->to, d->tolen, d->data, d->len);
    free(d);
  }
  return im->q ? im->q->due : UINT64_MAX;
}

/* ----------------------------------------------------------------- socket */

int nx_udp_open(nx_udp *u, const char *host, uint16_t port) {
  memset(u, 0, sizeof *u);
  u->fd = -1;
  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  char portstr[8];
  snprintf(portstr, sizeof portstr, "%u", port);
  const char *h = (host && *host && strcmp(host, "*") != 0) ? host : "0.0.0.0";
  int gai = getaddrinfo(h, portstr, &hints, &res);
  if (gai != 0 || !res)
    return nx_fail(NEXAR_ERR_IO, "bind: cannot resolve '%s': %s", h, gai_strerror(gai));
  int fd = socket(res->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return nx_fail(NEXAR_ERR_IO, "socket: %s", strerror(errno));
  }
  /* "::" serves IPv4 peers too (as IPv4-mapped addresses), whatever the
   * system's bindv6only default */
  int zero = 0;
  if (res->ai_family == AF_INET6 && nx_addr_is_wildcard(h))
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (bind(fd, res->ai_addr, res->ai_addrlen) < 0) {
    int e = errno;
    char shown[NX_ADDR_TEXT_MAX];
    nx_addr_join(shown, sizeof shown, h, port);
    freeaddrinfo(res);
    close(fd);
    return nx_fail(NEXAR_ERR_IO, "bind %s: %s", shown, strerror(e));
  }
  u->family = res->ai_family;
  freeaddrinfo(res);
  int sz = 32 << 20;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof sz) < 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof sz) < 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  /* Oversize datagrams must fail with EMSGSIZE rather than fragment. */
  int pmtu = IP_PMTUDISC_DO, pmtu6 = IPV6_PMTUDISC_DO;
  if (u->family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu6, sizeof pmtu6);
  /* IPv4, and the IPv4-mapped traffic of a dual-stack socket */
  setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  int one = 1;
  u->gro = setsockopt(fd, IPPROTO_UDP, UDP_GRO, &one, sizeof one) == 0;
  int seg = 1200;
  u->gso = setsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &seg, sizeof seg) == 0;
  seg = 0;
  if (u->gso) setsockopt(fd, IPPROTO_UDP, UDP_SEGMENT, &seg, sizeof seg);
  u->locallen = sizeof u->local;
  getsockname(fd, (struct sockaddr *)&u->local, &u->locallen);
  u->fd = fd;
  const char *spec = getenv("NEXAR_TEST_IMPAIR");
  if (spec && *spec) {
    int rc = nx_impair_parse(spec, &u->imp);
    if (rc) {
      close(fd);
      u->fd = -1;
      return rc;
    }
    u->gso = 0; /* impairment acts per datagram */
  }
  return 0;
}

void nx_udp_close(nx_udp *u) {
  if (u->fd >= 0) close(u->fd);
  u->fd = -1;
  imp_free(u->imp);
  u->imp = NULL;
  free(u->rxbuf);
  u->rxbuf = NULL;
}

int nx_udp_send(nx_udp *u, const struct sockaddr *to, socklen_t tolen, const uint8_t *buf,
                const size_t *lens, size_t n) {
  if (n == 0) return 0;
  if (u->imp) {
    size_t off = 0;
    for (size_t i = 0; i < n; i++)
      imp_send(u, to, tolen, buf + off, lens[i]), off += lens[i];
    return 0;
  }
  size_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += lens[i];
  if (n > 1 && u->gso && total <= 65000) {
    struct iovec iov = {(void *)buf, total};
    char cbuf[CMSG_SPACE(sizeof(uint16_t))] = {0};
    struct msghdr mh = {0};
    mh.msg_name = (void *)to;
    mh.msg_namelen = tolen;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = IPPROTO_UDP;
    cm->cmsg_type = UDP_SEGMENT;
    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
    uint16_t segsz = (uint16_t)lens[0];
    memcpy(CMSG_DATA(cm), &segsz, sizeof segsz);
    ssize_t r;
    do
      r = sendmsg(u->fd, &mh, 0);
    while (r < 0 && errno == EINTR);
    if (r >= 0) {
      u->tx_packets += n;
      return 0;
    }
    if (errno != EIO && errno != EINVAL) return 0; /* EAGAIN etc: QUIC recovers the loss */
    u->gso = 0;                                    /* the device refuses GSO: fall back */
  }
  struct mmsghdr msgs[64];
  struct iovec iovs[64];
  size_t off = 0, i = 0;
  while (i < n) {
    size_t k = 0;
    for (; k < 64 && i + k < n; k++) {
      iovs[k].iov_base = (void *)(buf + off);
      iovs[k].iov_len = lens[i + k];
      off += lens[i + k];
      memset(&msgs[k], 0, sizeof msgs[k]);
      msgs[k].msg_hdr.msg_name = (void *)to;
      msgs[k].msg_hdr.msg_namelen = tolen;
      msgs[k].msg_hdr.msg_iov = &iovs[k];
      msgs[k].msg_hdr.msg_iovlen = 1;
    }
    int r;
    do
      r = sendmmsg(u->fd, msgs, (unsigned)k, 0);
    while (r < 0 && errno == EINTR);
    u->tx_packets += k;
    i += k;
  }
  return 0;
}

int nx_udp_recv(nx_udp *u, nx_udp_rx_fn fn, void *ud) {
  if (!u->rxbuf) { /* one buffer per socket: callers hold the endpoint lock */
    u->rxbuf = malloc((size_t)NX_RX_BATCH * NX_RX_BUF);
    if (!u->rxbuf) return 0;
  }
  uint8_t *bufs = u->rxbuf;
  struct mmsghdr msgs[NX_RX_BATCH];
  struct iovec iovs[NX_RX_BATCH];
  struct sockaddr_storage from[NX_RX_BATCH];
  char cbufs[NX_RX_BATCH][CMSG_SPACE(sizeof(int))];
  memset(msgs, 0, sizeof msgs);
  for (int i = 0; i < NX_RX_BATCH; i++) {
    iovs[i].iov_base = bufs + (size_t)i * NX_RX_BUF;
    iovs[i].iov_len = NX_RX_BUF;
    msgs[i].msg_hdr.msg_name = &from[i];
    msgs[i].msg_hdr.msg_namelen = sizeof from[i];
    msgs[i].msg_hdr.msg_iov = &iovs[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_control = cbufs[i];
    msgs[i].msg_hdr.msg_controllen = sizeof cbufs[i];
  }
  int n = recvmmsg(u->fd, msgs, NX_RX_BATCH, MSG_DONTWAIT, NULL);
  if (n <= 0) return 0;
  int delivered = 0;
  for (int i = 0; i < n; i++) {
    size_t len = msgs[i].msg_len;
    size_t seg = len;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msgs[i].msg_hdr); cm;
         cm = CMSG_NXTHDR(&msgs[i].msg_hdr, cm)) {
      if (cm->cmsg_level == IPPROTO_UDP && cm->cmsg_type == UDP_GRO) {
        int gs;
        memcpy(&gs, CMSG_DATA(cm), sizeof gs);
        if (gs > 0) seg = (size_t)gs;
      }
    }
    uint8_t *p = iovs[i].iov_base;
    for (size_t off = 0; off < len; off += seg) {
      size_t l = NX_MIN(seg, len - off);
      fn(ud, (struct sockaddr *)&from[i], msgs[i].msg_hdr.msg_namelen, p + off, l);
      delivered++;
    }
  }
  u->rx_packets += (uint64_t)delivered;
  return n; /* recvmmsg count: below the batch means the socket is drained */
}

size_t nx_udp_path_payload(const struct sockaddr *to, socklen_t tolen) {
  /* an IPv4-mapped peer (dual-stack socket) has an IPv4 path */
  struct sockaddr_storage ss;
  socklen_t len = NX_MIN(tolen, (socklen_t)sizeof ss);
  memcpy(&ss, to, len);
  nx_sockaddr_unmap_v4(&ss, &len);
  const struct sockaddr *addr = (const struct sockaddr *)&ss;
  int fd = socket(addr->sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1200;
  size_t payload = 1200;
  if (connect(fd, addr, len) == 0) {
    int mtu = 0;
    socklen_t ml = sizeof mtu;
    int v6 = addr->sa_family == AF_INET6;
    if (getsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_MTU : IP_MTU, &mtu, &ml) == 0 &&
        mtu > 0) {
      long p = (long)mtu - (v6 ? 48 : 28);
      if (p > 65000) p = 65000; /* leave room below the 65507 UDP limit */
      if (p >= 1200) payload = (size_t)p;
    }
  }
  close(fd);
  return payload;
}
