/* Short names of result codes ("OK", "PEER_LOST", "MISMATCH"), as the fault
 * tests print them and their scripts parse them: derived from
 * nexar_strerror, so every code has one. Shared by fault_test and
 * fault_worker. */
#ifndef NX_TEST_CODES_H
#define NX_TEST_CODES_H
#include <nexar/nexar.h>
#include <string.h>

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
