/* The communicator's shared-memory segment set up (segcoll.c runs the
 * collectives through it). Setup is itself collective, at fixed points of a
 * communicator's order of blocking collectives (calls 1, 2, 4, 8, ... up to
 * 65536, until a segment is up), so every rank decides the same: an all_reduce (MIN) of "every
 * member is a proven same-host peer with its lane up"; then rank 0 creates the segment and offers
 * it over each lane, and an all_reduce (MIN) of "mapped" makes it live from the next collective on.
 * A communicator whose members' addresses are not all one host's never attempts (no traffic). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collective/coll.h"
#include "runtime/comm.h"
#include "runtime/cseg.h"
#include "runtime/engine.h"

/* The host part of "host:port" (or "[v6]:port"): its length. */
static size_t host_len(const char *addr) {
  const char *colon = strrchr(addr, ':');
  return colon ? (size_t)(colon - addr) : strlen(addr);
}

/* From what every rank knows alike (the address table, the topology, the
 * knobs of the job): could all members be on one host? */
static int candidate(nexar_client *c) {
  nx_ep *ep = c->ep;
  if (c->size < 2 || !ep->knobs.shm || !ep->knobs.shm_coll || !ep->knobs.lane || ep->route.topology)
    return 0;
  pthread_mutex_lock(&ep->mu);
  /* the address table as the seed handed it out, the same on every rank */
  const char *a0 = ep->peers[c->members[0]]->addrstr;
  size_t n0 = host_len(a0);
  int ok = n0 > 0;
  for (uint32_t i = 1; i < c->size && ok; i++) {
    const char *ai = ep->peers[c->members[i]]->addrstr;
    ok = host_len(ai) == n0 && !memcmp(ai, a0, n0);
  }
  pthread_mutex_unlock(&ep->mu);
  return ok;
}

/* 0 no segment; 1 a segment; 2 one with single copy: every member read our
 * memory (the rendezvous' proof), so the minimum over ranks says every
 * member may read every other's. */
static int lanes_up(nexar_client *c) {
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  int ok = 1;
  for (uint32_t i = 0; i < c->size && ok; i++) {
    const nx_peer *p = ep->peers[c->members[i]];
    if (i == c->rank) continue;
    ok = p->same_host && p->lane_ok && p->state == NX_PEER_UP && !p->relayed;
    /* a lane means the peer read our memory and sent SHM_OK with its lane
     * hello; that comes by QUIC, often after the lane's ping: not yet, or
     * the segment would be made without single copy for good */
    if (ok && (!p->shm_ok || p->shm_pid <= 0)) ok = 0;
  }
  pthread_mutex_unlock(&ep->mu);
  return ok ? 2 : 0;
}

/* The process of every member, as its lane proved it: single copy reads
 * from there. 0, or -1 (out of memory: no single copy). */
static int take_pids(nexar_client *c, nx_cseg *s) {
  nx_ep *ep = c->ep;
  if (!(s->pid = calloc(c->size, sizeof *s->pid))) return -1;
  pthread_mutex_lock(&ep->mu);
  for (uint32_t i = 0; i < c->size; i++)
    s->pid[i] = i == c->rank ? getpid() : ep->peers[c->members[i]]->shm_pid;
  pthread_mutex_unlock(&ep->mu);
  s->cma = 1;
  return 0;
}

static int agree_min(nexar_client *c, int32_t *v) {
  nx_job j = {.kind = NX_COLL_ALL_REDUCE,
              .c = c,
              .buf = v,
              .count = 1,
              .dt = NEXAR_I32,
              .op = NEXAR_MIN,
              .host_only = 1,
              .no_seg = 1};
  return nx_coll_call(&j);
}

static nx_cseg *take_offer(nexar_client *c, uint64_t attempt) {
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  nx_cseg *s = c->cseg_offer;
  if (s && s->attempt == attempt)
    c->cseg_offer = NULL;
  else
    s = NULL;
  pthread_mutex_unlock(&ep->mu);
  return s;
}

/* One attempt (every rank at the same point of the order). Errors of the
 * two all_reduces are the caller's (a peer lost fails them as it would
 * fail the call); anything else just leaves the communicator without a
 * segment. */
static int attempt(nexar_client *c, uint64_t id) {
  int32_t ok = lanes_up(c);
  int rc = agree_min(c, &ok);
  NX_DEBUG("comm %llu rank %u: segment attempt %llu: lanes %d (rc %d)", (unsigned long long)c->id,
           c->rank, (unsigned long long)id, ok, rc);
  if (rc || !ok) return rc;
  int cma = ok == 2;
  nx_cseg *s = NULL;
  ok = 1;
  if (c->rank == 0) {
    int fd = -1;
    if (nx_cseg_create(c->id, c->size, id, &fd, &s)) ok = 0;
    for (uint32_t i = 1; i < c->size && ok; i++)
      if (nx_cseg_offer(c, c->members[i], id, fd)) ok = 0;
    if (fd >= 0) close(fd);
  } else {
    uint64_t until = nx_now_ns() + 1000000000ull; /* it was sent before rank 0 answered */
    while (!(s = take_offer(c, id)) && nx_now_ns() < until)
      usleep(50);
    ok = s != NULL;
  }
  if (ok && cma && take_pids(c, s)) ok = 0;
  rc = agree_min(c, &ok);
  NX_DEBUG("comm %llu rank %u: segment attempt %llu: mapped %d (rc %d)", (unsigned long long)c->id,
           c->rank, (unsigned long long)id, ok, rc);
  if (!rc && ok) {
    c->cseg = s; /* every rank mapped it: live from the next collective */
    NX_DEBUG("comm %llu: collective segment up (%u ranks)", (unsigned long long)c->id, c->size);
  } else {
    nx_cseg_free(s);
  }
  return rc;
}

int nx_segcoll_prepare(nexar_client *c) {
  uint64_t calls = ++c->cseg_calls;
  if (c->cseg || c->cseg_never || (calls & (calls - 1)) || calls > 65536) return 0;
  if (calls == 1 && !candidate(c)) c->cseg_never = 1;
  return c->cseg_never ? 0 : attempt(c, calls);
}
