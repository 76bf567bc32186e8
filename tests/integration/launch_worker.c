/* One rank under a real launcher (srun, mpirun, mpiexec, torchrun): joins
 * with nexar_init_from_env, checks that its rank and world are the
 * launcher's (LAUNCH_RANK_VAR / LAUNCH_WORLD_VAR name the launcher's
 * variables), then an allreduce, a ring of point-to-point messages and an
 * RPC to the next rank. Prints "launch_worker: rank R of N ok" and exits 0
 * when every result is right. Only the public API. */
#include <nexar/nexar.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what, int rc) {
  fprintf(stderr, "launch_worker: %s: %s (%s)\n", what, nexar_strerror(rc), nexar_last_error());
  return 1;
}

static int echo(void *ctx, uint32_t caller, const void *args, size_t len, void **reply,
                size_t *rlen) {
  (void)ctx;
  *reply = malloc(len + sizeof caller);
  if (!*reply) return 1;
  memcpy(*reply, &caller, sizeof caller);
  memcpy((char *)*reply + sizeof caller, args, len);
  *rlen = len + sizeof caller;
  return 0;
}

static long env_num(const char *var) {
  const char *name = getenv(var);
  const char *v = name ? getenv(name) : NULL;
  return v ? strtol(v, NULL, 10) : -1;
}

int main(void) {
  nexar_client *c;
  int rc = nexar_init_from_env(&c);
  if (rc) return fail("init_from_env", rc);
  uint32_t r = nexar_rank(c), n = nexar_world_size(c);
  long want_r = env_num("LAUNCH_RANK_VAR"), want_n = env_num("LAUNCH_WORLD_VAR");
  if ((want_r >= 0 && (uint32_t)want_r != r) || (want_n >= 0 && (uint32_t)want_n != n)) {
    fprintf(stderr, "launch_worker: got rank %u of %u, the launcher says %ld of %ld\n", r, n,
            want_r, want_n);
    return 1;
  }
  if ((rc = nexar_rpc_register(c, 7, echo, NULL))) return fail("rpc_register", rc);
  if ((rc = nexar_barrier(c))) return fail("barrier", rc);
  /* allreduce: sum of (rank + 1) * (i + 1) over ranks, exact in f64 */
  enum { N = 4096 };
  double *v = malloc(N * sizeof *v);
  if (!v) return 1;
  for (int i = 0; i < N; i++)
    v[i] = (double)(r + 1) * (i + 1);
  if ((rc = nexar_all_reduce(c, v, N, NEXAR_F64, NEXAR_SUM))) return fail("all_reduce", rc);
  double ranks = (double)n * (n + 1) / 2;
  for (int i = 0; i < N; i++)
    if (v[i] != ranks * (i + 1)) {
      fprintf(stderr, "launch_worker: rank %u: allreduce element %d is %g, want %g\n", r, i, v[i],
              ranks * (i + 1));
      return 1;
    }
  free(v);
  /* point-to-point ring */
  uint32_t next = (r + 1) % n, prev = (r + n - 1) % n;
  char out[64], in[64];
  memset(in, 0, sizeof in);
  snprintf(out, sizeof out, "ring from %u", r);
  nexar_request *rq;
  if ((rc = nexar_recv_nb(c, in, sizeof in, prev, 3, &rq))) return fail("recv_nb", rc);
  if ((rc = nexar_send(c, out, sizeof out, next, 3))) return fail("send", rc);
  if ((rc = nexar_wait(rq))) return fail("wait", rc);
  char expect[64];
  snprintf(expect, sizeof expect, "ring from %u", prev);
  if (strcmp(in, expect)) {
    fprintf(stderr, "launch_worker: rank %u got '%.64s', want '%s'\n", r, in, expect);
    return 1;
  }
  /* RPC to the next rank: the reply names this rank as the caller */
  void *rep = NULL;
  size_t rlen = 0;
  if ((rc = nexar_rpc(c, next, 7, out, strlen(out) + 1, &rep, &rlen))) return fail("rpc", rc);
  uint32_t caller;
  if (rlen != sizeof caller + strlen(out) + 1 ||
      (memcpy(&caller, rep, sizeof caller), caller != r) ||
      strcmp((char *)rep + sizeof caller, out)) {
    fprintf(stderr, "launch_worker: rank %u: wrong RPC reply\n", r);
    return 1;
  }
  nexar_free(rep);
  if ((rc = nexar_barrier(c))) return fail("final barrier", rc);
  printf("launch_worker: rank %u of %u ok\n", r, n);
  fflush(stdout);
  nexar_client_del(c);
  return 0;
}
