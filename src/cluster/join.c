/* Workers: nexar_join through a seed, and the join behind nexar_init_from_env
 * (launch.c). The private key is generated here and never leaves the
 * process; the seed only sees a CSR. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/bootmsg.h"
#include "cluster/chan.h"
#include "cluster/launch.h"
#include "cluster/mesh.h"
#include "cluster/seedlink.h"
#include "cluster/view.h"
#include "core/addr.h"
#include "core/config.h"
#include "core/cpubind.h"
#include "runtime/comm.h"

/* The host peers use to reach this endpoint: the bind host unless it is a
 * wildcard, else the local address of the route to the seed. */
static int advertised_host(const nexar_config *cfg, nx_chan *ch, char *host, size_t cap) {
  uint16_t port;
  host[0] = 0;
  if (cfg->bind_addr) nx_addr_split(cfg->bind_addr, NULL, host, cap, &port);
  if (nx_addr_is_wildcard(host)) return nx_chan_local_ip(ch, host, cap);
  return 0;
}

/* Connects to the seed, retrying while it is not up yet (launchers start
 * everything at once), until the deadline; or, for a worker that names no
 * rank and no world (a joiner of a running world, whose seed is up or gone),
 * while it refuses for at most NX_JOIN_IO_GRACE_NS: then IO, at once. */
#define NX_JOIN_IO_GRACE_NS 2000000000ull
static int connect_seed(nx_chan **ch, const char *seed, const char *token, uint64_t deadline,
                        int hinted) {
  uint64_t io_until = nx_now_ns() + NX_JOIN_IO_GRACE_NS;
  for (;;) {
    uint64_t now = nx_now_ns();
    if (!hinted && now >= io_until) {
      char why[256]; /* the error text is rewritten by nx_fail: copy it first */
      snprintf(why, sizeof why, "%s", nexar_last_error());
      return nx_fail(NEXAR_ERR_IO, "join: no seed at %s (%s)", seed, why);
    }
    uint32_t left =
        deadline ? (uint32_t)NX_MIN((deadline - NX_MIN(deadline, now)) / 1000000ull, UINT32_MAX)
                 : 60000;
    if (deadline && left == 0)
      return nx_fail(NEXAR_ERR_TIMEOUT, "join: seed at %s not reachable in time", seed);
    int rc = nx_chan_connect(ch, seed, token, NX_MIN(left, 10000u));
    /* IO: not up yet, or shedding load; TIMEOUT of one attempt: busy. Both retry. */
    if (rc != NEXAR_ERR_IO && !(rc == NEXAR_ERR_TIMEOUT && left > 10000u)) return rc;
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
  }
}

/* A requested rank and world that cannot work, named with where they came
 * from ("NEXAR_RANK=7", "NEXAR_WORLD_SIZE=3"), before any socket is opened. */
int nx_join_check_rank_world(const char *who, uint32_t rank, uint32_t world, const char *rank_src,
                             const char *world_src) {
  if (world > NX_BOOT_WORLD_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: a world of %u ranks (%s=%u); at most %u", who,
                   world, world_src, world, NX_BOOT_WORLD_MAX);
  if (rank != NX_BOOT_ANY_RANK && world != 0 && rank >= world)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "%s: rank %u is outside a world of %u (%s=%u, %s=%u; ranks are 0..%u)", who,
                   rank, world, rank_src, rank, world_src, world, world - 1);
  if (rank != NX_BOOT_ANY_RANK && rank >= NX_BOOT_WORLD_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: rank %u (%s=%u); ranks are below %u", who, rank,
                   rank_src, rank, NX_BOOT_WORLD_MAX);
  return 0;
}

/* An address from the caller or the environment that fits the bootstrap's
 * "host:port" field. */
static int check_addr_len(const char *who, const char *what, const char *addr) {
  if (strnlen(addr, NX_ADDR_MAX) >= NX_ADDR_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: %s is longer than %d characters", who, what,
                   NX_ADDR_MAX - 1);
  return 0;
}

/* While the mesh forms, the seed channel stays open: the seed sends LOST if
 * another worker dies before reporting its mesh up, and that rank is marked
 * dead here, so the formation fails at once naming it. */
typedef struct seed_watch {
  nx_chan *ch;
  nx_ep *ep;
  pthread_t thr;
  int started;
  atomic_int stop;
} seed_watch;

static void *watch_main(void *arg) {
  seed_watch *w = arg;
  while (!atomic_load(&w->stop)) {
    void *m = NULL;
    size_t len = 0;
    int rc = nx_chan_recv(w->ch, &m, &len, 50);
    if (rc == NEXAR_ERR_TIMEOUT) continue;
    if (rc) break; /* the seed is gone: nothing more to learn from it */
    nx_lost l;
    int lost = nx_lost_decode(m, len, &l) == 0;
    free(m);
    if (!lost) continue;
    pthread_mutex_lock(&w->ep->mu);
    if (l.rank < w->ep->world) {
      char why[320];
      snprintf(why, sizeof why, "the seed reports: %s", l.reason);
      nx_peer_dead_locked(w->ep, w->ep->peers[l.rank], NEXAR_ERR_PEER_LOST, why);
    }
    pthread_mutex_unlock(&w->ep->mu);
    break;
  }
  return NULL;
}

static void watch_start(nx_ep *ep, void *arg) {
  seed_watch *w = arg;
  w->ep = ep;
  w->started = nx_thread_create(&w->thr, NULL, watch_main, w) == 0;
}

/* A torchrun-mode rank 0 stops its seed with its communicator. */
static void seed_del(void *seed) {
  nexar_seed_del(seed);
}

/* Keeps the seed channel on the endpoint for admissions (seedlink.h). */
static void keep_seed(nx_ep *ep, nx_chan **ch) {
  nx_seedlink *l = nx_seedlink_new(*ch);
  *ch = NULL;
  pthread_mutex_lock(&ep->mu);
  ep->seedlink = l;
  ep->seedlink_del = nx_seedlink_del;
  pthread_mutex_unlock(&ep->mu);
}

/* A joiner of a formed world, queued at the seed: waits until a checkpoint
 * offers it a view (VIEW, then WELCOME), connects to that view's members and
 * commits it with them (nx_view_commit). */
static int late_join(nx_ep *ep, nx_chan **ch, const nexar_config *cfg, nx_key *key,
                     const char *seed_addr, nexar_client **out) {
  uint32_t t = cfg->elastic_checkpoint_timeout_ms;
  void *msg = NULL;
  size_t len = 0;
  nx_view_msg v = {0};
  nx_welcome w = {0};
  gnutls_certificate_credentials_t creds = NULL;
  nexar_client *p = NULL;
  int rc = nx_chan_recv(*ch, &msg, &len, t ? t : UINT32_MAX);
  if (rc == NEXAR_ERR_TIMEOUT)
    rc = nx_fail(rc,
                 "join: queued at the seed at %s, no checkpoint admitted this joiner within "
                 "%u ms (elastic_checkpoint_timeout_ms)",
                 seed_addr, t);
  if (!rc && nx_view_decode(msg, len, &v) != 0)
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "join: malformed view from the seed at %s", seed_addr);
  free(msg);
  msg = NULL;
  if (!rc && (rc = nx_chan_recv(*ch, &msg, &len, 10000)) == 0 &&
      nx_welcome_decode(msg, len, &w) != 0)
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "join: malformed welcome from the seed at %s", seed_addr);
  free(msg);
  uint32_t pos = UINT32_MAX;
  for (uint32_t i = 0; !rc && i < v.n; i++) {
    if (v.ids[i] == w.rank) pos = i;
    if (v.ids[i] >= w.world_size || !w.addrs[v.ids[i]][0])
      rc = nx_fail(NEXAR_ERR_PROTOCOL, "join: the seed's view names member %u without an address",
                   v.ids[i]);
  }
  if (!rc && (pos == UINT32_MAX || pos < v.nstay))
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "join: the seed's view does not admit this joiner");
  uint32_t cert_rank;
  if (!rc) rc = nx_cert_rank(w.cert, w.cert_len, w.ca_cert, w.ca_len, w.cluster_id, &cert_rank);
  if (!rc && cert_rank != w.rank)
    rc = nx_fail(NEXAR_ERR_AUTH, "join: the seed's certificate names member %u, expected %u",
                 cert_rank, w.rank);
  if (!rc) rc = nx_tls_creds_new(&creds, key, w.cert, w.cert_len, w.ca_cert, w.ca_len);
  if (!rc) {
    rc = nx_ep_start(ep, w.rank, w.world_size, w.cluster_id, creds, w.addrs);
    if (!rc || ep->creds == creds) creds = NULL; /* the endpoint owns them now */
  }
  if (!rc)
    rc = nx_comm_new(ep, nx_view_id(v.comm_id, v.epoch, v.ids, v.n), v.ids, v.n, w.rank, &ep->cfg,
                     v.epoch, v.comm_id, &p);
  if (!rc) {
    NX_INFO("joining as member %u, rank %u of %u at epoch %llu", w.rank, pos, v.n,
            (unsigned long long)v.epoch);
    uint64_t deadline = nx_now_ns() + (uint64_t)(t ? t : 3600000u) * 1000000ull;
    rc = nx_view_commit(&p, deadline);
  }
  if (!rc) {
    uint32_t gone = v.n - p->size; /* died right after the commit (nx_view_commit) */
    uint32_t joined = v.n - v.nstay;
    p->einfo.old_world = v.old_world;
    p->einfo.new_world = p->size;
    p->einfo.joined = joined - NX_MIN(gone, joined);
    p->einfo.left = v.old_world - v.nstay + (gone > joined ? gone - joined : 0);
    p->einfo.i_am_new = 1;
    p->einfo.old_rank = UINT32_MAX;
    keep_seed(ep, ch);
    *out = p;
    p = NULL;
  }
  if (p) {
    char err[400];
    snprintf(err, sizeof err, "%s", nexar_last_error());
    nexar_client_del(p);
    nx_set_error_text(err);
  }
  if (creds) gnutls_certificate_free_credentials(creds);
  nx_view_free(&v);
  nx_welcome_free(&w);
  return rc;
}

/* NEXAR_CPU_BIND: this thread's share of the CPUs among the ranks with our
 * host name and advertised host (both: a machine under two names counts as
 * two, so auto, which binds only when every rank is local, errs towards
 * leaving threads alone). */
static void bind_cpus(nx_ep *ep, const nx_welcome *w) {
  char mine[NX_ADDR_HOST_MAX], host[NX_ADDR_HOST_MAX];
  uint16_t port;
  if (ep->knobs.cpu_bind == NX_BIND_NONE || w->rank >= w->world_size ||
      nx_addr_split(w->addrs[w->rank], NULL, mine, sizeof mine, &port))
    return;
  uint32_t nlocal = 0, index = 0;
  for (uint32_t r = 0; r < w->world_size; r++) {
    if (nx_addr_split(w->addrs[r], NULL, host, sizeof host, &port) || strcmp(host, mine) ||
        strcmp(w->hosts[r], w->hosts[w->rank]))
      continue;
    if (r < w->rank) index++;
    nlocal++;
  }
  nx_cpu_bind_self(ep->knobs.cpu_bind, nlocal, index, nlocal == w->world_size);
}

int nx_join_ex(nexar_client **out, const char *seed_addr, const nexar_config *ucfg,
               uint32_t want_rank, uint32_t world_hint, nexar_seed *own_seed) {
  if (!out) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "join: NULL out");
  *out = NULL;
  if (!seed_addr || !*seed_addr)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "join: no seed address");
  nexar_config cfg;
  int rc = check_addr_len("join", "the seed address", seed_addr);
  if (!rc) rc = nx_join_check_rank_world("join", want_rank, world_hint, "rank", "world_size");
  if (!rc) rc = nx_config_resolve(ucfg, &cfg);
  if (rc) return rc;
  const char *token = cfg.cluster_token;
  if (!token) token = getenv("NEXAR_CLUSTER_TOKEN");
  if (token && strnlen(token, 4097) > 4096) token = NULL; /* as the config table's limit */
  nx_ep *ep = NULL;
  nx_chan *ch = NULL;
  nx_key *key = NULL;
  uint8_t *csr = NULL, *buf = NULL;
  size_t csr_len = 0, len = 0;
  void *reply = NULL;
  nx_welcome w = {0};
  gnutls_certificate_credentials_t creds = NULL;
  if (!token || !*token) {
    rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                 "join: no cluster token (set config.cluster_token or NEXAR_CLUSTER_TOKEN)");
    goto out;
  }
  uint64_t t = cfg.connect_timeout_ms;
  uint64_t deadline = t ? nx_now_ns() + t * 1000000ull : 0;
  if ((rc = nx_key_new(&key)) || (rc = nx_csr_new(key, &csr, &csr_len))) goto out;
  if ((rc = connect_seed(&ch, seed_addr, token, deadline,
                         want_rank != NX_BOOT_ANY_RANK || world_hint != 0)))
    goto out;
  /* the socket has the family of the address it advertises (IPv6: dual stack) */
  char host[NX_ADDR_HOST_MAX];
  if ((rc = advertised_host(&cfg, ch, host, sizeof host)) ||
      (rc = nx_mesh_bind(&ep, &cfg, nx_addr_is_v6(host) ? "::" : "0.0.0.0")))
    goto out;
  nx_hello h = {0};
  h.version = NX_BOOT_VERSION;
  h.requested_rank = want_rank;
  h.world_size = world_hint;
  h.topology = (uint32_t)cfg.topology;
  h.topology_degree = cfg.topology_degree;
  if ((rc = nx_addr_join(h.listen_addr, sizeof h.listen_addr, host, nx_ep_port(ep)))) goto out;
  gethostname(h.hostname, sizeof h.hostname - 1);
  h.csr = csr;
  h.csr_len = csr_len;
  if ((rc = nx_hello_encode(&h, &buf, &len))) goto out;
  if ((rc = nx_chan_send(ch, buf, len, 10000))) goto out;
  /* the seed answers once every worker is here */
  uint32_t wait_ms = t ? (uint32_t)t + 5000 : UINT32_MAX;
  if ((rc = nx_chan_recv(ch, &reply, &len, wait_ms))) {
    if (rc == NEXAR_ERR_TIMEOUT)
      rc = nx_fail(rc, "join: the seed at %s did not form the world within %llu ms", seed_addr,
                   (unsigned long long)t);
    goto out;
  }
  int type = nx_bootmsg_type(reply, len);
  if (type == NX_BOOT_WAITING && nx_waiting_decode(reply, len) == 0) {
    rc = late_join(ep, &ch, &cfg, key, seed_addr, out);
    goto out;
  }
  if (type == NX_BOOT_REFUSE) {
    nx_refuse r;
    if (nx_refuse_decode(reply, len, &r) == 0 && r.code < 0)
      rc = nx_fail(r.code, "join: the seed at %s refused: %s", seed_addr, r.reason);
    else
      rc = nx_fail(NEXAR_ERR_PROTOCOL, "join: malformed refusal from the seed");
    goto out;
  }
  if (type != NX_BOOT_WELCOME || nx_welcome_decode(reply, len, &w) != 0) {
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "join: malformed reply from the seed at %s", seed_addr);
    goto out;
  }
  uint32_t cert_rank;
  if ((rc = nx_cert_rank(w.cert, w.cert_len, w.ca_cert, w.ca_len, w.cluster_id, &cert_rank)))
    goto out;
  if (cert_rank != w.rank || (want_rank != NX_BOOT_ANY_RANK && w.rank != want_rank)) {
    rc = nx_fail(NEXAR_ERR_AUTH, "join: the seed's certificate names rank %u, expected %u",
                 cert_rank, w.rank);
    goto out;
  }
  if ((rc = nx_tls_creds_new(&creds, key, w.cert, w.cert_len, w.ca_cert, w.ca_len))) goto out;
  NX_INFO("joined as rank %u of %u", w.rank, w.world_size);
  seed_watch sw = {.ch = ch};
  rc = nx_mesh_form_ex(ep, w.rank, w.world_size, w.cluster_id, creds, w.addrs, deadline,
                       watch_start, &sw, out);
  creds = NULL;
  if (sw.started) {
    atomic_store(&sw.stop, 1);
    pthread_join(sw.thr, NULL);
  }
  if (!rc) bind_cpus(ep, &w);
  if (!rc) { /* tell the seed our mesh is up; it cannot change the outcome any more */
    uint8_t *fb;
    size_t fl;
    if (nx_formed_encode(&fb, &fl) == 0) {
      if (nx_chan_send(ch, fb, fl, 2000) == 0) keep_seed(ep, &ch); /* for admissions */
      free(fb);
    }
  }
  if (!rc && own_seed) {
    (*out)->on_del = seed_del;
    (*out)->on_del_arg = own_seed;
  }
out:
  if (creds) gnutls_certificate_free_credentials(creds);
  nx_ep_unref(ep);
  nx_chan_del(ch);
  nx_key_del(key);
  nx_welcome_free(&w);
  free(csr);
  free(buf);
  free(reply);
  nx_config_release(&cfg);
  if (rc && *out) {
    nexar_client_del(*out);
    *out = NULL;
  }
  return rc;
}

int nexar_join(nexar_client **out, const char *seed_addr, const nexar_config *cfg) {
  return nx_join_ex(out, seed_addr, cfg, NX_BOOT_ANY_RANK, 0, NULL);
}
