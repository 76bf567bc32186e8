/* The assertion of the unit tests: on failure, where, what, and the library's
 * last error sentence, then exit(1). */
#ifndef NX_TESTS_CHECK_H
#define NX_TESTS_CHECK_H

#include <nexar/nexar.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, " (last error: %s)\n", nexar_last_error());                                  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

#endif
