/* The engine side of the fault-tolerant agreement (proto/agree.h): it feeds
 * the pure state machine with agreement frames, failure-detector news and
 * time, and carries out its actions (frames to members, the decision).
 *
 * Every instance belongs to a communicator and is keyed: key 0 decides the
 * successor view (nexar_recover), key k >= 1 is the k-th nexar_agree call,
 * NX_AGR_KEY_RESIZE the commit of a prospective view (elastic admission).
 * Instances are created when the caller starts them or when the first frame
 * for them arrives (then they answer as acceptors; a recovery instance also
 * starts at once with flag 1, so a member that has not called nexar_recover
 * yet is never mistaken for a dead one). Frames name members by their index
 * in the view (rank order); member ids are root ranks (unique for the
 * cluster's life). One timer per endpoint runs whatever is due in every
 * instance. Everything here runs under ep->mu; nx_agr_run waits without it. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/agree.h"
#include "runtime/comm.h"
#include "runtime/request.h"

_Static_assert(NX_AGR_MAX_BYTES >= 24 + 4 + 512 + 1 + 12 + 512, "a PROMISE of 4096 members fits");

#define NX_AGR_AHEAD 16 /* instances a peer may open ahead of our nexar_agree calls */
#define NX_AGR_KEEP 8   /* decided nexar_agree instances kept to answer laggards */

struct nx_agr {
  nx_agr *next;
  uint64_t key;
  nx_agree a;
  int started;
  int applied; /* the decision's dead set was applied to the communicator */
  int pumping; /* pump_locked is running for it (see there) */
  int repump;  /* input arrived meanwhile: pump again */
  nexar_request *req;
};

static uint64_t ms_ns(uint32_t ms) {
  return (uint64_t)ms * 1000000ull;
}

static void arm_locked(nx_ep *ep, uint64_t due) {
  if (due == UINT64_MAX || due >= ep->agr_due) return;
  ep->agr_due = due;
  ep->agr_timer.fn = nx_agr_timer_fn;
  nx_ep_defer_at(ep, &ep->agr_timer, due);
}

static void exit_now(nx_work *w) {
  (void)w;
  _exit(9);
}

/* NEXAR_TEST_AGREE_EXIT: _exit(9) at a named point (tests of the agreement's
 * fault tolerance kill a coordinator exactly there). */
static void test_hook(nx_ep *ep, uint8_t mtype, int fanout_done) {
  const char *h = ep->knobs.test_agree_exit;
  if (!h || !*h) return;
  uint8_t want = 0;
  unsigned long k = 0;
  if (strcmp(h, "collect") == 0)
    want = NX_AM_COLLECT;
  else if (strncmp(h, "accept:", 7) == 0)
    want = NX_AM_ACCEPT, k = strtoul(h + 7, NULL, 10);
  else if (strncmp(h, "commit:", 7) == 0)
    want = NX_AM_COMMIT, k = strtoul(h + 7, NULL, 10);
  else if (strcmp(h, "promise") == 0) /* an acceptor that answered, then died */
    want = NX_AM_PROMISE, k = 1;
  if (want != mtype) return;
  if (want == NX_AM_COLLECT ? fanout_done : ++ep->agr_exit_sent >= k) {
    /* freeze here: no more agreement input or output, and exit once the
     * engine has had time to put what was sent on the wire */
    ep->agr_frozen = 1;
    ep->agr_exit.fn = exit_now;
    nx_ep_defer_at(ep, &ep->agr_exit, nx_now_ns() + 100000000ull);
  }
}

void (*nx_agr_test_sent)(nx_comm *c, uint32_t to) = NULL;

static void send_one(nx_comm *c, uint32_t to, const nx_agree_action *act, uint64_t key) {
  nx_ep *ep = c->ep;
  if (to >= c->size || to == c->rank || ep->agr_frozen) return;
  if (ep->peers[c->members[to]]->state != NX_PEER_UP) return;
  nx_frame f = {0};
  f.kind = NX_KIND_AGREE;
  f.comm_id = c->id;
  f.tag = key;
  nexar_iovec iov = {(void *)act->buf, act->len};
  nx_ep_send_locked(ep, c->members[to], &f, &iov, 1, NULL, NULL);
  if (nx_agr_test_sent) nx_agr_test_sent(c, to);
  if (act->mtype != NX_AM_COLLECT) test_hook(ep, act->mtype, 0);
}

/* Marks the decided dead set on c (members the survivors declared failed,
 * some of which this rank may not have seen die). */
static void apply_locked(nx_comm *c, nx_agr *g) {
  const nx_agree_decision *d = nx_agree_result(&g->a);
  if (g->applied || d->outcome == NX_AGREE_PENDING || d->outcome == NX_AGREE_ABORTED) return;
  g->applied = 1;
  for (uint32_t i = 0; i < c->size; i++)
    if (i != c->rank && nx_agree_bit(d->dead, i) && !nx_comm_is_dead_locked(c, i)) {
      char why[96];
      snprintf(why, sizeof why, "declared failed by the agreement at epoch %llu",
               (unsigned long long)c->epoch);
      nx_comm_peer_dead_locked(c, c->members[i], why);
    }
}

/* Carries out what the state machine asks for (one pass). */
static void pump_once_locked(nx_comm *c, nx_agr *g) {
  nx_agree_action act;
  int decided = 0;
  if (c->ep->agr_frozen) return;
  while (nx_agree_pop(&g->a, &act)) {
    if (act.kind == NX_AGREE_SEND) {
      if (act.to == NX_AGREE_ALL) {
        for (uint32_t i = 0; i < c->size; i++)
          send_one(c, i, &act, g->key);
        if (act.mtype == NX_AM_COLLECT) test_hook(c->ep, act.mtype, 1);
      } else {
        send_one(c, act.to, &act, g->key);
      }
    } else if (act.kind == NX_AGREE_DECIDE) {
      const nx_agree_decision *d = nx_agree_result(&g->a);
      NX_DEBUG("comm %llu rank %u: agreement %llu at epoch %llu decided %d (%u dead) %s",
               (unsigned long long)c->id, c->rank, (unsigned long long)g->key,
               (unsigned long long)c->epoch, d->outcome, d->ndead, d->reason);
      decided = 1;
    }
  }
  /* the caller learns it after the sends (a test hook that fired during them
   * keeps this process from acting on the decision before it exits) */
  if (decided && g->req && !c->ep->agr_frozen) nx_req_complete(g->req, 0, NULL);
  if (c->ep->agr_frozen) return;
  if (g->a.nomem && g->req) nx_req_complete(g->req, NEXAR_ERR_NOMEM, "agreement: out of memory");
  arm_locked(c->ep, nx_agree_next_deadline(&g->a));
  apply_locked(c, g);
}

/* Not re-entrant on purpose: a send made here may run the engine's timers
 * (an application thread writes at once), a heartbeat timeout there suspects
 * a member, and that pumps this instance again. A nested pass would pop the
 * next action, which frees the buffer the outer pass is still sending to the
 * remaining members: they got freed memory ("malformed agreement message",
 * so they closed the connection to a live member, which could leave no
 * majority). The nested call only asks the outer one to go round again. */
static void pump_locked(nx_comm *c, nx_agr *g) {
  if (g->pumping) {
    g->repump = 1;
    return;
  }
  g->pumping = 1;
  do {
    g->repump = 0;
    pump_once_locked(c, g);
  } while (g->repump);
  g->pumping = 0;
}

/* Drops the oldest decided nexar_agree instances beyond NX_AGR_KEEP. */
static void trim_locked(nx_comm *c) {
  size_t n = 0;
  for (nx_agr *g = c->agrs; g; g = g->next)
    n += g->key != 0;
  while (n > NX_AGR_KEEP) {
    nx_agr **old = NULL;
    for (nx_agr **pp = &c->agrs; *pp; pp = &(*pp)->next)
      if ((*pp)->key != 0 && !(*pp)->req &&
          nx_agree_result(&(*pp)->a)->outcome != NX_AGREE_PENDING &&
          (!old || (*pp)->key < (*old)->key))
        old = pp;
    if (!old) return;
    nx_agr *g = *old;
    *old = g->next;
    nx_agree_free(&g->a);
    free(g);
    n--;
  }
}

static nx_agr *find_locked(nx_comm *c, uint64_t key) {
  for (nx_agr *g = c->agrs; g; g = g->next)
    if (g->key == key) return g;
  return NULL;
}

static nx_agr *get_locked(nx_comm *c, uint64_t key, int *rc) {
  *rc = 0;
  nx_agr *g = find_locked(c, key);
  if (g) return g;
  g = nx_calloc(1, sizeof *g);
  uint64_t *ids = malloc((size_t)c->size * sizeof *ids);
  if (!g || !ids) {
    free(g), free(ids);
    *rc = nx_fail(NEXAR_ERR_NOMEM, "agreement on comm %llu", (unsigned long long)c->id);
    return NULL;
  }
  for (uint32_t i = 0; i < c->size; i++)
    ids[i] = c->members[i];
  /* recovery: a member that does not answer within a heartbeat timeout is
   * as good as dead; nexar_agree: members call it when they get there, like
   * a collective, so they get the collective timeout */
  uint64_t timeout =
      key == 0 || key == NX_AGR_KEY_RESIZE
          ? ms_ns(c->cfg.heartbeat_timeout_ms)
          : ms_ns(c->cfg.collective_timeout_ms ? c->cfg.collective_timeout_ms : 30000);
  uint32_t limit_ms =
      key == NX_AGR_KEY_RESIZE ? c->cfg.elastic_checkpoint_timeout_ms : c->cfg.recovery_timeout_ms;
  uint64_t give_up = limit_ms ? ms_ns(limit_ms) : 365ull * 86400 * 1000000000ull;
  if (give_up < timeout) give_up = timeout;
  /* a prospective view is committed by a majority, never by SURVIVORS: two
   * sides of a partition must not install different views of one change */
  int quorum = c->cfg.recovery_quorum == NEXAR_QUORUM_SURVIVORS && key != NX_AGR_KEY_RESIZE
                   ? NX_AGREE_SURVIVORS
                   : NX_AGREE_MAJORITY;
  int e = nx_agree_init(&g->a, c->epoch, c->size, ids, c->rank, quorum, timeout, give_up);
  free(ids);
  if (e) {
    free(g);
    *rc = nx_fail(e, "agreement on comm %llu: %s", (unsigned long long)c->id, nexar_strerror(e));
    return NULL;
  }
  uint64_t now = nx_now_ns();
  for (size_t i = 0; i < c->ndead; i++)
    nx_agree_suspect(&g->a, now, c->dead[i]);
  g->key = key;
  g->next = c->agrs;
  c->agrs = g;
  return g;
}

int nx_agr_start_locked(nx_comm *c, uint64_t key, uint32_t flag) {
  int rc = 0;
  nx_agr *g = get_locked(c, key, &rc);
  if (!g) return rc;
  if (g->started) return 0;
  g->started = 1;
  rc = nx_agree_start(&g->a, nx_now_ns(), flag, NULL);
  if (rc) return nx_fail(rc, "agreement on comm %llu: start", (unsigned long long)c->id);
  pump_locked(c, g);
  return 0;
}

void nx_agr_on_frame_locked(nx_ep *ep, uint32_t src, const nx_frame *f, const uint8_t *buf,
                            size_t len) {
  nx_comm *c = nx_comm_find(ep, f->comm_id);
  /* not formed here yet: the coordinator re-sends; aborted here: not taking part */
  if (!c || atomic_load(&c->aborted) || src >= ep->world || ep->agr_frozen) return;
  uint32_t from = nx_comm_rank_of(c, src);
  if (from == UINT32_MAX) return;
  if (f->tag != 0 && f->tag != NX_AGR_KEY_RESIZE && f->tag > c->agree_seq + NX_AGR_AHEAD &&
      !find_locked(c, f->tag))
    return;
  int rc = 0;
  nx_agr *g = get_locked(c, f->tag, &rc);
  if (!g) return;
  rc = nx_agree_on_msg(&g->a, nx_now_ns(), from, buf, len);
  if (rc == NEXAR_ERR_PROTOCOL) {
    char hex[3 * 32 + 1] = "";
    for (size_t i = 0; i < len && i < 32; i++)
      snprintf(hex + 3 * i, 4, "%02x ", buf[i]);
    NX_WARN("comm %llu: malformed agreement message %llu from rank %u (member %u of %u): %zu "
            "bytes: %s",
            (unsigned long long)c->id, (unsigned long long)f->tag, src, from, c->size, len, hex);
    nx_peer_dead_locked(ep, ep->peers[src], NEXAR_ERR_PROTOCOL, "malformed agreement message");
    return;
  }
  if (f->tag == 0 && !g->started) {
    g->started = 1;
    nx_agree_start(&g->a, nx_now_ns(), 1, NULL);
  }
  pump_locked(c, g);
}

void nx_agr_suspect_locked(nx_comm *c, uint32_t r) {
  uint64_t now = nx_now_ns();
  for (nx_agr *g = c->agrs; g; g = g->next) {
    nx_agree_suspect(&g->a, now, r);
    pump_locked(c, g);
  }
}

void nx_agr_free_all_locked(nx_comm *c) {
  while (c->agrs) {
    nx_agr *g = c->agrs;
    c->agrs = g->next;
    if (g->req) nx_req_complete(g->req, NEXAR_ERR_ABORTED, "communicator deleted");
    nx_agree_free(&g->a);
    free(g);
  }
}

void nx_agr_timer_fn(nx_work *w) {
  nx_ep *ep = (nx_ep *)((char *)w - offsetof(nx_ep, agr_timer));
  pthread_mutex_lock(&ep->mu);
  ep->agr_due = UINT64_MAX;
  uint64_t now = nx_now_ns();
  for (nx_comm *c = ep->comms; c; c = c->next)
    for (nx_agr *g = c->agrs; g; g = g->next) {
      uint64_t d = nx_agree_next_deadline(&g->a);
      if (d <= now) nx_agree_on_timer(&g->a, now);
      pump_locked(c, g);
    }
  pthread_mutex_unlock(&ep->mu);
}

void nx_agr_check_partition_locked(nx_ep *ep) {
  for (nx_comm *c = ep->comms; c; c = c->next) {
    char why[256];
    int waiting = 0;
    for (nx_agr *g = c->agrs; g; g = g->next)
      waiting |= g->req != NULL;
    if (!waiting || !nx_relay_partitioned_locked(ep, c, why, sizeof why)) continue;
    for (nx_agr *g = c->agrs; g; g = g->next)
      if (g->req) {
        nx_req_complete(g->req, NEXAR_ERR_ABORTED, why);
        g->req = NULL;
      }
  }
}

int nx_agr_run(nx_comm *c, uint64_t key, uint32_t flag, int *outcome, uint32_t *agreed,
               uint8_t *dead, char *why, size_t whylen) {
  nx_ep *ep = c->ep;
  nexar_request *req = nx_req_new();
  if (!req) return nx_fail(NEXAR_ERR_NOMEM, "agreement on comm %llu", (unsigned long long)c->id);
  pthread_mutex_lock(&ep->mu);
  trim_locked(c); /* here, where no loop walks c->agrs */
  int rc = nx_agr_start_locked(c, key, flag);
  nx_agr *g = rc ? NULL : find_locked(c, key);
  if (g && nx_agree_result(&g->a)->outcome == NX_AGREE_PENDING && !g->a.nomem) {
    g->req = req;
    pthread_mutex_unlock(&ep->mu);
    rc = nx_req_wait(req);
    pthread_mutex_lock(&ep->mu);
    g = find_locked(c, key);
    if (g) g->req = NULL;
  }
  if (!rc && !g)
    rc = nx_fail(NEXAR_ERR_ABORTED, "agreement on comm %llu: communicator deleted",
                 (unsigned long long)c->id);
  if (!rc && g->a.nomem)
    rc = nx_fail(NEXAR_ERR_NOMEM, "agreement on comm %llu", (unsigned long long)c->id);
  if (!rc) {
    const nx_agree_decision *d = nx_agree_result(&g->a);
    *outcome = d->outcome;
    *agreed = d->flag;
    if (dead)
      for (uint32_t i = 0; i < c->size; i++)
        dead[i] = (uint8_t)nx_agree_bit(d->dead, i);
    snprintf(why, whylen, "%s", d->reason);
  }
  pthread_mutex_unlock(&ep->mu);
  nx_req_free(req);
  return rc;
}
