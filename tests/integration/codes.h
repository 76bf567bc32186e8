/* Short names of result codes ("OK", "PEER_LOST", "MISMATCH"), as the fault
 * tests print them and their scripts parse them: derived from
 * nexar_strerror, so every code has one. Shared by fault_test,
 * fault_worker and recover_worker. */
#ifndef NX_TEST_CODES_H
#define NX_TEST_CODES_H
#include <nexar/nexar.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Clocks and argument parsing of the fault workers (fault_worker,
 * recover_worker). */
static inline double mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static inline long long unix_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A decimal number in 0..max into *out: 0, or -1 if s is not one. */
static inline int parse_u(const char *s, unsigned long max, unsigned long *out) {
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || end == s || *end || v > max) return -1;
  *out = v;
  return 0;
}

static inline const char *code_name(int rc) {
  static _Thread_local char bufs[4][32]; /* a few in one printf */
  static _Thread_local unsigned next;
  char *b = bufs[next++ % 4];
  const char *s = nexar_strerror(rc), *colon = strchr(s, ':');
  size_t skip = strncmp(s, "NEXAR_ERR_", 10) == 0 ? 10 : strncmp(s, "NEXAR_", 6) == 0 ? 6 : 0;
  size_t n = (colon ? (size_t)(colon - s) : strlen(s)) - skip;
  if (n >= sizeof bufs[0]) n = sizeof bufs[0] - 1;
  memcpy(b, s + skip, n);
  b[n] = 0;
  return b;
}

#endif
