/* Membership changes: rebuild_excluding (survivors build a communicator
 * without the dead), recover (the same after the survivors agree on the dead
 * set), and the elastic checkpoint calls. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/coll_port.h"
#include "runtime/comm.h"

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
  if (!rc) rc = nx_comm_derive(c, h, members, m, &child);
  if (!rc) { /* inherit RPC handlers and the failure callback */
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
  /* The dead set is this rank's view once it has been stable for a
   * heartbeat timeout (every survivor detects the same deaths within that
   * bound); rebuild_excluding then checks that all survivors hold the same
   * set and fails with MISMATCH otherwise. This is not a consensus protocol:
   * a false suspicion gives MISMATCH, not a vote. */
  uint64_t settle = (uint64_t)c->cfg.heartbeat_timeout_ms * 1000000ull;
  uint64_t deadline = c->cfg.recovery_timeout_ms
                          ? nx_now_ns() + (uint64_t)c->cfg.recovery_timeout_ms * 1000000ull
                          : 0;
  size_t n = 0, last = (size_t)-1;
  uint64_t since = nx_now_ns();
  uint32_t *dead = malloc(c->size * sizeof *dead);
  if (!dead) return nx_fail(NEXAR_ERR_NOMEM, "recover");
  for (;;) {
    nexar_failed_ranks(c, dead, c->size, &n);
    if (n != last) last = n, since = nx_now_ns();
    if (n && nx_now_ns() - since >= settle) break;
    if (deadline && nx_now_ns() > deadline) {
      free(dead);
      return nx_fail(NEXAR_ERR_TIMEOUT, "recover on comm %llu: %s within %u ms",
                     (unsigned long long)c->id,
                     n ? "the dead set did not settle" : "no failure to recover from",
                     c->cfg.recovery_timeout_ms);
    }
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  int rc = nexar_rebuild_excluding(c, dead, n, out);
  free(dead);
  return rc;
}

int nexar_elastic_checkpoint(nexar_client *c, nexar_client **out) {
  if (out) *out = NULL;
  return nx_fail(c && out ? NEXAR_ERR_UNSUPPORTED : NEXAR_ERR_INVALID_ARGUMENT,
                 "elastic_checkpoint: elastic membership is not implemented yet");
}

int nexar_elastic_leave(nexar_client *c) {
  return nx_fail(c ? NEXAR_ERR_UNSUPPORTED : NEXAR_ERR_INVALID_ARGUMENT,
                 "elastic_leave: elastic membership is not implemented yet");
}
