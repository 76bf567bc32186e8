/* Communicators: creation, queries, abort, failure bookkeeping, deletion,
 * and per-peer statistics. */
#include "runtime/comm.h"

#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "runtime/cseg.h"
#include "runtime/request.h"

int nx_comm_new(nx_ep *ep, uint64_t id, const uint32_t *members, uint32_t n, uint32_t my_root,
                const nexar_config *cfg, uint64_t epoch, uint64_t parent_id, nx_comm **out) {
  *out = NULL;
  nx_comm *c = nx_calloc(1, sizeof *c);
  if (!c) return nx_fail(NEXAR_ERR_NOMEM, "communicator");
  /* member ids are root ranks: the table covers the largest one (ids of
   * members admitted later exceed the first world) */
  uint32_t nroot = 0;
  for (uint32_t i = 0; i < n; i++)
    if (members[i] >= nroot) nroot = members[i] + 1;
  c->nroot = nroot;
  c->members = nx_calloc(n, sizeof *c->members);
  c->of_root = nx_calloc(nroot ? nroot : 1, sizeof *c->of_root);
  if (!c->members || !c->of_root) {
    free(c->members);
    free(c->of_root);
    free(c);
    return nx_fail(NEXAR_ERR_NOMEM, "communicator");
  }
  int rc = nx_config_resolve(cfg, &c->cfg);
  if (rc) {
    free(c->members);
    free(c->of_root);
    free(c);
    return rc;
  }
  for (uint32_t j = 0; j < nroot; j++)
    c->of_root[j] = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) {
    c->members[i] = members[i];
    c->of_root[members[i]] = i;
    if (members[i] == my_root) c->rank = i;
  }
  c->size = n;
  c->id = id;
  c->revoke_lost = UINT32_MAX;
  c->epoch = epoch;
  c->einfo.struct_size = sizeof c->einfo;
  c->einfo.epoch = epoch;
  c->einfo.old_world = c->einfo.new_world = n;
  c->einfo.old_rank = c->rank;
  c->parent_id = parent_id;
  c->ep = ep;
  c->next_seq = 1;
  c->next_rpc_id = 1;
  pthread_cond_init(&c->rpc_idle, NULL);
  nx_ep_ref(ep);
  pthread_mutex_lock(&ep->mu);
  c->next = ep->comms;
  ep->comms = c;
  /* a revoke notice that arrived before it was created here */
  for (unsigned i = 0; i < ep->nrevoked_ids && i < 32; i++)
    if (ep->revoked_ids[i] == id)
      nx_comm_revoke_locked(c, 0, "revoked by a peer before it formed here");
  nx_comm *parent = id != parent_id ? nx_comm_find(ep, parent_id) : NULL;
  if (parent && parent != c && parent->epoch == epoch && atomic_load(&parent->revoked))
    nx_comm_revoke_locked(c, 0, "its parent communicator is revoked");
  /* members already known dead are dead here too */
  for (uint32_t i = 0; i < n; i++)
    if (ep->peers[members[i]]->state == NX_PEER_DEAD)
      nx_comm_peer_dead_locked(c, members[i], ep->peers[members[i]]->why);
  pthread_mutex_unlock(&ep->mu);
  *out = c;
  return 0;
}

void nx_comm_log_end_locked(nx_comm *c, uint64_t id, int rc, const char *detail) {
  nx_oplog_end(&c->log, id, rc, detail);
  if (rc == NEXAR_ERR_TIMEOUT) {
    NX_ERROR("timeout on comm %llu rank %u: %s", (unsigned long long)c->id, c->rank,
             detail ? detail : "");
    if (c->ep->knobs.dump_on_timeout) nx_oplog_dump(&c->log, stderr, c->id, c->rank);
  }
}

void nx_comm_log_end(nx_comm *c, uint64_t id, int rc, const char *detail) {
  pthread_mutex_lock(&c->ep->mu);
  nx_comm_log_end_locked(c, id, rc, detail);
  pthread_mutex_unlock(&c->ep->mu);
}

nx_comm *nx_comm_find(nx_ep *ep, uint64_t id) {
  for (nx_comm *c = ep->comms; c; c = c->next)
    if (c->id == id) return c;
  return NULL;
}

/* The one place that says whether c may start an operation. Callers check
 * once early (no allocation for a dead communicator) and again under ep->mu
 * where they register the operation: a revoke or abort that lands between
 * the two would otherwise miss it, and it would wait for frames its peers
 * drop (the revoke's sweep of pending operations ran before it existed). */
int nx_comm_check_peer_locked(nx_comm *c, const char *op, uint32_t peer) {
  if (atomic_load(&c->aborted))
    return nx_fail(NEXAR_ERR_ABORTED, "%s on comm %llu: communicator aborted (%s)", op,
                   (unsigned long long)c->id, c->abort_why);
  if (!atomic_load(&c->revoked)) return 0;
  if (peer < c->size) {
    /* a peer the engine dropped keeps its own code (PROTOCOL, AUTH, ...) */
    const nx_peer *p = c->ep->peers[c->members[peer]];
    if (nx_comm_lost_rank_locked(c, peer))
      return nx_fail(p->state == NX_PEER_DEAD ? p->dead_code : NEXAR_ERR_PEER_LOST,
                     "%s rank %u on comm %llu: rank %u is dead (revoked: %s)", op, peer,
                     (unsigned long long)c->id, peer, c->revoke_why);
    return nx_fail(NEXAR_ERR_ABORTED, "%s rank %u on comm %llu: communicator revoked (%s)", op,
                   peer, (unsigned long long)c->id, c->revoke_why);
  }
  if (c->ndead || c->revoke_lost != UINT32_MAX)
    return nx_fail(
        NEXAR_ERR_PEER_LOST, "%s on comm %llu: communicator revoked, rank %u is dead (%s)", op,
        (unsigned long long)c->id, c->ndead ? c->dead[0] : c->revoke_lost, c->revoke_why);
  return nx_fail(NEXAR_ERR_ABORTED, "%s on comm %llu: communicator revoked (%s)", op,
                 (unsigned long long)c->id, c->revoke_why);
}

int nx_comm_check_peer(nx_comm *c, const char *op, uint32_t peer) {
  if (!c) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: NULL communicator", op);
  if (!atomic_load(&c->aborted) && !atomic_load(&c->revoked)) return 0;
  pthread_mutex_lock(&c->ep->mu); /* revoke_why and the dead set are written under it */
  int rc = nx_comm_check_peer_locked(c, op, peer);
  pthread_mutex_unlock(&c->ep->mu);
  return rc;
}

int nx_comm_check(nx_comm *c, const char *op) {
  return nx_comm_check_peer(c, op, UINT32_MAX);
}

/* Drops queued messages of c (all of them, or those of one collective): a
 * descriptor's sender is answered as it is freed. */
static void drop_queued_locked(nx_comm *c, int one, uint64_t seq) {
  nx_ep *ep = c->ep;
  nx_msg *prev = NULL;
  for (nx_msg *m = ep->unexp_head, *n; m; m = n) {
    n = m->next;
    if (m->f.comm_id != c->id || m->f.kind == NX_KIND_RPC_REQ ||
        (one && (m->f.kind != NX_KIND_COLL || m->f.tag != seq))) {
      prev = m;
      continue;
    }
    nx_match_unlink(ep, prev, m); /* one pass: nx_match_unqueue would walk the queue again */
    if (!one) m->peer->st.stale_frames++;
    m->discard = 1;
    nx_msg_release_credit(ep, m);
    if (m->complete || !m->rs) nx_msg_free(ep, m);
  }
}

/* After a revoke nothing can receive c's queued messages. */
static void purge_unexpected_locked(nx_comm *c) {
  drop_queued_locked(c, 0, 0);
}

void nx_comm_drop_coll_locked(nx_comm *c, uint64_t seq) {
  drop_queued_locked(c, 1, seq);
}

int nx_comm_lost_rank_locked(const nx_comm *c, uint32_t r) {
  return r == c->revoke_lost || nx_comm_is_dead_locked(c, r);
}

/* Which posted receives a revoke, a delete or a member's loss ends. */
typedef struct pick_code_arg {
  const nx_comm *c;
  uint32_t src; /* root rank, for pick_comm_src */
  int rc;
} pick_code_arg;

static int pick_revoked(const nx_recv *r, void *arg) {
  const nx_comm *c = arg;
  if (r->key.comm != c->id) return 0;
  uint32_t src = nx_comm_rank_of(c, r->key.src);
  return src != UINT32_MAX && nx_comm_lost_rank_locked(c, src) ? NEXAR_ERR_PEER_LOST
                                                               : NEXAR_ERR_ABORTED;
}

static int pick_comm(const nx_recv *r, void *arg) {
  const pick_code_arg *a = arg;
  return r->key.comm == a->c->id ? a->rc : 0;
}

static int pick_comm_src(const nx_recv *r, void *arg) {
  const pick_code_arg *a = arg;
  return r->key.comm == a->c->id && r->key.src == a->src ? a->rc : 0;
}

void nx_comm_revoke_locked(nx_comm *c, int flood, const char *why) {
  if (atomic_exchange(&c->revoked, 1)) return;
  nx_ep *ep = c->ep;
  ep->nrevoked_live++;
  snprintf(c->revoke_why, sizeof c->revoke_why, "%s", why);
  NX_DEBUG("comm %llu rank %u revoked: %s", (unsigned long long)c->id, c->rank, why);
  if (c->revoke_lost == UINT32_MAX && c->ndead) c->revoke_lost = c->dead[0];
  int lost = c->revoke_lost != UINT32_MAX;
  if (flood) { /* before acting, so the notice spreads even if we die now */
    nx_frame f = {0};
    f.kind = NX_KIND_REVOKE;
    f.comm_id = c->id;
    /* the member whose loss caused it (member id): operations that involve
     * it fail with PEER_LOST on every member, also before they detect it */
    f.root = lost ? c->members[c->revoke_lost] : UINT32_MAX;
    f.status = lost ? NEXAR_ERR_PEER_LOST : NEXAR_ERR_ABORTED;
    for (uint32_t i = 0; i < c->size; i++)
      if (i != c->rank && ep->peers[c->members[i]]->state == NX_PEER_UP)
        nx_ep_send_locked(ep, c->members[i], &f, NULL, 0, NULL, NULL);
  }
  char msg[220];
  snprintf(msg, sizeof msg, "comm %llu revoked: %s", (unsigned long long)c->id, why);
  nx_match_fail_posted(ep, pick_revoked, c, msg);
  nx_coll_fail_all_locked(c, lost ? NEXAR_ERR_PEER_LOST : NEXAR_ERR_ABORTED, msg);
  purge_unexpected_locked(c);
  for (nx_comm *d = ep->comms; d; d = d->next)
    if (d != c && d->parent_id == c->id &&
        d->epoch == c->epoch) /* split children, not successors */
      nx_comm_revoke_locked(d, 0, "its parent communicator was revoked");
  pthread_cond_broadcast(&ep->cv);
}

void nx_comm_lost_locked(nx_comm *c, const char *why) {
  if (!atomic_load(&c->revoked)) nx_comm_revoke_locked(c, 1, why);
}

void nx_comm_on_revoke_locked(nx_ep *ep, const nx_frame *f) {
  uint64_t id = f->comm_id;
  uint32_t src = f->src;
  nx_comm *c = nx_comm_find(ep, id);
  if (!c) { /* not formed here yet (a successor or child): it is born revoked */
    for (unsigned i = 0; i < ep->nrevoked_ids && i < 32; i++)
      if (ep->revoked_ids[i] == id) return;
    ep->revoked_ids[ep->nrevoked_ids++ % 32] = id;
    if (ep->nrevoked_ids >= 64) ep->nrevoked_ids = 32;
    return;
  }
  if (atomic_load(&c->revoked)) return;
  char why[96];
  uint32_t r = nx_comm_rank_of(c, src);
  uint32_t lost = nx_comm_rank_of(c, f->root);
  if (f->status == NEXAR_ERR_PEER_LOST && lost != UINT32_MAX && lost != c->rank) {
    c->revoke_lost = lost;
    snprintf(why, sizeof why, "revoked by rank %u: rank %u lost", r, lost);
  } else {
    snprintf(why, sizeof why, "revoked by rank %u", r);
  }
  nx_comm_revoke_locked(c, 1, why); /* forward once, then act */
}

uint32_t nexar_rank(const nexar_client *c) {
  return c ? c->rank : 0;
}
uint32_t nexar_world_size(const nexar_client *c) {
  return c ? c->size : 0;
}
uint64_t nexar_comm_id(const nexar_client *c) {
  return c ? c->id : 0;
}
uint64_t nexar_view_epoch(const nexar_client *c) {
  return c ? c->epoch : 0;
}

int nexar_revoke(nexar_client *c) {
  if (!c) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "revoke: NULL communicator");
  pthread_mutex_lock(&c->ep->mu);
  char why[64];
  snprintf(why, sizeof why, "nexar_revoke on rank %u", c->rank);
  nx_comm_revoke_locked(c, 1, why);
  pthread_mutex_unlock(&c->ep->mu);
  return 0;
}

/* Posted receives of c fail with rc (pending sends keep going: their data is
 * the application's and the peer may still want it). */
void nx_comm_fail_pending_locked(nx_comm *c, int rc, const char *why) {
  pick_code_arg a = {c, 0, rc};
  nx_match_fail_posted(c->ep, pick_comm, &a, why);
  nx_coll_fail_all_locked(c, rc, why);
}

typedef struct failure_job {
  nx_comm *c;
  nexar_failure_fn fn;
  void *ctx;
  uint32_t *dead;
  size_t n;
} failure_job;

static void run_failure_cb(void *arg) {
  failure_job *j = arg;
  j->fn(j->ctx, j->dead, j->n);
  nx_ep *ep = j->c->ep;
  pthread_mutex_lock(&ep->mu);
  j->c->rpc_busy--;
  pthread_cond_broadcast(&j->c->rpc_idle);
  pthread_mutex_unlock(&ep->mu);
  nx_ep_unref(ep);
  free(j->dead);
  free(j);
}

int nx_pool_submit(void (*fn)(void *arg), void *arg);

static void notify_failure_locked(nx_comm *c) {
  if (!c->on_failure || c->ndead == 0) return;
  failure_job *j = nx_calloc(1, sizeof *j);
  if (!j) return;
  j->dead = malloc(c->ndead * sizeof *j->dead);
  if (!j->dead) {
    free(j);
    return;
  }
  memcpy(j->dead, c->dead, c->ndead * sizeof *j->dead);
  j->n = c->ndead;
  j->c = c;
  j->fn = c->on_failure;
  j->ctx = c->on_failure_ctx;
  c->rpc_busy++;
  nx_ep_ref(c->ep);
  if (nx_pool_submit(run_failure_cb, j)) {
    c->rpc_busy--;
    atomic_fetch_sub(&c->ep->refs, 1);
    free(j->dead);
    free(j);
  }
}

void nx_comm_peer_dead_locked(nx_comm *c, uint32_t root_rank, const char *why) {
  uint32_t r = nx_comm_rank_of(c, root_rank);
  if (r == UINT32_MAX) return;
  for (size_t i = 0; i < c->ndead; i++)
    if (c->dead[i] == r) return;
  uint32_t *d = realloc(c->dead, (c->ndead + 1) * sizeof *d);
  if (!d) return;
  c->dead = d;
  size_t i = c->ndead++;
  while (i > 0 && d[i - 1] > r)
    d[i] = d[i - 1], i--;
  d[i] = r;
  char msg[200];
  snprintf(msg, sizeof msg, "rank %u lost: %s", r, why);
  int failed_ops = nx_coll_inflight_locked(c);
  nx_coll_fail_all_locked(c, NEXAR_ERR_PEER_LOST, msg);
  /* receives on c from it can never complete (it may have aborted only c) */
  pick_code_arg a = {c, root_rank, NEXAR_ERR_PEER_LOST};
  if (nx_match_fail_posted(c->ep, pick_comm_src, &a, msg)) failed_ops = 1;
  nx_agr_suspect_locked(c, r);
  /* ULFM: an operation failed because a member is lost, so the communicator
   * is revoked; AUTOMATIC recovery revokes and starts agreeing at once */
  if (!atomic_load(&c->aborted) &&
      (failed_ops || c->cfg.recovery_policy == NEXAR_RECOVERY_AUTOMATIC)) {
    nx_comm_lost_locked(c, msg);
    if (c->cfg.recovery_policy == NEXAR_RECOVERY_AUTOMATIC) nx_agr_start_locked(c, 0, 1);
  }
  notify_failure_locked(c);
}

int nx_comm_is_dead_locked(const nx_comm *c, uint32_t r) {
  for (size_t i = 0; i < c->ndead; i++)
    if (c->dead[i] == r) return 1;
  return 0;
}

void nx_comm_remote_abort_locked(nx_ep *ep, uint64_t id, uint32_t root_rank) {
  nx_comm *c = nx_comm_find(ep, id);
  if (!c) return;
  char why[96];
  snprintf(why, sizeof why, "rank %u aborted the communicator", nx_comm_rank_of(c, root_rank));
  nx_comm_peer_dead_locked(c, root_rank, why);
}

int nexar_failed_ranks(nexar_client *c, uint32_t *ranks, size_t cap, size_t *n) {
  if (!c || !n || (cap && !ranks))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "failed_ranks: NULL argument");
  pthread_mutex_lock(&c->ep->mu);
  *n = c->ndead;
  for (size_t i = 0; i < c->ndead && i < cap; i++)
    ranks[i] = c->dead[i];
  pthread_mutex_unlock(&c->ep->mu);
  return 0;
}

int nexar_on_failure(nexar_client *c, nexar_failure_fn fn, void *ctx) {
  if (!c) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "on_failure: NULL communicator");
  pthread_mutex_lock(&c->ep->mu);
  /* once this returns, the old callback is not running */
  while (c->rpc_busy > 0 && c->on_failure)
    pthread_cond_wait(&c->rpc_idle, &c->ep->mu);
  c->on_failure = fn;
  c->on_failure_ctx = ctx;
  notify_failure_locked(c);
  pthread_mutex_unlock(&c->ep->mu);
  return 0;
}

void nexar_abort(nexar_client *c) {
  if (!c) return;
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  if (!atomic_exchange(&c->aborted, 1)) {
    snprintf(c->abort_why, sizeof c->abort_why, "nexar_abort on rank %u", c->rank);
    nx_frame f = {0};
    f.kind = NX_KIND_ABORT;
    f.comm_id = c->id;
    for (uint32_t i = 0; i < c->size; i++)
      if (i != c->rank && ep->peers[c->members[i]]->state == NX_PEER_UP)
        nx_ep_send_locked(ep, c->members[i], &f, NULL, 0, NULL, NULL);
    char why[96];
    snprintf(why, sizeof why, "comm %llu aborted on rank %u", (unsigned long long)c->id, c->rank);
    nx_comm_fail_pending_locked(c, NEXAR_ERR_ABORTED, why);
  }
  pthread_mutex_unlock(&ep->mu);
}

void nexar_client_del(nexar_client *c) {
  if (!c) return;
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  c->on_failure = NULL;
  while (c->rpc_busy > 0)
    pthread_cond_wait(&c->rpc_idle, &ep->mu);
  nx_comm_fail_pending_locked(c, NEXAR_ERR_ABORTED, "communicator deleted");
  nx_coll_retire_locked(c);
  nx_agr_free_all_locked(c);
  for (nx_comm **pp = &ep->comms; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      if (atomic_load(&c->revoked)) ep->nrevoked_live--;
      break;
    }
  int last = !ep->comms;
  pthread_mutex_unlock(&ep->mu);
  /* The user's close: sends still going out, and (sparse) relaying until
   * the others close too, wait here, in the caller's thread. The last
   * reference may go later on a pool thread (an RPC handler, a same-host
   * read), after the caller returned and perhaps exited. */
  if (last) nx_ep_drain(ep);
  nx_ep_unref(ep);
  if (c->on_del) c->on_del(c->on_del_arg);
  nx_config_release(&c->cfg);
  pthread_cond_destroy(&c->rpc_idle);
  free(c->members);
  free(c->of_root);
  free(c->fast_k); /* a collective begun without the lock keeps it */
  free(c->failed_seqs);
  free(c->failed_codes);
  free(c->handlers);
  free(c->dead);
  nx_cseg_free(c->cseg);
  nx_cseg_free(c->cseg_offer);
  free(c->coll_spare);
  free(c->scratch_keep);
  free(c);
}

void *nx_comm_scratch_take(nx_comm *c, size_t need, size_t *cap) {
  void *p = NULL;
  pthread_mutex_lock(&c->ep->mu);
  if (c->scratch_keep && c->scratch_keep_cap >= need) {
    p = c->scratch_keep;
    *cap = c->scratch_keep_cap;
    c->scratch_keep = NULL;
    c->scratch_keep_cap = 0;
  }
  pthread_mutex_unlock(&c->ep->mu);
  return p;
}

void nx_comm_scratch_give(nx_comm *c, void *p, size_t cap) {
  pthread_mutex_lock(&c->ep->mu);
  if (cap > c->scratch_keep_cap) { /* keep the larger */
    void *q = c->scratch_keep;
    c->scratch_keep = p;
    c->scratch_keep_cap = cap;
    p = q;
  }
  pthread_mutex_unlock(&c->ep->mu);
  free(p);
}

int nexar_peer_stats_get_sized(nexar_client *c, uint32_t peer, nexar_peer_stats *out,
                               size_t out_size) {
  if (!c || !out || out_size == 0)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "peer_stats: NULL argument");
  if (peer >= c->size)
    return nx_fail(NEXAR_ERR_INVALID_RANK, "peer_stats: rank %u of %u", peer, c->size);
  nexar_peer_stats st;
  pthread_mutex_lock(&c->ep->mu);
  nx_peer *p = c->ep->peers[c->members[peer]];
  st = p->st;
  st.bulk_stream = p->bulk_up ? (c->ep->cfg.encrypt_bulk ? 2 : 1) : 0;
  st.neighbor = p->rank != c->ep->rank && !p->relayed && p->state == NX_PEER_UP;
  st.shm = nx_shm_state_locked(p);
  pthread_mutex_unlock(&c->ep->mu);
  memcpy(out, &st, NX_MIN(out_size, sizeof st));
  return 0;
}

int nexar_relay_stats_get_sized(nexar_client *c, nexar_relay_stats *out, size_t out_size) {
  if (!c || !out || out_size == 0)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "relay_stats: NULL argument");
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  nexar_relay_stats st = {ep->relay_forwarded, ep->relay_buf,       ep->relay_buf_peak,
                          ep->relay_drop_ttl,  ep->relay_drop_auth, ep->relay_drop_route};
  pthread_mutex_unlock(&ep->mu);
  memcpy(out, &st, NX_MIN(out_size, sizeof st));
  return 0;
}
