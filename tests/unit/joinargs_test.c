/* Arguments of nexar_join / nexar_init_from_env that cannot work are refused
 * before any socket, with a sentence naming the values: a rank outside the
 * world ("rank 7 of 3"), a world past the limit, an address or token from
 * the environment longer than the library accepts. */
#include <stdlib.h>
#include <string.h>

#include <nexar/nexar.h>

#include "check.h"

static int err_has(const char *s) {
  return strstr(nexar_last_error(), s) != NULL;
}

static void clear(void) {
  const char *v[] = {"NEXAR_SEED_ADDR", "NEXAR_RANK",    "NEXAR_WORLD_SIZE", "MASTER_ADDR",
                     "MASTER_PORT",     "RANK",          "WORLD_SIZE",       "NEXAR_CLUSTER_TOKEN",
                     "NEXAR_SEED_PORT", "NEXAR_TOPOLOGY"};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
    unsetenv(v[i]);
}

int main(void) {
  nexar_client *c = NULL;
  clear();
  /* port 9 (discard) on loopback: nothing listens; the check must come first */
  setenv("NEXAR_SEED_ADDR", "127.0.0.1:9", 1);
  setenv("NEXAR_CLUSTER_TOKEN", "tok", 1);
  setenv("NEXAR_CONNECT_TIMEOUT_MS", "2000", 1);
  setenv("NEXAR_RANK", "7", 1);
  setenv("NEXAR_WORLD_SIZE", "3", 1);
  int rc = nexar_init_from_env(&c);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT && !c, "rank 7 of 3: rc %d", rc);
  CHECK(err_has("rank 7") && err_has("world of 3") && err_has("NEXAR_RANK=7") &&
            err_has("NEXAR_WORLD_SIZE=3"),
        "rank 7 of 3: vague error");
  setenv("NEXAR_RANK", "3", 1);
  CHECK(nexar_init_from_env(&c) == NEXAR_ERR_INVALID_ARGUMENT && err_has("rank 3"), "rank 3 of 3");
  setenv("NEXAR_RANK", "0", 1);
  setenv("NEXAR_WORLD_SIZE", "70000", 1);
  CHECK(nexar_init_from_env(&c) == NEXAR_ERR_INVALID_ARGUMENT && err_has("world of 70000") &&
            err_has("65536"),
        "world 70000");

  /* torchrun variables */
  clear();
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "9", 1);
  setenv("RANK", "7", 1);
  setenv("WORLD_SIZE", "3", 1);
  setenv("NEXAR_CLUSTER_TOKEN", "tok", 1);
  CHECK(nexar_init_from_env(&c) == NEXAR_ERR_INVALID_ARGUMENT, "torchrun rank 7 of 3");
  CHECK(err_has("rank 7") && err_has("world of 3") && err_has("RANK=7") && err_has("WORLD_SIZE=3"),
        "torchrun rank 7 of 3: vague");
  char longv[400];
  memset(longv, 'h', sizeof longv - 1);
  longv[sizeof longv - 1] = '\0';
  setenv("RANK", "1", 1);
  setenv("MASTER_ADDR", longv, 1);
  CHECK(nexar_init_from_env(&c) == NEXAR_ERR_INVALID_ARGUMENT && err_has("MASTER_ADDR") &&
            err_has("longer than"),
        "long MASTER_ADDR");
  clear();
  setenv("NEXAR_SEED_ADDR", longv, 1);
  setenv("NEXAR_CLUSTER_TOKEN", "tok", 1);
  CHECK(nexar_init_from_env(&c) == NEXAR_ERR_INVALID_ARGUMENT && err_has("NEXAR_SEED_ADDR") &&
            err_has("longer than"),
        "long NEXAR_SEED_ADDR");
  CHECK(nexar_join(&c, longv, NULL) == NEXAR_ERR_INVALID_ARGUMENT && err_has("seed address"),
        "long seed address");
  clear();
  unsetenv("NEXAR_CONNECT_TIMEOUT_MS");
  printf("joinargs_test ok\n");
  return 0;
}
