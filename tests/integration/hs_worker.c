/* One rank of the admission test (nexar-run -n 3): binds 127.0.0.1 at
 * HS_BASE_PORT + rank (so the attacker knows the ports before formation),
 * forms the world, then runs allreduce + point-to-point ring iterations for
 * HS_SECONDS. Rank 0 prints "formed <s> rate <iterations/s>". */
#include <nexar/nexar.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(const char *what, int rc) {
  fprintf(stderr, "hs_worker: %s: %s (%s)\n", what, nexar_strerror(rc), nexar_last_error());
  return 1;
}

int main(void) {
  const char *base = getenv("HS_BASE_PORT"), *rk = getenv("NEXAR_RANK");
  if (base && rk) {
    static char bind[64];
    snprintf(bind, sizeof bind, "127.0.0.1:%d", atoi(base) + atoi(rk));
    setenv("NEXAR_BIND_ADDR", bind, 1);
  }
  double secs = getenv("HS_SECONDS") ? atof(getenv("HS_SECONDS")) : 3;
  double t0 = now_s();
  nexar_client *c;
  int rc = nexar_init_from_env(&c);
  if (rc) return fail("init_from_env", rc);
  double formed = now_s() - t0;
  uint32_t r = nexar_rank(c), n = nexar_world_size(c);
  if ((rc = nexar_barrier(c))) return fail("barrier", rc);
  long it = 0;
  double start = now_s(), stop_at = start + secs;
  int stop = 0;
  while (!stop) {
    double v[8] = {1, 1, 1, 1, 1, 1, 1, (double)(now_s() >= stop_at)};
    if ((rc = nexar_all_reduce(c, v, 8, NEXAR_F64, NEXAR_MAX))) return fail("allreduce", rc);
    stop = v[7] > 0; /* everyone stops after the same iteration */
    uint64_t out = (uint64_t)it * 131 + r, in = 0;
    uint32_t next = (r + 1) % n, prev = (r + n - 1) % n;
    nexar_request *rq;
    if ((rc = nexar_recv_nb(c, &in, sizeof in, prev, 5, &rq))) return fail("recv_nb", rc);
    if ((rc = nexar_send(c, &out, sizeof out, next, 5))) return fail("send", rc);
    if ((rc = nexar_wait(rq))) return fail("wait", rc);
    if (in != (uint64_t)it * 131 + prev) return fail("ring data", -1);
    it++;
  }
  double el = now_s() - start;
  if (r == 0) printf("formed %.3f rate %.0f\n", formed, it / el);
  nexar_barrier(c);
  nexar_client_del(c);
  return 0;
}
