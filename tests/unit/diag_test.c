/* Hang diagnostics: a collective that a peer never joins times out with an
 * error naming the operation, its sequence number, the rank waited for and
 * the step, and NEXAR_DUMP_ON_TIMEOUT=1 writes the operation log to stderr. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nexar/nexar.h>

#include "check.h"

int main(void) {
  setenv("NEXAR_DUMP_ON_TIMEOUT", "1", 1);
  /* the message path's diagnostics (rounds, sends): a collective segment,
   * which the bootstrap's own collectives may bring up, has no rounds */
  setenv("NEXAR_SHM_COLL", "0", 1);
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.collective_timeout_ms = 600;
  nexar_client *c[2];
  CHECK(nexar_bootstrap_local(c, 2, &cfg) == 0, "bootstrap");
  char buf[64];
  CHECK(nexar_send(c[0], "x", 1, 1, 5) == 0 && nexar_recv(c[1], buf, 1, 0, 5) == 0, "p2p");
  float v[16] = {0};
  /* capture stderr while rank 0 waits alone */
  char path[] = "/tmp/nexar_diag_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  fflush(stderr);
  int saved = dup(2);
  dup2(fd, 2);
  int rc = nexar_all_reduce(c[0], v, 16, NEXAR_F32, NEXAR_SUM);
  char err[512];
  snprintf(err, sizeof err, "%s", nexar_last_error());
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  CHECK(rc == NEXAR_ERR_TIMEOUT, "rc %d", rc);
  CHECK(strstr(err, "all_reduce #") && strstr(err, "rank 1") && strstr(err, "round"),
        "error does not name op, peer and step: %s", err);
  char dump[8192] = "";
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, dump, sizeof dump - 1);
  close(fd);
  unlink(path);
  CHECK(n > 0 && strstr(dump, "recent operations of comm 0 on rank 0") &&
            strstr(dump, "all_reduce") && strstr(dump, "failed") && strstr(dump, "send"),
        "dump missing: %s", dump);
  printf("diag_test: error: %s\n", err);
  for (int i = 0; i < 2; i++)
    nexar_client_del(c[i]);
  printf("diag_test: all passed\n");
  return 0;
}
