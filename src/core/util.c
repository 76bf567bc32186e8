/* Clock, CSPRNG, constant-time compare, allocation and address parsing. */
#include "core/common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

uint64_t nx_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int nx_random(void *buf, size_t len) {
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return nx_fail(NEXAR_ERR_IO, "getrandom: %s", strerror(errno));
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

int nx_ct_equal(const void *a, const void *b, size_t len) {
  const volatile uint8_t *x = a, *y = b;
  uint8_t d = 0;
  for (size_t i = 0; i < len; i++) d |= (uint8_t)(x[i] ^ y[i]);
  return d == 0;
}

void *nx_calloc(size_t n, size_t size) {
  return calloc(n ? n : 1, size ? size : 1);
}

char *nx_strdup(const char *s) {
  return s ? strdup(s) : NULL;
}

int nx_split_hostport(const char *addr, char *host, size_t hostcap, uint16_t *port) {
  if (!addr || !*addr) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "empty address");
  const char *colon;
  const char *h = addr;
  size_t hlen;
  if (addr[0] == '[') {
    const char *rb = strchr(addr, ']');
    if (!rb || rb[1] != ':')
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "address '%s': expected [v6]:port", addr);
    h = addr + 1;
    hlen = (size_t)(rb - h);
    colon = rb + 1;
  } else {
    colon = strrchr(addr, ':');
    if (!colon || strchr(addr, ':') != colon)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "address '%s': expected host:port", addr);
    hlen = (size_t)(colon - addr);
  }
  if (hlen == 0 || hlen >= hostcap)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "address '%s': bad host", addr);
  char *end;
  errno = 0;
  unsigned long p = strtoul(colon + 1, &end, 10);
  if (errno || *end || end == colon + 1 || p > 65535)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "address '%s': bad port", addr);
  memcpy(host, h, hlen);
  host[hlen] = 0;
  *port = (uint16_t)p;
  return 0;
}
