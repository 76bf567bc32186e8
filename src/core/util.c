/* Clock, CSPRNG, constant-time compare and allocation (address text: addr.c). */
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

uint64_t nx_coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
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
  for (size_t i = 0; i < len; i++)
    d |= (uint8_t)(x[i] ^ y[i]);
  return d == 0;
}

void *nx_calloc(size_t n, size_t size) {
  return calloc(n ? n : 1, size ? size : 1);
}

char *nx_strdup(const char *s) {
  return s ? strdup(s) : NULL;
}

int nx_realloc_fail_at;

void *nx_realloc(void *p, size_t n) {
  if (nx_realloc_fail_at > 0 && --nx_realloc_fail_at == 0) return NULL;
  return realloc(p, n);
}
