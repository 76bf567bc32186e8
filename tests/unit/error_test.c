/* Error codes: the public values are pinned (ABI), and nexar_strerror, made
 * from the same NEXAR_ERRNO_MAP list as the enum, names every code. */
#include <string.h>

#include <nexar/nexar.h>

#include "check.h"

/* The released values: a change to NEXAR_ERRNO_MAP that renumbers fails here. */
_Static_assert(NEXAR_OK == 0, "NEXAR_OK");
_Static_assert(NEXAR_ERR_INVALID_ARGUMENT == -1 && NEXAR_ERR_INVALID_RANK == -2 &&
                   NEXAR_ERR_SIZE_MISMATCH == -3 && NEXAR_ERR_MISMATCH == -4 &&
                   NEXAR_ERR_TIMEOUT == -5 && NEXAR_ERR_PEER_LOST == -6 &&
                   NEXAR_ERR_ABORTED == -7 && NEXAR_ERR_AUTH == -8 && NEXAR_ERR_TLS == -9 &&
                   NEXAR_ERR_PROTOCOL == -10 && NEXAR_ERR_IO == -11 && NEXAR_ERR_NOMEM == -12 &&
                   NEXAR_ERR_RPC_NO_HANDLER == -13 && NEXAR_ERR_RPC_FAILED == -14 &&
                   NEXAR_ERR_UNSUPPORTED == -15,
               "public error values changed");

int main(void) {
  int n = 0, lowest = 0;
#define CHECK_ONE(name, value, text)                                                               \
  do {                                                                                             \
    const char *s = nexar_strerror(value);                                                         \
    CHECK(strcmp(s, "NEXAR_ERR_" #name ": " text) == 0, "strerror(%d) = '%s'", value, s);          \
    CHECK(NEXAR_ERR_##name == (value), #name);                                                     \
    n++;                                                                                           \
    if ((value) < lowest) lowest = (value);                                                        \
  } while (0);
  NEXAR_ERRNO_MAP(CHECK_ONE)
#undef CHECK_ONE
  CHECK(n == 15 && lowest == -15, "%d codes down to %d: the list must stay contiguous", n, lowest);
  CHECK(strcmp(nexar_strerror(NEXAR_OK), "NEXAR_OK: success") == 0, "%s", nexar_strerror(0));
  CHECK(strncmp(nexar_strerror(-16), "NEXAR_ERR_?", 11) == 0, "unknown code: %s",
        nexar_strerror(-16));
  CHECK(strncmp(nexar_strerror(1), "NEXAR_ERR_?", 11) == 0, "positive code");
  nexar_error e = NEXAR_ERR_TIMEOUT; /* the enum type is usable */
  CHECK(e == -5, "enum");
  printf("error_test ok\n");
  return 0;
}
