/* Membership changes: rebuild_excluding (survivors build a communicator
 * without the dead), recover (the same after the survivors agree on the dead
 * set), and the elastic checkpoint calls. */
#include <stdlib.h>
#include <string.h>

#include "runtime/coll_port.h"
#include "proto/agree.h"
#include "runtime/comm.h"
#include "cluster/view.h"

/* 64-bit FNV-1a: the child id and the dead-set fingerprint. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* Copies c's RPC handlers and failure callback to its successor, and says
 * what the change did (ranks lost to failure count as left; a resize
 * overwrites joined and left). */
void nx_view_inherit(nexar_client *c, nexar_client *child) {
  child->einfo.old_world = c->size;
  child->einfo.left = c->size > child->size ? c->size - child->size : 0;
  child->einfo.old_rank = c->rank;
  pthread_mutex_lock(&c->ep->mu);
  if (c->nhandlers) {
    child->handlers = malloc(c->nhandlers * sizeof *c->handlers);
    if (child->handlers) {
      memcpy(child->handlers, c->handlers, c->nhandlers * sizeof *c->handlers);
      child->nhandlers = child->caphandlers = c->nhandlers;
    }
  }
  child->on_failure = c->on_failure;
  child->on_failure_ctx = c->on_failure_ctx;
  pthread_mutex_unlock(&c->ep->mu);
}

uint64_t nx_view_id(uint64_t pred_id, uint64_t epoch, const uint32_t *ids, uint32_t n) {
  uint64_t h = fnv(0xcbf29ce484222325ull, &pred_id, sizeof pred_id);
  h = fnv(h, "view", 4);
  h = fnv(h, &epoch, sizeof epoch);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t id = ids[i];
    h = fnv(h, &id, sizeof id);
  }
  return h ? h : 1;
}

uint64_t nx_view_successor_id(const nexar_client *c, uint64_t epoch, const uint32_t *members,
                              uint32_t m) {
  uint32_t *ids = malloc((m ? m : 1) * sizeof *ids);
  if (!ids) return 0;
  for (uint32_t i = 0; i < m; i++)
    ids[i] = c->members[members[i]];
  uint64_t h = nx_view_id(c->id, epoch, ids, m);
  free(ids);
  return h;
}

int nexar_rebuild_excluding(nexar_client *c, const uint32_t *dead, size_t n, nexar_client **out) {
  if (out) *out = NULL;
  if (!c || !out || (n && !dead))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "rebuild_excluding: NULL argument");
  if (atomic_load(&c->aborted))
    return nx_fail(NEXAR_ERR_ABORTED, "rebuild_excluding on comm %llu: aborted",
                   (unsigned long long)c->id);
  uint32_t *d = malloc((n ? n : 1) * sizeof *d);
  uint32_t *members = malloc(c->size * sizeof *members);
  if (!d || !members) {
    free(d), free(members);
    return nx_fail(NEXAR_ERR_NOMEM, "rebuild_excluding");
  }
  if (n) memcpy(d, dead, n * sizeof *d);
  qsort(d, n, sizeof *d, cmp_u32);
  int rc = 0;
  for (size_t i = 0; i < n && !rc; i++) {
    if (d[i] >= c->size)
      rc = nx_fail(NEXAR_ERR_INVALID_RANK, "rebuild_excluding: rank %u of %u", d[i], c->size);
    else if (d[i] == c->rank)
      rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "rebuild_excluding: the caller (rank %u) is in "
                   "the dead set",
                   c->rank);
    else if (i && d[i] == d[i - 1])
      rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "rebuild_excluding: rank %u listed twice", d[i]);
  }
  uint32_t m = 0;
  for (uint32_t r = 0, j = 0; r < c->size && !rc; r++) {
    if (j < n && d[j] == r)
      j++;
    else
      members[m++] = r;
  }
  /* every survivor derives the same id from the parent and the dead set */
  uint64_t h = fnv(0xcbf29ce484222325ull, &c->id, sizeof c->id);
  h = fnv(h, "rebuild", 7);
  h = fnv(h, d, n * sizeof *d);
  if (h == 0) h = 1;
  nexar_client *child = NULL;
  if (!rc) rc = nx_comm_derive_view(c, h, members, m, c->epoch + 1, &child);
  if (!rc) {
    nx_view_inherit(c, child);
    /* the survivors must have passed the same set: compare fingerprints */
    uint64_t mine = h, *all = malloc(m * sizeof *all);
    if (!all)
      rc = nx_fail(NEXAR_ERR_NOMEM, "rebuild_excluding");
    else if ((rc = nexar_all_gather(child, &mine, all, 1, NEXAR_U64)) == 0) {
      for (uint32_t i = 0; i < m && !rc; i++)
        if (all[i] != mine)
          rc = nx_fail(NEXAR_ERR_MISMATCH,
                       "rebuild_excluding on comm %llu: rank %u passed "
                       "another dead set",
                       (unsigned long long)c->id, members[i]);
    }
    free(all);
    if (rc) {
      char err[256];
      snprintf(err, sizeof err, "%s", nexar_last_error());
      nexar_client_del(child);
      child = NULL;
      nx_set_error_text(err);
    }
  }
  free(d);
  free(members);
  *out = child;
  return rc;
}

int nexar_recover(nexar_client *c, nexar_client **out) {
  if (out) *out = NULL;
  if (!c || !out) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "recover: NULL argument");
  if (c->cfg.recovery_policy == NEXAR_RECOVERY_ABORT)
    return nx_fail(NEXAR_ERR_ABORTED, "recover on comm %llu: the recovery policy is abort",
                   (unsigned long long)c->id);
  if (atomic_load(&c->aborted))
    return nx_fail(NEXAR_ERR_ABORTED, "recover on comm %llu: aborted here (%s)",
                   (unsigned long long)c->id, c->abort_why);
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  int again = c->recovered;
  char why[96];
  snprintf(why, sizeof why, "nexar_recover on rank %u", c->rank);
  nx_comm_revoke_locked(c, 1, why); /* everyone stops using the old view */
  char part[256];
  int split = nx_relay_partitioned_locked(ep, c, part, sizeof part) > 0;
  pthread_mutex_unlock(&ep->mu);
  if (split)
    return nx_fail(NEXAR_ERR_ABORTED, "recover on comm %llu: %s", (unsigned long long)c->id, part);
  if (again)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "recover on comm %llu: its successor exists already (recover that one)",
                   (unsigned long long)c->id);
  uint8_t *dead = malloc(c->size);
  uint32_t *members = malloc(c->size * sizeof *members);
  if (!dead || !members) {
    free(dead), free(members);
    return nx_fail(NEXAR_ERR_NOMEM, "recover");
  }
  int outcome = 0;
  uint32_t flag = 0;
  char reason[128] = "";
  int rc = nx_agr_run(c, 0, 1, &outcome, &flag, dead, reason, sizeof reason);
  uint32_t m = 0;
  if (!rc && outcome == NX_AGREE_EVICTED)
    rc = nx_fail(NEXAR_ERR_PEER_LOST,
                 "recover on comm %llu: rank %u was declared failed at epoch %llu by the "
                 "survivors' agreement",
                 (unsigned long long)c->id, c->rank, (unsigned long long)c->epoch);
  else if (!rc && outcome != NX_AGREE_COMMITTED)
    rc = nx_fail(NEXAR_ERR_ABORTED, "recover on comm %llu at epoch %llu: %s",
                 (unsigned long long)c->id, (unsigned long long)c->epoch,
                 reason[0] ? reason : "no successor view formed");
  for (uint32_t r = 0; r < c->size && !rc; r++)
    if (!dead[r]) members[m++] = r;
  nexar_client *child = NULL;
  if (!rc) {
    uint64_t epoch = c->epoch + 1;
    rc = nx_comm_derive_view(c, nx_view_successor_id(c, epoch, members, m), members, m, epoch,
                             &child);
  }
  if (!rc) {
    nx_view_inherit(c, child);
    pthread_mutex_lock(&ep->mu);
    c->recovered = 1;
    pthread_mutex_unlock(&ep->mu);
    NX_INFO("comm %llu rank %u: recovered to comm %llu epoch %llu, %u of %u members",
            (unsigned long long)c->id, c->rank, (unsigned long long)child->id,
            (unsigned long long)child->epoch, m, c->size);
  }
  free(dead);
  free(members);
  *out = child;
  return rc;
}

int nexar_agree(nexar_client *c, uint32_t *flag) {
  if (!c || !flag) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "agree: NULL argument");
  if (atomic_load(&c->aborted))
    return nx_fail(NEXAR_ERR_ABORTED, "agree on comm %llu: aborted here (%s)",
                   (unsigned long long)c->id, c->abort_why);
  pthread_mutex_lock(&c->ep->mu);
  uint64_t key = ++c->agree_seq;
  pthread_mutex_unlock(&c->ep->mu);
  uint8_t *dead = malloc(c->size);
  if (!dead) return nx_fail(NEXAR_ERR_NOMEM, "agree");
  int outcome = 0;
  uint32_t agreed = 0;
  char reason[128] = "";
  int rc = nx_agr_run(c, key, *flag, &outcome, &agreed, dead, reason, sizeof reason);
  if (!rc && outcome == NX_AGREE_EVICTED)
    rc = nx_fail(NEXAR_ERR_PEER_LOST,
                 "agree #%llu on comm %llu: rank %u was declared failed by the others",
                 (unsigned long long)key, (unsigned long long)c->id, c->rank);
  else if (!rc && outcome != NX_AGREE_COMMITTED)
    rc = nx_fail(NEXAR_ERR_ABORTED, "agree #%llu on comm %llu: %s", (unsigned long long)key,
                 (unsigned long long)c->id, reason[0] ? reason : "no decision");
  if (!rc) {
    *flag = agreed;
    uint32_t first = UINT32_MAX;
    for (uint32_t r = 0; r < c->size && first == UINT32_MAX; r++)
      if (dead[r]) first = r;
    if (first != UINT32_MAX)
      rc = nx_fail(NEXAR_ERR_PEER_LOST,
                   "agree #%llu on comm %llu: rank %u did not contribute (dead); the flag is "
                   "the others' AND",
                   (unsigned long long)key, (unsigned long long)c->id, first);
  }
  free(dead);
  return rc;
}
