/* The agreement's output pass must not be re-entered from one of its own
 * sends (regression). A send made by an application thread runs the engine's
 * timers; a heartbeat timeout there suspects a member and pumps the same
 * agreement again; that nested pass popped the next action, which freed the
 * message the outer pass was still sending to the remaining members: they
 * got freed memory, called it a malformed agreement message and closed the
 * connection to a live member (seen as "no majority" in integration.recover
 * under load).
 *
 * Deterministic here: 4 ranks as threads, rank 3 aborts, ranks 0-2 run
 * nexar_agree; right after rank 0's first agreement send a test seam makes
 * the nested call happen (it suspects rank 3 again: no change of state, only
 * the nested pass). Every survivor must get PEER_LOST (rank 3 is dead) with
 * the AND of the flags, and no connection between survivors may break. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "runtime/comm.h"
#include "check.h"

static nexar_client *g_c[4];
static atomic_int g_fired; /* read by every endpoint's threads */

static void nest(nx_comm *c, uint32_t to) {
  (void)to;
  if (c != g_c[0] || atomic_exchange(&g_fired, 1)) return; /* rank 0's first send only */
  nx_agr_suspect_locked(c, 3);
}

typedef struct {
  nexar_client *c;
  uint32_t flag;
  int rc;
} arg;

static void *agree_main(void *p) {
  arg *a = p;
  a->rc = nexar_agree(a->c, &a->flag);
  return NULL;
}

int main(void) {
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.recovery_policy = NEXAR_RECOVERY_MANUAL;
  cfg.collective_timeout_ms = 10000;
  CHECK(nexar_bootstrap_local(g_c, 4, &cfg) == 0, "bootstrap_local: %s", nexar_last_error());
  nexar_abort(g_c[3]);
  for (int i = 0; i < 3; i++) { /* every survivor knows rank 3 is gone */
    size_t n = 0;
    for (int k = 0; k < 500 && n == 0; k++) {
      nexar_failed_ranks(g_c[i], NULL, 0, &n);
      if (!n) usleep(10000);
    }
    CHECK(n == 1, "rank %d sees %zu failed ranks", i, n);
  }
  nx_agr_test_sent = nest;
  arg a[3] = {{g_c[0], 0x7, -1}, {g_c[1], 0x5, -1}, {g_c[2], 0x6, -1}};
  pthread_t t[3];
  for (int i = 0; i < 3; i++)
    pthread_create(&t[i], NULL, agree_main, &a[i]);
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  nx_agr_test_sent = NULL;
  CHECK(atomic_load(&g_fired), "the seam fired");
  for (int i = 0; i < 3; i++)
    CHECK(a[i].rc == NEXAR_ERR_PEER_LOST && a[i].flag == 0x4,
          "rank %d: agree gave %s, flag %x (want PEER_LOST, 4)", i, nexar_strerror(a[i].rc),
          a[i].flag);
  for (int i = 0; i < 3; i++) { /* no survivor lost another */
    uint32_t d[4];
    size_t n = 0;
    nexar_failed_ranks(g_c[i], d, 4, &n);
    CHECK(n == 1 && d[0] == 3, "rank %d: %zu failed ranks (want only 3)", i, n);
  }
  for (int i = 0; i < 4; i++)
    nexar_client_del(g_c[i]);
  printf("agree_nest_test: ok\n");
  return 0;
}
