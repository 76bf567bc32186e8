/* The seed: discovery only. It authenticates joiners through the token-PSK
 * channel, signs their certificate requests with the cluster CA, assigns
 * ranks and hands every worker the sorted address table.
 *
 * Load: one event-loop thread accepts and holds connections that have sent
 * nothing yet (no thread, NX_SEED_IDLE_MS to speak, at most
 * NX_SEED_PER_SOURCE per source address and NX_SEED_PENDING_MAX in all; the
 * oldest silent one makes room for a newcomer). A connection that speaks
 * goes to one of at most NX_SEED_HANDSHAKERS handshake threads, which must
 * finish within NX_SEED_PREAUTH_MS of the accept; past authentication, a
 * joiner keeps its thread (at most the world size register). A joiner shed
 * for load sees a close before any handshake byte and retries (chan.c).
 *
 * Formation: a joiner that dies before formation frees its slot (checked
 * again at the moment the last one arrives); after its Welcome each worker
 * keeps the channel open until its mesh is up (FORMED). One that closes
 * first is lost: every other worker still forming gets LOST naming its rank
 * and fails at once, and nexar_seed_wait reports it. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/bootmsg.h"
#include "cluster/chan.h"
#include "cluster/seed_int.h"
#include "core/config.h"
#include "core/cpubind.h"
#include "transport/pki.h"

#define NX_SEED_STEP_MS 10000u   /* Hello and Welcome deadline per joiner */
#define NX_SEED_IDLE_MS 3000u    /* accept -> first byte */
#define NX_SEED_PREAUTH_MS 5000u /* accept -> handshake done */
#define NX_SEED_PENDING_MAX 1024 /* silent connections held */
#define NX_SEED_PER_SOURCE 64    /* of them from one address */
#define NX_SEED_HANDSHAKERS 16   /* handshakes at once */
#define NX_SEED_NO_RANK UINT32_MAX

void nx_seed_refuse(nx_chan *ch, int code, const char *reason) {
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
      while (by_rank[r])
        r++;
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

/* 1 if the peer of fd has closed or reset its end (poll, no read). */
static int fd_gone(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
  int n;
  do {
    n = poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* The last joiner has arrived: any registered one that died meanwhile frees
 * its slot now instead of being handed a rank. Under s->mu. */
static void drop_dead_locked(nexar_seed *s, joiner *self) {
  for (joiner *o = s->joiners; o; o = o->next)
    if (o != self && o->registered && o->cfd >= 0 && fd_gone(o->cfd)) {
      NX_INFO("seed: %s left before formation", o->hello.listen_addr);
      unregister_locked(s, o);
    }
}

void nx_seed_timed_wait_locked(nexar_seed *s, long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_nsec += ms * 1000000L;
  while (ts.tv_nsec >= 1000000000)
    ts.tv_sec++, ts.tv_nsec -= 1000000000;
  pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* After the Welcome: waits for FORMED; tells the worker if another rank is
 * lost first; a close before FORMED makes this rank the lost one. */
static void watch_formation(nexar_seed *s, joiner *j, nx_chan *ch, const char *peer) {
  uint64_t t = s->cfg.connect_timeout_ms;
  uint64_t deadline = nx_now_ns() + (t ? t + 5000 : 3600000ull) * 1000000ull;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    uint32_t lost = s->lost;
    char why[200];
    snprintf(why, sizeof why, "%s", s->lost_why);
    int stop = s->stop;
    pthread_mutex_unlock(&s->mu);
    if (lost != NX_SEED_NO_RANK) {
      nx_lost m = {.rank = lost};
      snprintf(m.reason, sizeof m.reason, "%s", why);
      uint8_t *buf;
      size_t len;
      if (nx_lost_encode(&m, &buf, &len) == 0) {
        nx_chan_send(ch, buf, len, 2000);
        free(buf);
      }
      return;
    }
    if (stop || nx_now_ns() > deadline) return;
    void *msg = NULL;
    size_t len = 0;
    int rc = nx_chan_recv(ch, &msg, &len, 50);
    if (rc == NEXAR_ERR_TIMEOUT) continue;
    if (!rc && nx_formed_decode(msg, len) == 0) {
      free(msg);
      pthread_mutex_lock(&s->mu);
      j->formed_ok = 1;
      pthread_mutex_unlock(&s->mu);
      return;
    }
    free(msg);
    pthread_mutex_lock(&s->mu);
    if (s->lost == NX_SEED_NO_RANK) {
      s->lost = j->rank;
      snprintf(s->lost_why, sizeof s->lost_why,
               "rank %u (%s, from %s) was lost during formation: %s", j->rank, j->hello.listen_addr,
               peer, rc ? "its seed channel closed" : "unexpected message");
      NX_WARN("seed: %s", s->lost_why);
      pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return;
  }
}

static void serve(joiner *j) {
  nexar_seed *s = j->s;
  nx_chan *ch = NULL;
  char peer[NX_ADDR_MAX] = "?";
  uint64_t used = (nx_now_ns() - j->accepted_ns) / 1000000ull;
  uint32_t left = used >= NX_SEED_PREAUTH_MS ? 1 : NX_SEED_PREAUTH_MS - (uint32_t)used;
  int fd = j->fd;
  int rc = nx_chan_server(&ch, j->fd, s->token, left);
  j->fd = -1;
  pthread_mutex_lock(&s->mu);
  s->handshaking--;
  pthread_mutex_unlock(&s->mu);
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
    if (!rc) nx_seed_refuse(ch, NEXAR_ERR_PROTOCOL, "expected a Hello message");
    free(msg);
    nx_chan_del(ch);
    return;
  }
  free(msg);
  char why[200];
  pthread_mutex_lock(&s->mu);
  if (s->formed) { /* a joiner of the running world: admitted at a checkpoint */
    pthread_mutex_unlock(&s->mu);
    nx_seed_late_joiner(s, j, ch, peer);
    nx_chan_del(ch);
    return;
  }
  int code = check_hello_locked(s, &j->hello, why, sizeof why);
  if (!code) {
    j->registered = 1;
    j->cfd = fd;
    j->arrival = s->arrivals++;
    s->nregistered++;
    NX_INFO("seed: %s joined (%u of %u)", j->hello.listen_addr, s->nregistered, s->world);
    if (s->nregistered == s->world) drop_dead_locked(s, j);
    if (s->nregistered == s->world) {
      int frc = form_locked(s);
      if (frc) NX_ERROR("seed: cannot form the world: %s", nexar_last_error());
      pthread_cond_broadcast(&s->cv);
    }
  }
  uint64_t t = s->cfg.connect_timeout_ms;
  uint64_t deadline = t ? nx_now_ns() + t * 1000000ull : 0;
  while (!code && !s->formed && !s->stop) {
    int closed = !j->registered; /* dropped by drop_dead_locked */
    pthread_mutex_unlock(&s->mu);
    if (!closed) closed = nx_chan_closed(ch);
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
    nx_seed_timed_wait_locked(s, 50);
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
    nx_seed_refuse(ch, code, why);
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
    watch_formation(s, j, ch, peer);
    pthread_mutex_lock(&s->mu);
    s->done++;
    int member = j->formed_ok;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (member) nx_seed_member_loop(s, j, ch, peer);
  }
  nx_chan_del(ch);
}

static void *joiner_main(void *arg) {
  joiner *j = arg;
  serve(j);
  pthread_mutex_lock(&j->s->mu);
  j->finished = 1;
  j->cfd = -1;
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
      free(j->offer_welcome);
      free(j->offer_view);
      free(j);
    } else {
      pp = &j->next;
    }
  }
}

/* ------------------------------------------------ the pre-authentication gate */

static int same_source(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return 0;
  if (a->ss_family == AF_INET)
    return !memcmp(&((const struct sockaddr_in *)a)->sin_addr,
                   &((const struct sockaddr_in *)b)->sin_addr, sizeof(struct in_addr));
  if (a->ss_family == AF_INET6)
    return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                   &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
  return 1;
}

static void drop_pending(nexar_seed *s, int i) {
  close(s->pend[i].fd);
  s->pend[i] = s->pend[--s->npend];
}

/* Closes the oldest silent connection (from src, or from anyone when src is
 * NULL) to make room; 0 if there was none. One that has bytes waiting after
 * all is marked ready instead and skipped. */
static int evict_oldest(nexar_seed *s, const struct sockaddr_storage *src) {
  for (;;) {
    int best = -1;
    for (int i = 0; i < s->npend; i++)
      if (!s->pend[i].ready && (!src || same_source(&s->pend[i].src, src)) &&
          (best < 0 || s->pend[i].since < s->pend[best].since))
        best = i;
    if (best < 0) return 0;
    char b;
    if (recv(s->pend[best].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
      s->pend[best].ready = 1;
      continue;
    }
    drop_pending(s, best);
    return 1;
  }
}

static void admit(nexar_seed *s, int fd, const struct sockaddr_storage *src, uint64_t now) {
  int same = 0;
  for (int i = 0; i < s->npend; i++)
    same += same_source(&s->pend[i].src, src);
  if ((same >= NX_SEED_PER_SOURCE && !evict_oldest(s, src)) ||
      (s->npend >= NX_SEED_PENDING_MAX && !evict_oldest(s, NULL))) {
    close(fd); /* full of connections that all spoke: shed the newcomer */
    return;
  }
  s->pend[s->npend++] = (pending){.fd = fd, .since = now, .src = *src};
}

/* Hands ready connections, oldest first, to handshake threads. Under s->mu. */
static void hand_off_locked(nexar_seed *s) {
  while (s->handshaking < NX_SEED_HANDSHAKERS) {
    int best = -1;
    for (int i = 0; i < s->npend; i++)
      if (s->pend[i].ready && (best < 0 || s->pend[i].since < s->pend[best].since)) best = i;
    if (best < 0) return;
    pending p = s->pend[best];
    s->pend[best] = s->pend[--s->npend];
    joiner *j = nx_calloc(1, sizeof *j);
    if (!j) {
      close(p.fd);
      continue;
    }
    j->s = s;
    j->fd = p.fd;
    j->cfd = -1;
    j->accepted_ns = p.since;
    s->handshaking++;
    if (nx_thread_create(&j->thr, NULL, joiner_main, j) != 0) {
      s->handshaking--;
      close(p.fd);
      free(j);
      continue;
    }
    j->next = s->joiners;
    s->joiners = j;
  }
}

static void *accept_main(void *arg) {
  nexar_seed *s = arg;
  struct pollfd *pfd = nx_calloc(NX_SEED_PENDING_MAX + 1, sizeof *pfd);
  int *idx = nx_calloc(NX_SEED_PENDING_MAX + 1, sizeof *idx);
  pthread_mutex_lock(&s->mu);
  while (!s->stop && pfd && idx) {
    int n = 0;
    pfd[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
    for (int i = 0; i < s->npend; i++)
      if (!s->pend[i].ready)
        idx[n] = i, pfd[n++] = (struct pollfd){.fd = s->pend[i].fd, .events = POLLIN};
    pthread_mutex_unlock(&s->mu);
    int r = poll(pfd, (nfds_t)n, 100);
    pthread_mutex_lock(&s->mu);
    reap_locked(s, 0);
    uint64_t now = nx_now_ns();
    for (int k = 1; r > 0 && k < n; k++)
      if (pfd[k].revents) s->pend[idx[k]].ready = 1;
    for (int i = s->npend - 1; i >= 0; i--) { /* deadlines (swap-removal from the end) */
      uint64_t age = (now - s->pend[i].since) / 1000000ull;
      if (age >= (s->pend[i].ready ? NX_SEED_PREAUTH_MS : NX_SEED_IDLE_MS)) drop_pending(s, i);
    }
    hand_off_locked(s);
    int starved = 0;
    for (int k = 0; r > 0 && (pfd[0].revents & POLLIN) && k < 256 && !s->stop; k++) {
      struct sockaddr_storage src;
      socklen_t sl = sizeof src;
      int fd = accept4(s->listen_fd, (struct sockaddr *)&src, &sl, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        /* out of descriptors: the oldest silent connection gives its own */
        if ((errno == EMFILE || errno == ENFILE) && evict_oldest(s, NULL)) continue;
        starved = errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM;
        break;
      }
      admit(s, fd, &src, now);
    }
    hand_off_locked(s);
    if (starved) { /* the backlog stays readable: do not spin on it */
      pthread_mutex_unlock(&s->mu);
      struct timespec ts = {0, 50 * 1000000L};
      nanosleep(&ts, NULL);
      pthread_mutex_lock(&s->mu);
    }
  }
  while (s->npend)
    drop_pending(s, s->npend - 1);
  pthread_mutex_unlock(&s->mu);
  free(pfd);
  free(idx);
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
  s->next_id = world_size;
  s->lost = NX_SEED_NO_RANK;
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
    for (int i = 0; i < 32; i++)
      snprintf(s->token + 2 * i, 3, "%02x", raw[i]);
  }
  if ((rc = nx_random(s->cluster_id, 16)) || (rc = nx_ca_new(&s->ca, s->cluster_id)) ||
      (rc = nx_ca_cert(s->ca, &s->ca_der, &s->ca_len)))
    goto fail;
  if ((rc = nx_chan_listen(&s->listen_fd, listen_addr, s->addr, sizeof s->addr))) goto fail;
  int fl = fcntl(s->listen_fd, F_GETFL);
  if (fl < 0 || fcntl(s->listen_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    rc = nx_fail(NEXAR_ERR_IO, "seed: listener: %s", strerror(errno));
    goto fail;
  }
  s->pend = nx_calloc(NX_SEED_PENDING_MAX, sizeof *s->pend);
  if (!s->pend) {
    rc = nx_fail(NEXAR_ERR_NOMEM, "seed");
    goto fail;
  }
  if (nx_thread_create(&s->accept_thr, NULL, accept_main, s) != 0) {
    rc = nx_fail(NEXAR_ERR_IO, "seed: cannot start its thread");
    goto fail;
  }
  NX_INFO("seed listening on %s for %u workers", s->addr, world_size);
  *out = s;
  return 0;
fail:
  if (s->listen_fd >= 0) close(s->listen_fd);
  free(s->pend);
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
  /* Formed: every worker has its Welcome and has reported its mesh up (or
   * the formation failed because one was lost). */
  while (!(s->formed && s->done >= s->world)) {
    if (s->lost != NX_SEED_NO_RANK) break;
    if (deadline && nx_now_ns() >= deadline) {
      rc = nx_fail(NEXAR_ERR_TIMEOUT, "seed_wait: %u of %u workers joined within %u ms",
                   s->nregistered, s->world, timeout_ms);
      break;
    }
    nx_seed_timed_wait_locked(s, 20);
  }
  if (!rc && s->lost != NX_SEED_NO_RANK)
    rc = nx_fail(NEXAR_ERR_PEER_LOST, "seed: the formation failed: %s", s->lost_why);
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
  free(s->pend);
  nx_ca_del(s->ca);
  free(s->ca_der);
  free(s->addrs);
  free(s->hosts);
  nx_config_release(&s->cfg);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
