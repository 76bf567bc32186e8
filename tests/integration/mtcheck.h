/* CHECK for tests whose ranks are threads: a failed condition prints where,
 * the message and the library's last error (of the failing thread), and
 * counts in g_fail; the test exits non-zero if g_fail is. */
#ifndef NX_TEST_MTCHECK_H
#define NX_TEST_MTCHECK_H
#include <stdatomic.h>
#include <stdio.h>

#include <nexar/nexar.h>

static atomic_int g_fail;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf(" (%s)\n", nexar_last_error());                                                       \
      atomic_fetch_add(&g_fail, 1);                                                                \
    }                                                                                              \
  } while (0)

#endif
