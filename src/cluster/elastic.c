/* Elastic membership on the members' side: nexar_elastic_checkpoint,
 * nexar_elastic_leave, nexar_elastic_info_get, and the two-phase commit of a
 * prospective view that a joiner runs too (nx_view_commit).
 *
 * A checkpoint is one all_gather of a flag per rank: bit 0 "I leave", and on
 * rank 0 (the coordinator) bit 1 "the seed said joiners wait". Without either,
 * that is all it costs. With leavers only, every rank computes the same
 * successor from the flags. With joiners waiting, rank 0 asks the seed for
 * them (ADMIT_REQ with the stayers' addresses), broadcasts what it got, and
 * every stayer adds the joiners to its peer table; the stayers and the
 * joiners then form the prospective view (stayers in their old order, then
 * the joiners) and commit or abort it together (nx_view_commit): each opens
 * the connections it lacks, then all agree (proto/agree, flooded commit) on
 * "everyone ready". A failure or timeout aborts: the old view stays (with
 * leavers, the leave-only successor is installed instead, as the leavers have
 * gone), *out = NULL and the error names what failed. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/seedlink.h"
#include "cluster/view.h"
#include "proto/agree.h"
#include "runtime/coll_port.h"

#define NX_JOINER_REC (4 + NX_ADDR_MAX) /* broadcast record: u32 id, char addr[] */

int nexar_elastic_info_get_sized(const nexar_client *c, nexar_elastic_info *out, size_t size) {
  if (!c || !out || size < sizeof(size_t))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "elastic_info_get: NULL argument or size %zu", size);
  nexar_elastic_info e = c->einfo;
  e.struct_size = sizeof e < size ? sizeof e : size;
  memcpy(out, &e, e.struct_size);
  return 0;
}

int nexar_elastic_leave(nexar_client *c) {
  int rc = nx_comm_check(c, "elastic_leave");
  if (rc) return rc;
  atomic_store(&c->leave, 1);
  return 0;
}

/* Describes why a member of p is not reachable, or "" when all are up. */
static int links_up_locked(nexar_client *p, char *why, size_t cap, int *dead) {
  nx_ep *ep = p->ep;
  *dead = 0;
  for (uint32_t i = 0; i < p->size; i++) {
    if (i == p->rank) continue;
    const nx_peer *q = ep->peers[p->members[i]];
    if (q->state == NX_PEER_UP) continue;
    *dead = q->state == NX_PEER_DEAD;
    snprintf(why, cap, "rank %u (member %u at %s) %s%s", i, p->members[i], q->addrstr,
             *dead ? "failed: " : "is not connected", *dead ? q->why : "");
    return 0;
  }
  return 1;
}

/* The agreed change committed, but a member may have died between its
 * readiness and the commit (the agreement cannot tell): one barrier on the
 * new view finds out, and a recovery of it (the survivors agree again)
 * replaces it, so no member returns a view with a dead rank it was told was
 * alive. The replacement keeps the predecessor's elastic info. */
static int settle(nexar_client **pp) {
  nexar_client *p = *pp;
  int rc = nexar_barrier(p);
  if (rc != NEXAR_ERR_PEER_LOST) return rc;
  char why[300];
  snprintf(why, sizeof why, "%s", nexar_last_error());
  NX_WARN("view %llx: a member failed right after the commit (%s): recovering it",
          (unsigned long long)p->id, why);
  nexar_client *q = NULL;
  rc = nexar_recover(p, &q);
  if (rc) return rc;
  q->einfo.new_world = q->size;
  *pp = q;
  nexar_client_del(p);
  return 0;
}

int nx_view_commit(nexar_client **pp, uint64_t deadline_ns) {
  nexar_client *p = *pp;
  nx_ep *ep = p->ep;
  char why[300] = "";
  int dead = 0, ready = 0;
  pthread_mutex_lock(&ep->mu);
  nx_ep_wake(ep); /* the progress thread dials the new peers */
  for (;;) {
    if ((ready = links_up_locked(p, why, sizeof why, &dead)) || dead) break;
    uint64_t now = nx_now_ns();
    if (now >= deadline_ns) break;
    uint64_t wake = NX_MIN(now + 20000000ull, deadline_ns);
    struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
    pthread_cond_timedwait(&ep->cv, &ep->mu, &ts);
  }
  pthread_mutex_unlock(&ep->mu);
  if (!ready) NX_WARN("view %llx: not ready: %s", (unsigned long long)p->id, why);
  /* test hook: a participant dies once its connections are up, before its
   * readiness reaches the agreement (NEXAR_TEST_AGREE_EXIT=ready) */
  const char *hook = ep->knobs.test_agree_exit;
  if (ready && hook && strcmp(hook, "ready") == 0) _exit(9);
  uint8_t *gone = malloc(p->size);
  if (!gone) return nx_fail(NEXAR_ERR_NOMEM, "elastic view change");
  int outcome = 0;
  uint32_t flag = 0;
  char reason[128] = "";
  int rc = nx_agr_run(p, NX_AGR_KEY_RESIZE, (uint32_t)ready, &outcome, &flag, gone, reason,
                      sizeof reason);
  uint32_t first = UINT32_MAX;
  for (uint32_t i = 0; !rc && i < p->size && first == UINT32_MAX; i++)
    if (gone[i]) first = i;
  free(gone);
  if (rc) return rc;
  if (outcome == NX_AGREE_COMMITTED && first == UINT32_MAX && flag == 1) return settle(pp);
  if (outcome == NX_AGREE_EVICTED)
    return nx_fail(NEXAR_ERR_ABORTED,
                   "view change to comm %llx: the others declared this member failed",
                   (unsigned long long)p->id);
  /* TIMEOUT, not ABORTED: the old view stays usable (a collective that timed out) */
  if (outcome != NX_AGREE_COMMITTED)
    return nx_fail(NEXAR_ERR_TIMEOUT, "view change to comm %llx: %s%s%s", (unsigned long long)p->id,
                   reason, why[0] ? "; here: " : "", why);
  if (first != UINT32_MAX)
    return nx_fail(NEXAR_ERR_PEER_LOST,
                   "view change to comm %llx: rank %u (member %u at %s) failed before the commit",
                   (unsigned long long)p->id, first, p->members[first],
                   ep->peers[p->members[first]]->addrstr);
  return nx_fail(NEXAR_ERR_TIMEOUT,
                 "view change to comm %llx: a member could not reach all the others in time%s%s",
                 (unsigned long long)p->id, why[0] ? "; here: " : "", why);
}

/* Rank 0: the joiners the seed offers for the view after c (stayers, by comm
 * rank, m of them), as broadcast records; *k of them. */
static int ask_seed(nexar_client *c, const uint32_t *stay, uint32_t m, uint8_t **recs,
                    uint32_t *k) {
  nx_ep *ep = c->ep;
  *k = 0;
  *recs = NULL;
  uint32_t cap = c->cfg.elastic_max_world;
  nx_admit_req q = {.comm_id = c->id,
                    .epoch = c->epoch + 1,
                    .old_world = c->size,
                    .max_new = cap ? (cap > m ? cap - m : 0) : NX_BOOT_WORLD_MAX - m,
                    .n = m};
  if (q.max_new == 0) return 0;
  q.m = nx_calloc(m, sizeof *q.m);
  if (!q.m) return nx_fail(NEXAR_ERR_NOMEM, "elastic_checkpoint");
  pthread_mutex_lock(&ep->mu);
  for (uint32_t i = 0; i < m; i++) {
    const nx_peer *p = ep->peers[c->members[stay[i]]];
    q.m[i].id = c->members[stay[i]];
    snprintf(q.m[i].addr, NX_ADDR_MAX, "%s", p->addrstr);
    snprintf(q.m[i].host, NX_HOST_MAX, "%s", p->host);
  }
  pthread_mutex_unlock(&ep->mu);
  nx_admit_list al = {0};
  int rc = nx_seedlink_admit(ep->seedlink, &q, &al, 5000);
  free(q.m);
  if (rc) { /* the seed is gone or confused: this checkpoint goes on without joiners */
    NX_WARN("elastic_checkpoint on comm %llx: no admissions: %s", (unsigned long long)c->id,
            nexar_last_error());
    return 0;
  }
  if (al.n && !(*recs = nx_calloc(al.n, NX_JOINER_REC))) {
    nx_admit_list_free(&al);
    return nx_fail(NEXAR_ERR_NOMEM, "elastic_checkpoint");
  }
  for (uint32_t i = 0; i < al.n; i++) {
    memcpy(*recs + (size_t)i * NX_JOINER_REC, &al.m[i].id, 4);
    memcpy(*recs + (size_t)i * NX_JOINER_REC + 4, al.m[i].addr, NX_ADDR_MAX);
  }
  *k = al.n;
  nx_admit_list_free(&al);
  return 0;
}

/* Every member: the joiners rank 0 got, broadcast and checked (a member's
 * claims are not trusted either: ids must be new, addresses terminated). */
static int share_joiners(nexar_client *c, uint32_t m, uint8_t **recs, uint32_t *k) {
  int rc = nexar_broadcast(c, k, 1, NEXAR_U32, 0);
  if (rc) return rc;
  uint32_t cap = c->cfg.elastic_max_world ? c->cfg.elastic_max_world : NX_BOOT_WORLD_MAX;
  if (*k > NX_BOOT_WORLD_MAX - m || (*k && m + *k > cap && c->rank != 0))
    return nx_fail(NEXAR_ERR_PROTOCOL, "elastic_checkpoint on comm %llu: rank 0 offers %u joiners",
                   (unsigned long long)c->id, *k);
  if (*k == 0) return 0;
  if (!*recs && !(*recs = nx_calloc(*k, NX_JOINER_REC)))
    return nx_fail(NEXAR_ERR_NOMEM, "elastic_checkpoint");
  if ((rc = nexar_broadcast(c, *recs, (size_t)*k * NX_JOINER_REC, NEXAR_U8, 0))) return rc;
  for (uint32_t i = 0; i < *k; i++) {
    uint32_t id;
    const uint8_t *r = *recs + (size_t)i * NX_JOINER_REC;
    memcpy(&id, r, 4);
    int bad = id >= NX_PEER_ID_MAX || nx_comm_rank_of(c, id) != UINT32_MAX ||
              memchr(r + 4, 0, NX_ADDR_MAX) == NULL || r[4] == 0;
    for (uint32_t j = 0; j < i && !bad; j++)
      bad = memcmp(r, *recs + (size_t)j * NX_JOINER_REC, 4) == 0;
    if (bad)
      return nx_fail(NEXAR_ERR_PROTOCOL,
                     "elastic_checkpoint on comm %llu: joiner record %u is "
                     "invalid",
                     (unsigned long long)c->id, i);
  }
  return 0;
}

/* A stayer: adds the joiners, forms the prospective view and commits it. */
static int admit(nexar_client *c, const uint32_t *stay, uint32_t m, const uint8_t *recs, uint32_t k,
                 uint32_t left, nexar_client **out) {
  nx_ep *ep = c->ep;
  uint32_t n = m + k, *ids = malloc(n * sizeof *ids);
  if (!ids) return nx_fail(NEXAR_ERR_NOMEM, "elastic_checkpoint");
  for (uint32_t i = 0; i < m; i++)
    ids[i] = c->members[stay[i]];
  int rc = 0;
  pthread_mutex_lock(&ep->mu);
  for (uint32_t i = 0; i < k && !rc; i++) {
    memcpy(&ids[m + i], recs + (size_t)i * NX_JOINER_REC, 4);
    rc = nx_ep_add_peer_locked(ep, ids[m + i], (const char *)recs + (size_t)i * NX_JOINER_REC + 4);
  }
  pthread_mutex_unlock(&ep->mu);
  uint64_t epoch = c->epoch + 1, id = nx_view_id(c->id, epoch, ids, n);
  nexar_client *p = NULL;
  if (!rc) rc = nx_comm_new(ep, id, ids, n, c->members[c->rank], &c->cfg, epoch, c->id, &p);
  free(ids);
  uint32_t t = c->cfg.elastic_checkpoint_timeout_ms;
  if (!rc) rc = nx_view_commit(&p, nx_now_ns() + (t ? t : 3600000u) * 1000000ull);
  if (rc) {
    char err[400];
    snprintf(err, sizeof err, "%s", nexar_last_error());
    nexar_client_del(p);
    return nx_fail(rc, "%s", err);
  }
  nx_view_inherit(c, p);
  /* what changed against c (p may be a recovery of the committed view, if a
   * joiner died right after the commit: it is then neither joined nor left) */
  uint32_t gone = n - p->size;
  p->einfo.old_world = c->size;
  p->einfo.new_world = p->size;
  p->einfo.joined = k - NX_MIN(gone, k);
  p->einfo.left = left + (gone > k ? gone - k : 0);
  p->einfo.old_rank = c->rank;
  *out = p;
  return 0;
}

int nexar_elastic_checkpoint(nexar_client *c, nexar_client **out) {
  if (out) *out = NULL;
  if (!c || !out) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "elastic_checkpoint: NULL argument");
  int rc = nx_comm_check(c, "elastic_checkpoint");
  if (rc) return rc;
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  int busy = nx_coll_inflight_locked(c);
  uint64_t k = ++c->checkpoints;
  pthread_mutex_unlock(&ep->mu);
  if (busy)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "elastic_checkpoint on comm %llu: a non-blocking collective is in flight",
                   (unsigned long long)c->id);
  uint32_t leaving = (uint32_t)atomic_load(&c->leave);
  /* every rank drains its seed channel (the notices would pile up in it);
   * only the coordinator's says whether to ask for joiners */
  int waiting = nx_seedlink_poll(ep->seedlink);
  uint32_t mine = leaving | (c->rank == 0 && waiting ? 2u : 0u);
  uint32_t *flags = malloc(c->size * sizeof *flags), *stay = malloc(c->size * sizeof *stay);
  uint8_t *recs = NULL;
  if (!flags || !stay) {
    free(flags), free(stay);
    return nx_fail(NEXAR_ERR_NOMEM, "elastic_checkpoint");
  }
  rc = nexar_all_gather(c, &mine, flags, 1, NEXAR_U32);
  uint32_t m = 0, left = 0, njoin = 0;
  for (uint32_t r = 0; r < c->size && !rc; r++) {
    if (flags[r] > (r == 0 ? 3u : 1u))
      rc = nx_fail(NEXAR_ERR_PROTOCOL, "elastic_checkpoint on comm %llu: rank %u sent flag %u",
                   (unsigned long long)c->id, r, flags[r]);
    else if (flags[r] & 1)
      left++;
    else
      stay[m++] = r;
  }
  uint32_t min = c->cfg.elastic_min_world ? c->cfg.elastic_min_world : 1;
  if (!rc && left && m < min)
    rc = nx_fail(NEXAR_ERR_ABORTED,
                 "elastic_checkpoint #%llu on comm %llu: %u of %u ranks leaving would leave %u, "
                 "below elastic_min_world %u; the view stays",
                 (unsigned long long)k, (unsigned long long)c->id, left, c->size, m, min);
  if (!rc && (flags[0] & 2) && m > 0) {
    if (c->rank == 0 && (rc = ask_seed(c, stay, m, &recs, &njoin))) njoin = 0;
    int brc = share_joiners(c, m, &recs, &njoin);
    if (!rc) rc = brc;
  }
  nexar_client *child = NULL;
  int changed = !rc && (left || njoin);
  if (changed && !leaving && njoin) {
    int arc = admit(c, stay, m, recs, njoin, left, &child);
    if (arc && !left) rc = arc; /* the old view stays: the error says who failed */
    if (arc && left)
      NX_WARN("elastic_checkpoint #%llu: the joiners were not admitted (%s); the leavers go",
              (unsigned long long)k, nexar_last_error());
    changed = !arc || left;
  }
  if (changed && !leaving && !child) { /* departures only */
    uint64_t epoch = c->epoch + 1;
    rc = nx_comm_derive_view(c, nx_view_successor_id(c, epoch, stay, m), stay, m, epoch, &child);
    if (!rc) {
      nx_view_inherit(c, child);
      child->einfo.old_world = c->size;
      child->einfo.new_world = m;
      child->einfo.left = left;
      child->einfo.old_rank = c->rank;
    }
  }
  if (!rc && changed) { /* the old view takes only queries and del from now on */
    pthread_mutex_lock(&ep->mu);
    snprintf(c->abort_why, sizeof c->abort_why, "%s at checkpoint %llu",
             leaving ? "left" : "resized", (unsigned long long)k);
    atomic_store(&c->aborted, 1);
    pthread_mutex_unlock(&ep->mu);
  }
  free(flags);
  free(stay);
  free(recs);
  *out = child;
  return rc;
}
