/* Address text (see addr.h). */
#include "core/addr.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>

#include "core/common.h"

#define SHOWN 64 /* input bytes quoted in an error sentence */

/* Fails with "<what> '<addr>': <why>", the input cut at SHOWN bytes. */
static int bad(const char *what, const char *addr, size_t len, const char *fmt, ...)
    NX_PRINTF(4, 5);
static int bad(const char *what, const char *addr, size_t len, const char *fmt, ...) {
  char why[192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s '%.*s%s': %s", what ? what : "address",
                 (int)NX_MIN(len, (size_t)SHOWN), addr, len > SHOWN ? "..." : "", why);
}

static int is_name_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
         c == '-' || c == '_';
}

/* An IPv6 address, with an optional "%zone" (interface name or index). */
static int is_v6_text(const char *s, size_t n) {
  char buf[INET6_ADDRSTRLEN + 1];
  const char *pct = memchr(s, '%', n);
  size_t an = pct ? (size_t)(pct - s) : n;
  if (an == 0 || an >= sizeof buf) return 0;
  if (pct) {
    size_t zn = n - an - 1;
    if (zn == 0 || zn > 16) return 0;
    for (size_t i = 0; i < zn; i++)
      if (!is_name_char(pct[1 + i])) return 0;
  }
  memcpy(buf, s, an);
  buf[an] = 0;
  struct in6_addr a;
  return inet_pton(AF_INET6, buf, &a) == 1;
}

/* A DNS name or a dotted IPv4 address (all digits and dots: must be one). */
static int is_name_or_v4(const char *s, size_t n) {
  int digits_dots = 1;
  for (size_t i = 0; i < n; i++) {
    if (!is_name_char(s[i])) return 0;
    if (!(s[i] == '.' || (s[i] >= '0' && s[i] <= '9'))) digits_dots = 0;
  }
  if (!digits_dots) return s[0] != '-' && s[0] != '.';
  char buf[INET_ADDRSTRLEN + 1];
  if (n >= sizeof buf) return 0;
  memcpy(buf, s, n);
  buf[n] = 0;
  struct in_addr a;
  return inet_pton(AF_INET, buf, &a) == 1;
}

int nx_addr_split(const char *addr, const char *what, char *host, size_t hostcap, uint16_t *port) {
  if (!addr || !*addr)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s is empty: expected host:port",
                   what ? what : "address");
  size_t len = strnlen(addr, NX_ADDR_TEXT_MAX + 1);
  if (len > NX_ADDR_TEXT_MAX) return bad(what, addr, len, "longer than %d bytes", NX_ADDR_TEXT_MAX);
  const char *h = addr, *colon;
  size_t hlen;
  if (addr[0] == '[') {
    const char *rb = memchr(addr, ']', len);
    if (!rb) return bad(what, addr, len, "no ']' after the IPv6 address");
    if (rb[1] != ':') return bad(what, addr, len, "expected ':port' after ']'");
    h = addr + 1;
    hlen = (size_t)(rb - h);
    colon = rb + 1;
    if (!is_v6_text(h, hlen))
      return bad(what, addr, len, "'%.*s' in brackets is not an IPv6 address", (int)hlen, h);
  } else {
    colon = strrchr(addr, ':');
    if (!colon) return bad(what, addr, len, "no port: expected host:port");
    hlen = (size_t)(colon - addr);
    if (memchr(addr, ':', hlen)) { /* more than one ':' without brackets */
      if (is_v6_text(addr, hlen) && colon[1] &&
          strspn(colon + 1, "0123456789") == strlen(colon + 1))
        return bad(what, addr, len, "an IPv6 address needs brackets: write [%.*s]:%s", (int)hlen,
                   addr, colon + 1);
      if (is_v6_text(addr, len))
        return bad(what, addr, len, "an IPv6 address without a port: write [%s]:port", addr);
      return bad(what, addr, len, "expected host:port or [IPv6]:port");
    }
    if (hlen == 0)
      return bad(what, addr, len, "no host before ':' (every interface: 0.0.0.0 or [::])");
    if (!(hlen == 1 && addr[0] == '*') && !is_name_or_v4(addr, hlen))
      return bad(what, addr, len, "'%.*s' is not a host name or IPv4 address", (int)hlen, addr);
  }
  const char *p = colon + 1;
  size_t plen = strlen(p);
  unsigned long v = 0;
  int ok = plen >= 1 && plen <= 5;
  for (size_t i = 0; ok && i < plen; i++) {
    if (p[i] < '0' || p[i] > '9')
      ok = 0;
    else
      v = v * 10 + (unsigned long)(p[i] - '0');
  }
  if (!ok || v > 65535)
    return bad(what, addr, len, "port '%.*s' is not a number from 0 to 65535", SHOWN, p);
  if (hlen >= hostcap)
    return bad(what, addr, len, "the host is longer than %zu bytes", hostcap ? hostcap - 1 : 0);
  memcpy(host, h, hlen);
  host[hlen] = 0;
  *port = (uint16_t)v;
  return 0;
}

int nx_split_hostport(const char *addr, char *host, size_t hostcap, uint16_t *port) {
  return nx_addr_split(addr, NULL, host, hostcap, port);
}

int nx_addr_join(char *out, size_t cap, const char *host, uint16_t port) {
  int v6 = nx_addr_is_v6(host) && host[0] != '[';
  int n = snprintf(out, cap, v6 ? "[%s]:%u" : "%s:%u", host, (unsigned)port);
  if (n < 0 || (size_t)n >= cap) {
    if (cap) snprintf(out, cap, "?");
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "address of '%.*s' does not fit %zu bytes", SHOWN,
                   host, cap);
  }
  return 0;
}

int nx_addr_format(const struct sockaddr *sa, socklen_t len, char *out, size_t cap, int with_port) {
  struct sockaddr_storage ss;
  if (len > sizeof ss) len = sizeof ss;
  memcpy(&ss, sa, len);
  nx_sockaddr_unmap_v4(&ss, &len);
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  int n = -1;
  if (getnameinfo((struct sockaddr *)&ss, len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    if (!with_port)
      n = snprintf(out, cap, "%s", host);
    else
      n = snprintf(out, cap, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, serv);
  }
  if (n < 0 || (size_t)n >= cap) {
    if (cap) snprintf(out, cap, "?");
    return -1;
  }
  return 0;
}

int nx_addr_is_wildcard(const char *host) {
  return !host || !*host || !strcmp(host, "*") || !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
}

int nx_addr_is_v6(const char *host) {
  return host && strchr(host, ':') != NULL;
}

uint16_t nx_sockaddr_port(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
  if (sa->sa_family == AF_INET) return ntohs(((const struct sockaddr_in *)sa)->sin_port);
  return 0;
}

void nx_sockaddr_set_port(struct sockaddr *sa, uint16_t port) {
  if (sa->sa_family == AF_INET6)
    ((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
  else if (sa->sa_family == AF_INET)
    ((struct sockaddr_in *)sa)->sin_port = htons(port);
}

void nx_sockaddr_map_v4(struct sockaddr_storage *ss, socklen_t *len) {
  if (ss->ss_family != AF_INET) return;
  struct sockaddr_in v4;
  memcpy(&v4, ss, sizeof v4);
  struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = v4.sin_port};
  v6.sin6_addr.s6_addr[10] = 0xff;
  v6.sin6_addr.s6_addr[11] = 0xff;
  memcpy(&v6.sin6_addr.s6_addr[12], &v4.sin_addr, 4);
  memset(ss, 0, sizeof *ss);
  memcpy(ss, &v6, sizeof v6);
  *len = sizeof v6;
}

void nx_sockaddr_unmap_v4(struct sockaddr_storage *ss, socklen_t *len) {
  if (ss->ss_family != AF_INET6) return;
  struct sockaddr_in6 v6;
  memcpy(&v6, ss, sizeof v6);
  if (!IN6_IS_ADDR_V4MAPPED(&v6.sin6_addr)) return;
  struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = v6.sin6_port};
  memcpy(&v4.sin_addr, &v6.sin6_addr.s6_addr[12], 4);
  memset(ss, 0, sizeof *ss);
  memcpy(ss, &v4, sizeof v4);
  *len = sizeof v4;
}

int nx_sockaddr_same(const struct sockaddr *a, const struct sockaddr *b) {
  static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const struct sockaddr *s[2] = {a, b};
  const uint8_t *ip[2];
  size_t len[2];
  uint16_t port[2];
  for (int i = 0; i < 2; i++) {
    if (s[i]->sa_family == AF_INET) {
      const struct sockaddr_in *v = (const struct sockaddr_in *)s[i];
      ip[i] = (const uint8_t *)&v->sin_addr, len[i] = 4, port[i] = v->sin_port;
    } else if (s[i]->sa_family == AF_INET6) {
      const struct sockaddr_in6 *v = (const struct sockaddr_in6 *)s[i];
      ip[i] = v->sin6_addr.s6_addr, len[i] = 16, port[i] = v->sin6_port;
      if (!memcmp(ip[i], v4map, 12)) ip[i] += 12, len[i] = 4;
    } else {
      return 0;
    }
  }
  if (port[0] != port[1]) return 0;
  if (len[0] != len[1]) return 2;
  return !memcmp(ip[0], ip[1], len[0]);
}
