/* Device buffers (issue 13): every collective and p2p form on poisoned
 * device memory (poison_dev.h: any direct access by the library faults)
 * equals the same call on host buffers bit for bit. Ranks as threads over
 * two nexar_bootstrap_local worlds (one with the adapter, one without), or
 * as processes (mode "procs": two seeds, each process joins both).
 * Modes: threads | async | async_slow | procs | fail. Sizes 0, 1, 4097 elements
 * for every form and dtype (f32, bf16, i64); 3 MiB + 1 element for the
 * large forms. With NEXAR_DEV_TEST_CUDA=<ordinal> (and libnexar-cuda built)
 * the device is that CUDA device and the adapter libnexar-cuda's. */
#include <math.h>
#include <nexar/nexar.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "poison_dev.h"

#define N_THREADS 4
static int failures;
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    pthread_mutex_lock(&out_mu);                                                                   \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fputc('\n', stderr);                                                                           \
    failures++;                                                                                    \
    pthread_mutex_unlock(&out_mu);                                                                 \
  } while (0)
#define RC(call, what)                                                                             \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_) {                                                                                     \
      FAIL("%s: %s -> %d: %s", what, #call, rc_, nexar_last_error());                              \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

typedef struct env {
  nexar_client *h, *d;
  uint32_t r, n;
  int nb;
} env;

static void fill(void *p, size_t bytes, uint32_t rank, int salt, nexar_dtype dt) {
  size_t es = nexar_dtype_size(dt), c = bytes / es;
  for (size_t i = 0; i < c; i++) {
    uint32_t v = (uint32_t)((rank * 131u + i * 7u + (size_t)salt * 17u) % 1000u);
    if (dt == NEXAR_F32) {
      float f = (float)v * 0.37f + 0.1f;
      memcpy((char *)p + i * 4, &f, 4);
    } else if (dt == NEXAR_BF16) {
      float f = (float)v * 0.37f + 0.1f;
      uint32_t b;
      memcpy(&b, &f, 4);
      uint16_t h = (uint16_t)(b >> 16);
      memcpy((char *)p + i * 2, &h, 2);
    } else {
      int64_t x = (int64_t)v * 1000003 - 500000;
      memcpy((char *)p + i * 8, &x, 8);
    }
  }
  memset((char *)p + c * es, 0x5a, bytes - c * es);
}

/* One form: fn runs on (client, in, out); in filled per rank, out
 * pre-filled with a pattern; both outputs (and inputs) must match. */
typedef int (*form_fn)(env *e, nexar_client *c, void *in, void *out, size_t cnt, nexar_dtype dt);

static void run_form(env *e, const char *name, form_fn fn, size_t in_el, size_t out_el, size_t cnt,
                     nexar_dtype dt) {
  size_t es = nexar_dtype_size(dt), ib = in_el * es, ob = out_el * es;
  char *hi = malloc(ib + 1), *ho = malloc(ob + 1), *chk = malloc((ib > ob ? ib : ob) + 1);
  char *di = pd_alloc(ib), *dout = pd_alloc(ob);
  fill(hi, ib, e->r, 1, dt);
  memset(ho, 0xa5, ob);
  pd_put(di, hi, ib);
  pd_put(dout, ho, ob);
  int rh = fn(e, e->h, in_el ? hi : NULL, out_el ? ho : NULL, cnt, dt);
  int rd = fn(e, e->d, in_el ? di : NULL, out_el ? dout : NULL, cnt, dt);
  if (rh != rd)
    FAIL("%s count %zu %s rank %u: host rc %d, device rc %d (%s)", name, cnt, nexar_dtype_name(dt),
         e->r, rh, rd, nexar_last_error());
  pd_get(chk, dout, ob);
  if (memcmp(chk, ho, ob)) {
    size_t k = 0;
    while (chk[k] == ho[k])
      k++;
    FAIL("%s count %zu %s rank %u: device output differs at byte %zu of %zu", name, cnt,
         nexar_dtype_name(dt), e->r, k, ob);
  }
  pd_get(chk, di, ib);
  if (memcmp(chk, hi, ib))
    FAIL("%s count %zu %s rank %u: device input differs", name, cnt, nexar_dtype_name(dt), e->r);
  pd_free(di, ib);
  pd_free(dout, ob);
  free(hi), free(ho), free(chk);
}

static int wait_nb(int rc, nexar_request *q) {
  return rc ? rc : nexar_wait(q);
}
#define NB(e, blocking, ...)                                                                       \
  do {                                                                                             \
    if ((e)->nb) {                                                                                 \
      nexar_request *q_ = NULL;                                                                    \
      int rc_ = blocking##_nb(__VA_ARGS__, &q_);                                                   \
      return wait_nb(rc_, q_);                                                                     \
    }                                                                                              \
    return blocking(__VA_ARGS__);                                                                  \
  } while (0)

static nexar_op red(nexar_dtype dt) {
  return dt == NEXAR_I64 ? NEXAR_MAX : NEXAR_SUM;
}

static int f_allreduce(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  NB(e, nexar_all_reduce, c, out, n, dt, red(dt));
}
static int f_allreduce_avg(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  NB(e, nexar_all_reduce, c, out, n, dt, dt == NEXAR_I64 ? NEXAR_SUM : NEXAR_AVG);
}
static int f_rs_ag(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  NB(e, nexar_all_reduce_rs_ag, c, out, n, dt, red(dt));
}
static int f_bcast(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  NB(e, nexar_broadcast, c, out, n, dt, 1 % e->n);
}
static int f_allgather(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  NB(e, nexar_all_gather, c, in, out, n, dt);
}
static int f_rs(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  NB(e, nexar_reduce_scatter, c, in, out, n, dt, red(dt));
}
static int f_reduce(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  NB(e, nexar_reduce, c, out, n, dt, red(dt), e->n - 1);
}
static int f_a2a(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  NB(e, nexar_all_to_all, c, in, out, n, dt);
}
static int f_gather(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  NB(e, nexar_gather, c, in, out, n, dt, 0);
}
static int f_scatter(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  NB(e, nexar_scatter, c, in, out, n, dt, e->n - 1);
}
static int f_scan(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  NB(e, nexar_scan, c, out, n, dt, red(dt));
}
static int f_exscan(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  NB(e, nexar_exclusive_scan, c, out, n, dt, red(dt));
}
static int f_bucketed(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  size_t es = nexar_dtype_size(dt), a = n / 2, b = n - a;
  nexar_bucket bk[2] = {{out, a}, {(char *)out + a * es, b}};
  NB(e, nexar_all_reduce_bucketed, c, bk, 2, dt, red(dt));
}
/* v forms: rank i contributes n - i % 2 (at least 0) elements */
static size_t vc(size_t n, uint32_t i) {
  return n > (i % 2) ? n - i % 2 : 0;
}
static int f_agv(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  size_t rc[16], rd[16], o = 0;
  for (uint32_t i = 0; i < e->n; i++)
    rc[i] = vc(n, i), rd[i] = o, o += rc[i];
  NB(e, nexar_all_gather_v, c, in, vc(n, e->r), out, rc, rd, dt);
}
static int f_rsv(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  size_t rc[16];
  for (uint32_t i = 0; i < e->n; i++)
    rc[i] = vc(n, i);
  NB(e, nexar_reduce_scatter_v, c, in, out, rc, dt, red(dt));
}
static int f_a2av(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  size_t sc[16], sd[16], rc[16], rd[16], o = 0, p = 0;
  for (uint32_t i = 0; i < e->n; i++) {
    sc[i] = vc(n, i + e->r), sd[i] = o, o += n;
    rc[i] = vc(n, i + e->r), rd[i] = p, p += n;
  }
  NB(e, nexar_all_to_all_v, c, in, sc, sd, out, rc, rd, dt);
}
static int f_gv(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  size_t rc[16], rd[16], o = 0;
  for (uint32_t i = 0; i < e->n; i++)
    rc[i] = vc(n, i), rd[i] = o, o += n;
  NB(e, nexar_gather_v, c, in, vc(n, e->r), out, rc, rd, dt, 1 % e->n);
}
static int f_sv(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  size_t sc[16], sd[16], o = 0;
  for (uint32_t i = 0; i < e->n; i++)
    sc[i] = vc(n, i), sd[i] = o, o += n;
  NB(e, nexar_scatter_v, c, in, sc, sd, out, vc(n, e->r), dt, 0);
}
static int f_p2p(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  size_t b = n * nexar_dtype_size(dt);
  uint32_t to = (e->r + 1) % e->n, from = (e->r + e->n - 1) % e->n;
  if (!e->nb) return nexar_sendrecv(c, in, b, to, 7, out, b, from, 7);
  nexar_request *s = NULL, *r = NULL;
  int rc = nexar_recv_nb(c, out, b, from, 8, &r);
  if (!rc) rc = nexar_send_nb(c, in, b, to, 8, &s);
  int done = 0;
  while (!rc && !done)
    rc = nexar_test(r, &done); /* test, then wait: both copy in once */
  int a = nexar_wait(r), z = nexar_wait(s);
  return rc ? rc : a ? a : z;
}
static int f_p2p_blocking(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  size_t b = n * nexar_dtype_size(dt);
  uint32_t to = (e->r + 1) % e->n, from = (e->r + e->n - 1) % e->n;
  if (e->r % 2 == 0) {
    int rc = nexar_send(c, in, b, to, 9);
    return rc ? rc : nexar_recv(c, out, b, from, 9);
  }
  int rc = nexar_recv(c, out, b, from, 9);
  return rc ? rc : nexar_send(c, in, b, to, 9);
}
static int f_compressed(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)e, (void)in;
  if (dt == NEXAR_I64) return 0;
  nexar_compressor *k = NULL;
  int rc = nexar_compressor_topk_new(&k, 0.25);
  void *res = calloc(n + 1, nexar_dtype_size(dt));
  if (!rc) rc = nexar_all_reduce_compressed(c, out, n, dt, NEXAR_SUM, k, res);
  free(res);
  nexar_compressor_del(k);
  return rc;
}
static int f_split(env *e, nexar_client *c, void *in, void *out, size_t n, nexar_dtype dt) {
  (void)in;
  nexar_client *ch = NULL;
  int rc = nexar_split(c, e->r % 2, e->r, &ch);
  if (!rc) rc = nexar_all_reduce(ch, out, n, dt, red(dt));
  nexar_client_del(ch);
  return rc;
}

typedef struct form {
  const char *name;
  form_fn fn;
  int in_mul, out_mul; /* elements: count * mul (0: none; -1: count * world) */
  int large;           /* also at 3 MiB + 1 element */
} form;

static const form forms[] = {
    {"all_reduce", f_allreduce, 0, 1, 1},
    {"all_reduce_avg", f_allreduce_avg, 0, 1, 0},
    {"all_reduce_rs_ag", f_rs_ag, 0, 1, 0},
    {"broadcast", f_bcast, 0, 1, 1},
    {"all_gather", f_allgather, 1, -1, 1},
    {"reduce_scatter", f_rs, -1, 1, 1},
    {"reduce", f_reduce, 0, 1, 0},
    {"all_to_all", f_a2a, -1, -1, 0},
    {"gather", f_gather, 1, -1, 0},
    {"scatter", f_scatter, -1, 1, 0},
    {"scan", f_scan, 0, 1, 0},
    {"exclusive_scan", f_exscan, 0, 1, 0},
    {"bucketed", f_bucketed, 0, 1, 0},
    {"all_gather_v", f_agv, 1, -1, 0},
    {"reduce_scatter_v", f_rsv, -1, 1, 0},
    {"all_to_all_v", f_a2av, -1, -1, 0},
    {"gather_v", f_gv, 1, -1, 0},
    {"scatter_v", f_sv, -1, 1, 0},
    {"sendrecv", f_p2p, 1, 1, 1},
    {"send_recv", f_p2p_blocking, 1, 1, 0},
    {"compressed", f_compressed, 0, 1, 0},
    {"split", f_split, 0, 1, 0},
};

static void rank_main(env *e, int quick) {
  static const nexar_dtype dts[] = {NEXAR_F32, NEXAR_BF16, NEXAR_I64};
  static const size_t counts[] = {0, 1, 4097};
  for (int nb = 0; nb < 2; nb++) {
    e->nb = nb;
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++)
      for (size_t d = 0; d < 3; d++)
        for (size_t k = 0; k < 4; k++) {
          nexar_dtype dt = dts[d];
          size_t cnt = k < 3 ? counts[k] : (3u << 20) / nexar_dtype_size(dt) + 1;
          if (k == 3 && (!forms[f].large || quick || (d != 0 && nb))) continue;
          const form *fm = &forms[f];
          size_t in = fm->in_mul < 0 ? cnt * e->n : cnt * (size_t)fm->in_mul;
          size_t out = fm->out_mul < 0 ? cnt * e->n : cnt * (size_t)fm->out_mul;
          char name[64];
          snprintf(name, sizeof name, "%s%s", fm->name, nb ? "_nb" : "");
          run_form(e, name, fm->fn, in, out, cnt, dt);
        }
  }
}

/* ------------------------------------------------------------ threads */

typedef struct targ {
  env e;
  int quick;
} targ;

static void *thr(void *p) {
  targ *a = p;
  rank_main(&a->e, a->quick);
  return NULL;
}

static int run_threads(int async, unsigned sleep_us) {
  nexar_device_adapter ad;
  pd_adapter(&ad, async, sleep_us);
  nexar_config hc, dc;
  nexar_config_default(&hc);
  nexar_config_default(&dc);
  dc.adapter = &ad;
  nexar_client *h[N_THREADS], *d[N_THREADS];
  RC(nexar_bootstrap_local(h, N_THREADS, &hc), "bootstrap host");
  RC(nexar_bootstrap_local(d, N_THREADS, &dc), "bootstrap device");
  pthread_t t[N_THREADS];
  targ a[N_THREADS];
  for (uint32_t i = 0; i < N_THREADS; i++) {
    a[i] = (targ){{h[i], d[i], i, N_THREADS, 0}, async};
    pthread_create(&t[i], NULL, thr, &a[i]);
  }
  for (uint32_t i = 0; i < N_THREADS; i++)
    pthread_join(t[i], NULL);
  for (uint32_t i = 0; i < N_THREADS; i++)
    nexar_client_del(h[i]), nexar_client_del(d[i]);
  return failures;
}

/* ---------------------------------------------------------- processes */

/* The two seeds' addresses and tokens, from the parent to its children. */
typedef struct seeds_msg {
  char haddr[128], htok[256], daddr[128], dtok[256];
} seeds_msg;

/* The children are forked before the parent starts any thread (the seeds
 * run threads): a child forked from a process with threads inherits any
 * lock one of them held at that instant, and under AddressSanitizer that
 * is its allocator's (both children hung in it in CI). The parent sends
 * the seeds' addresses and tokens through a pipe once they are up. */
static int run_procs(void) {
  pid_t pid[2];
  int pfd[2][2];
  for (int i = 0; i < 2; i++) {
    if (pipe(pfd[i])) {
      perror("pipe");
      return 1;
    }
    pid[i] = fork();
    if (pid[i] == 0) {
      seeds_msg m;
      close(pfd[i][1]);
      size_t got = 0;
      while (got < sizeof m) {
        ssize_t k = read(pfd[i][0], (char *)&m + got, sizeof m - got);
        if (k <= 0) _exit(4); /* the parent failed to start the seeds */
        got += (size_t)k;
      }
      close(pfd[i][0]);
      nexar_device_adapter ad;
      pd_adapter(&ad, 0, 0);
      nexar_config hc, dc;
      nexar_config_default(&hc);
      nexar_config_default(&dc);
      hc.cluster_token = m.htok;
      dc.cluster_token = m.dtok;
      dc.adapter = &ad;
      env e = {0};
      RC(nexar_join(&e.h, m.haddr, &hc), "join host");
      /* the seed numbers ranks by arrival: host rank 1 joins the second
       * world a little later, so both worlds number the processes alike */
      if (nexar_rank(e.h)) usleep(500000);
      RC(nexar_join(&e.d, m.daddr, &dc), "join device");
      e.r = nexar_rank(e.d);
      e.n = 2;
      if (nexar_rank(e.h) != e.r) { /* match the ranks of the two worlds */
        FAIL("rank %u in one world, %u in the other", nexar_rank(e.h), e.r);
        _exit(3);
      }
      rank_main(&e, 0);
      nexar_barrier(e.d);
      nexar_client_del(e.h);
      nexar_client_del(e.d);
      _exit(failures ? 1 : 0);
    }
    close(pfd[i][0]);
  }
  nexar_seed *sh = NULL, *sd = NULL;
  seeds_msg m = {0};
  int ok =
      !nexar_seed_new(&sh, "127.0.0.1:0", 2, NULL) && !nexar_seed_new(&sd, "127.0.0.1:0", 2, NULL);
  if (ok) {
    snprintf(m.haddr, sizeof m.haddr, "%s", nexar_seed_addr(sh));
    snprintf(m.htok, sizeof m.htok, "%s", nexar_seed_token(sh));
    snprintf(m.daddr, sizeof m.daddr, "%s", nexar_seed_addr(sd));
    snprintf(m.dtok, sizeof m.dtok, "%s", nexar_seed_token(sd));
    ok = strlen(nexar_seed_token(sh)) < sizeof m.htok &&
         strlen(nexar_seed_token(sd)) < sizeof m.dtok;
  }
  if (!ok) FAIL("seeds: %s", nexar_last_error());
  for (int i = 0; i < 2; i++) {
    if (ok && write(pfd[i][1], &m, sizeof m) != (ssize_t)sizeof m) FAIL("pipe to process %d", i);
    close(pfd[i][1]); /* (a child that got nothing exits 4) */
  }
  int bad = ok ? 0 : 1;
  for (int i = 0; i < 2; i++) {
    int st = 0;
    waitpid(pid[i], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st)) {
      fprintf(stderr, "process %d: status %d\n", i, st);
      bad++;
    }
  }
  nexar_seed_del(sh);
  nexar_seed_del(sd);
  return bad;
}

/* ------------------------------------------- failures and bad adapters */

static void *fail_thr(void *p) {
  env *e = p;
  size_t n = 3u << 18;
  float *d = pd_alloc(n * 4);
  int rc = nexar_all_reduce(e->d, d, n, NEXAR_F32, NEXAR_SUM);
  if (rc != NEXAR_ERR_IO && rc != NEXAR_ERR_ABORTED && rc != NEXAR_ERR_MISMATCH &&
      rc != NEXAR_ERR_PEER_LOST)
    FAIL("failing copy: rank %u got %d (%s)", e->r, rc, nexar_last_error());
  if (e->r == 0 && rc != NEXAR_ERR_IO) FAIL("rank 0: a failed copy should be IO, got %d", rc);
  return NULL;
}

static int run_fail(void) {
  nexar_device_adapter ad;
  pd_adapter(&ad, 0, 0);
  nexar_config dc;
  nexar_config_default(&dc);
  dc.adapter = &ad;
  nexar_client *d[2];
  RC(nexar_bootstrap_local(d, 2, &dc), "bootstrap");
  /* p2p: a failing copy-out is IO before anything is sent */
  float *b = pd_alloc(4096 * 4);
  pd_fail_after(1);
  int rc = nexar_send(d[0], b, 4096 * 4, 1, 1);
  if (rc != NEXAR_ERR_IO) FAIL("send with a failing copy: %d, want IO", rc);
  pd_fail_after(3);
  pthread_t t[2];
  env e[2] = {{NULL, d[0], 0, 2, 0}, {NULL, d[1], 1, 2, 0}};
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, fail_thr, &e[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  pd_fail_after(0);
  nexar_client_del(d[0]);
  nexar_client_del(d[1]);
  /* an adapter without callbacks is refused */
  nexar_device_adapter bad = {sizeof bad, NULL, NULL, NULL, NULL, NULL,
                              NULL,       NULL, NULL, NULL, NULL};
  dc.adapter = &bad;
  rc = nexar_bootstrap_local(d, 2, &dc);
  if (rc != NEXAR_ERR_INVALID_ARGUMENT) FAIL("adapter without callbacks: %d", rc);
  bad.struct_size = 3;
  bad.to_host = ad.to_host, bad.from_host = ad.from_host;
  rc = nexar_bootstrap_local(d, 2, &dc);
  if (rc != NEXAR_ERR_INVALID_ARGUMENT) FAIL("adapter with struct_size 3: %d", rc);
  return failures;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "threads";
  /* the reference world (host memory) must run the same algorithms as the
   * device world, bit for bit: small blocking collectives on host memory
   * would otherwise take the shared-memory segment, which device buffers
   * never do, and reduce in another order */
  setenv("NEXAR_SHM_COLL", "0", 1);
  const char *cuda = getenv("NEXAR_DEV_TEST_CUDA"); /* a device ordinal: gpu_check.sh */
  if (cuda && *cuda) {
#ifdef NX_DEV_CUDA
    pd_use(pd_cuda_backend((int)strtol(cuda, NULL, 10)));
#else
    fprintf(stderr, "dev_test: built without libnexar-cuda (NEXAR_DEV_TEST_CUDA ignored)\n");
    return 77;
#endif
  }
  pd_init((size_t)8 << 30);
  int bad;
  if (!strcmp(mode, "threads"))
    bad = run_threads(0, 0);
  else if (!strcmp(mode, "async"))
    bad = run_threads(1, 0); /* events done at once: found by the run's own poll */
  else if (!strcmp(mode, "async_slow"))
    bad = run_threads(1, 300); /* events pending 300 us: found by the re-polls */
  else if (!strcmp(mode, "procs"))
    bad = run_procs();
  else if (!strcmp(mode, "fail"))
    bad = run_fail();
  else {
    fprintf(stderr, "usage: dev_test threads|async|async_slow|procs|fail\n");
    return 2;
  }
  printf("dev_test %s: %s (%lu device copies)\n", mode, bad ? "FAILED" : "ok", pd_calls());
  return bad ? 1 : 0;
}
