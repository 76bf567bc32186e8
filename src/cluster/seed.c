/* The seed: discovery only. It authenticates joiners through the token-PSK
 * channel, signs their certificate requests with the cluster CA, assigns
 * ranks and hands every worker the sorted address table. Each joiner is
 * served on its own thread with deadlines on every step, so a slow,
 * malicious or wrong-token joiner never stalls the formation of the others. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/bootmsg.h"
#include "cluster/chan.h"
#include "core/config.h"
#include "transport/pki.h"

#define NX_SEED_STEP_MS 10000u /* handshake and Hello deadline per joiner */
#define NX_SEED_MAX_CONNS 1024

typedef struct joiner {
  struct joiner *next;
  nexar_seed *s;
  pthread_t thr;
  int fd;
  int finished;
  /* registration */
  int registered;
  uint32_t arrival;
  nx_hello hello;
  uint32_t rank;
  uint8_t *cert;
  size_t cert_len;
} joiner;

struct nexar_seed {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  nexar_config cfg;
  uint32_t world;
  int listen_fd;
  char addr[NX_ADDR_MAX];
  char token[130];
  uint8_t cluster_id[16];
  nx_ca *ca;
  uint8_t *ca_der;
  size_t ca_len;
  pthread_t accept_thr;
  int stop;
  joiner *joiners;
  int nconns;
  uint32_t nregistered, arrivals;
  int formed;    /* ranks assigned, certificates issued */
  uint32_t sent; /* welcomes delivered */
  char (*addrs)[NX_ADDR_MAX];
  char (*hosts)[NX_HOST_MAX];
};

static void refuse(nx_chan *ch, int code, const char *reason) {
  nx_refuse r = {.code = code};
  snprintf(r.reason, sizeof r.reason, "%s", reason);
  uint8_t *buf;
  size_t len;
  if (nx_refuse_encode(&r, &buf, &len) == 0) {
    nx_chan_send(ch, buf, len, 2000);
    free(buf);
  }
}

/* All expected workers are here: assign ranks (requested ones first, then by
 * arrival) and issue their certificates. Under s->mu. */
static int form_locked(nexar_seed *s) {
  joiner **by_rank = nx_calloc(s->world, sizeof *by_rank);
  s->addrs = nx_calloc(s->world, sizeof *s->addrs);
  s->hosts = nx_calloc(s->world, sizeof *s->hosts);
  if (!by_rank || !s->addrs || !s->hosts) {
    free(by_rank);
    return NEXAR_ERR_NOMEM;
  }
  for (joiner *j = s->joiners; j; j = j->next)
    if (j->registered && j->hello.requested_rank != NX_BOOT_ANY_RANK)
      by_rank[j->hello.requested_rank] = j, j->rank = j->hello.requested_rank;
  for (uint32_t a = 0; a < s->arrivals; a++) {
    for (joiner *j = s->joiners; j; j = j->next) {
      if (!j->registered || j->arrival != a || j->hello.requested_rank != NX_BOOT_ANY_RANK)
        continue;
      uint32_t r = 0;
      while (by_rank[r]) r++;
      by_rank[r] = j, j->rank = r;
    }
  }
  int rc = 0;
  for (uint32_t r = 0; r < s->world && !rc; r++) {
    joiner *j = by_rank[r];
    snprintf(s->addrs[r], NX_ADDR_MAX, "%s", j->hello.listen_addr);
    snprintf(s->hosts[r], NX_HOST_MAX, "%s", j->hello.hostname);
    rc = nx_ca_sign(s->ca, j->hello.csr, j->hello.csr_len, r, &j->cert, &j->cert_len);
  }
  free(by_rank);
  if (!rc) s->formed = 1;
  return rc;
}

static void unregister_locked(nexar_seed *s, joiner *j) {
  if (!j->registered || s->formed) return;
  j->registered = 0;
  s->nregistered--;
}

/* Checks a Hello against the seed's world; 0 or a refusal code + reason. */
static int check_hello_locked(nexar_seed *s, const nx_hello *h, char *why, size_t cap) {
  if (s->formed) {
    snprintf(why, cap, "the world of %u has already formed", s->world);
    return NEXAR_ERR_UNSUPPORTED;
  }
  if (h->world_size && h->world_size != s->world) {
    snprintf(why, cap, "joiner expects world size %u, the seed forms %u", h->world_size, s->world);
    return NEXAR_ERR_MISMATCH;
  }
  if (h->topology != (uint32_t)s->cfg.topology || h->topology_degree != s->cfg.topology_degree) {
    snprintf(why, cap, "topology %u/%u differs from the seed's %u/%u", h->topology,
             h->topology_degree, (unsigned)s->cfg.topology, s->cfg.topology_degree);
    return NEXAR_ERR_MISMATCH;
  }
  if (h->requested_rank != NX_BOOT_ANY_RANK) {
    if (h->requested_rank >= s->world) {
      snprintf(why, cap, "rank %u requested, world size is %u", h->requested_rank, s->world);
      return NEXAR_ERR_INVALID_RANK;
    }
    for (joiner *o = s->joiners; o; o = o->next)
      if (o->registered && o->hello.requested_rank == h->requested_rank) {
        snprintf(why, cap, "rank %u is already taken", h->requested_rank);
        return NEXAR_ERR_INVALID_RANK;
      }
  }
  if (s->nregistered >= s->world) {
    snprintf(why, cap, "the world of %u is full", s->world);
    return NEXAR_ERR_UNSUPPORTED;
  }
  /* with requested ranks, make sure the free ranks can still hold the rest */
  return 0;
}

static void serve(joiner *j) {
  nexar_seed *s = j->s;
  nx_chan *ch = NULL;
  char peer[NX_ADDR_MAX] = "?";
  int rc = nx_chan_server(&ch, j->fd, s->token, NX_SEED_STEP_MS);
  j->fd = -1;
  if (rc) {
    NX_WARN("seed: refused a joiner: %s", nexar_last_error());
    return;
  }
  nx_chan_peer_addr(ch, peer, sizeof peer);
  void *msg = NULL;
  size_t len = 0;
  rc = nx_chan_recv(ch, &msg, &len, NX_SEED_STEP_MS);
  if (rc || nx_bootmsg_type(msg, len) != NX_BOOT_HELLO ||
      nx_hello_decode(msg, len, &j->hello) != 0) {
    NX_WARN("seed: joiner %s sent no valid Hello (%s)", peer, rc ? nexar_last_error() : "bad");
    if (!rc) refuse(ch, NEXAR_ERR_PROTOCOL, "expected a Hello message");
    free(msg);
    nx_chan_del(ch);
    return;
  }
  free(msg);
  char why[200];
  pthread_mutex_lock(&s->mu);
  int code = check_hello_locked(s, &j->hello, why, sizeof why);
  if (!code) {
    j->registered = 1;
    j->arrival = s->arrivals++;
    s->nregistered++;
    NX_INFO("seed: %s joined (%u of %u)", j->hello.listen_addr, s->nregistered, s->world);
    if (s->nregistered == s->world) {
      int frc = form_locked(s);
      if (frc) NX_ERROR("seed: cannot form the world: %s", nexar_last_error());
      pthread_cond_broadcast(&s->cv);
    }
  }
  uint64_t t = s->cfg.connect_timeout_ms;
  uint64_t deadline = t ? nx_now_ns() + t * 1000000ull : 0;
  while (!code && !s->formed && !s->stop) {
    pthread_mutex_unlock(&s->mu);
    int closed = nx_chan_closed(ch);
    pthread_mutex_lock(&s->mu);
    if (closed) { /* it went away before the world formed: free its place */
      unregister_locked(s, j);
      NX_INFO("seed: joiner %s left before formation", peer);
      pthread_mutex_unlock(&s->mu);
      nx_chan_del(ch);
      return;
    }
    if (deadline && nx_now_ns() > deadline) {
      unregister_locked(s, j);
      code = NEXAR_ERR_TIMEOUT;
      snprintf(why, sizeof why, "only %u of %u workers joined within %llu ms", s->nregistered + 1,
               s->world, (unsigned long long)t);
      break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  if (!code && s->stop && !s->formed) {
    code = NEXAR_ERR_ABORTED;
    snprintf(why, sizeof why, "the seed is shutting down");
  }
  nx_welcome w = {0};
  if (!code) {
    w.rank = j->rank;
    w.world_size = s->world;
    memcpy(w.cluster_id, s->cluster_id, 16);
    w.ca_cert = s->ca_der;
    w.ca_len = s->ca_len;
    w.cert = j->cert;
    w.cert_len = j->cert_len;
    w.addrs = s->addrs;
    w.hosts = s->hosts;
  }
  pthread_mutex_unlock(&s->mu);
  if (code) {
    NX_WARN("seed: refusing %s: %s", peer, why);
    refuse(ch, code, why);
  } else {
    uint8_t *buf;
    rc = nx_welcome_encode(&w, &buf, &len);
    if (!rc) {
      rc = nx_chan_send(ch, buf, len, NX_SEED_STEP_MS);
      free(buf);
    }
    if (rc) NX_WARN("seed: welcome to rank %u (%s) failed: %s", j->rank, peer, nexar_last_error());
    pthread_mutex_lock(&s->mu);
    s->sent++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
  }
  nx_chan_del(ch);
}

static void *joiner_main(void *arg) {
  joiner *j = arg;
  serve(j);
  pthread_mutex_lock(&j->s->mu);
  j->finished = 1;
  j->s->nconns--;
  pthread_mutex_unlock(&j->s->mu);
  return NULL;
}

/* Joins threads of joiners that finished and never registered. Under s->mu. */
static void reap_locked(nexar_seed *s, int all) {
  for (joiner **pp = &s->joiners; *pp;) {
    joiner *j = *pp;
    if ((j->finished && !j->registered) || all) {
      *pp = j->next;
      pthread_mutex_unlock(&s->mu);
      pthread_join(j->thr, NULL);
      pthread_mutex_lock(&s->mu);
      nx_hello_free(&j->hello);
      free(j->cert);
      free(j);
    } else {
      pp = &j->next;
    }
  }
}

static void *accept_main(void *arg) {
  nexar_seed *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    pthread_mutex_unlock(&s->mu);
    struct pollfd pfd = {.fd = s->listen_fd, .events = POLLIN};
    int n = poll(&pfd, 1, 100);
    int fd = -1;
    if (n > 0) fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    pthread_mutex_lock(&s->mu);
    reap_locked(s, 0);
    if (fd < 0) continue;
    if (s->nconns >= NX_SEED_MAX_CONNS) {
      close(fd);
      continue;
    }
    joiner *j = nx_calloc(1, sizeof *j);
    if (!j) {
      close(fd);
      continue;
    }
    j->s = s;
    j->fd = fd;
    if (pthread_create(&j->thr, NULL, joiner_main, j) != 0) {
      close(fd);
      free(j);
      continue;
    }
    s->nconns++;
    j->next = s->joiners;
    s->joiners = j;
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int nexar_seed_new(nexar_seed **out, const char *listen_addr, uint32_t world_size,
                   const nexar_config *cfg) {
  if (!out) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "seed_new: NULL out");
  *out = NULL;
  if (!listen_addr) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "seed_new: NULL listen address");
  if (world_size == 0 || world_size > NX_BOOT_WORLD_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "seed_new: world_size %u", world_size);
  nx_log_init();
  nexar_seed *s = nx_calloc(1, sizeof *s);
  if (!s) return nx_fail(NEXAR_ERR_NOMEM, "seed");
  s->listen_fd = -1;
  int rc = nx_config_resolve(cfg, &s->cfg);
  if (rc) {
    free(s);
    return rc;
  }
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->world = world_size;
  const char *tok = s->cfg.cluster_token;
  if (!tok || !*tok) tok = getenv("NEXAR_CLUSTER_TOKEN");
  if (tok && *tok) {
    if (strlen(tok) >= sizeof s->token) {
      rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "cluster token longer than %zu characters",
                   sizeof s->token - 1);
      goto fail;
    }
    snprintf(s->token, sizeof s->token, "%s", tok);
  } else { /* a seed never runs without a token: draw one from the OS CSPRNG */
    uint8_t raw[32];
    if ((rc = nx_random(raw, sizeof raw))) goto fail;
    for (int i = 0; i < 32; i++) snprintf(s->token + 2 * i, 3, "%02x", raw[i]);
  }
  if ((rc = nx_random(s->cluster_id, 16)) || (rc = nx_ca_new(&s->ca, s->cluster_id)) ||
      (rc = nx_ca_cert(s->ca, &s->ca_der, &s->ca_len)))
    goto fail;
  if ((rc = nx_chan_listen(&s->listen_fd, listen_addr, s->addr, sizeof s->addr))) goto fail;
  if (pthread_create(&s->accept_thr, NULL, accept_main, s) != 0) {
    rc = nx_fail(NEXAR_ERR_IO, "seed: cannot start its thread");
    goto fail;
  }
  NX_INFO("seed listening on %s for %u workers", s->addr, world_size);
  *out = s;
  return 0;
fail:
  if (s->listen_fd >= 0) close(s->listen_fd);
  nx_ca_del(s->ca);
  free(s->ca_der);
  nx_config_release(&s->cfg);
  free(s);
  return rc;
}

const char *nexar_seed_addr(const nexar_seed *s) {
  return s ? s->addr : "";
}

const char *nexar_seed_token(const nexar_seed *s) {
  return s ? s->token : "";
}

int nexar_seed_wait(nexar_seed *s, uint32_t timeout_ms) {
  if (!s) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "seed_wait: NULL seed");
  uint64_t deadline = timeout_ms ? nx_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
  int rc = 0;
  pthread_mutex_lock(&s->mu);
  while (!(s->formed && s->sent >= s->world)) {
    if (deadline && nx_now_ns() >= deadline) {
      rc = nx_fail(NEXAR_ERR_TIMEOUT, "seed_wait: %u of %u workers joined within %u ms",
                   s->nregistered, s->world, timeout_ms);
      break;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20000000;
    if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
  }
  pthread_mutex_unlock(&s->mu);
  return rc;
}

void nexar_seed_del(nexar_seed *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->accept_thr, NULL);
  pthread_mutex_lock(&s->mu);
  reap_locked(s, 1);
  pthread_mutex_unlock(&s->mu);
  close(s->listen_fd);
  nx_ca_del(s->ca);
  free(s->ca_der);
  free(s->addrs);
  free(s->hosts);
  nx_config_release(&s->cfg);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
