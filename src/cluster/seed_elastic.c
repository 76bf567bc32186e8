/* The seed after formation: admission of joiners into a running world.
 *
 * A worker that arrives once the world has formed is authenticated as any
 * (token, CSR) and gets a member id that was never used (ids continue after
 * the first world), a certificate bound to it, and a place in the queue in
 * arrival order. Members keep their seed channel open after formation; the
 * seed tells every one of them when a joiner queues (WAITING). At a
 * checkpoint the coordinator of the current view sends ADMIT_REQ (the
 * staying members with their addresses, and room for max_new); the seed takes
 * queued joiners in arrival order up to that room and elastic_max_world,
 * answers ADMIT_LIST with them, and hands each its VIEW (the view it is
 * offered) and WELCOME (its id, the member table: empty entries for ids
 * outside the view). A queued joiner is told so at once (WAITING). Whether that view is installed
 * is the members' and joiners' own two-phase decision; the seed is not asked again. An admitted
 * joiner is served as a member from then on (it may become a coordinator). */
#include <stdlib.h>
#include <string.h>

#include "cluster/seed_int.h"

#define NX_SEED_POLL_MS 50

/* Checks a Hello that arrived after formation; 0 or a refusal code + why. */
static int check_late_hello(const nexar_seed *s, const nx_hello *h, char *why, size_t cap) {
  if (h->requested_rank != NX_BOOT_ANY_RANK) {
    snprintf(why, cap, "rank %u requested, but the world has formed: joiners get the next free id",
             h->requested_rank);
    return NEXAR_ERR_INVALID_RANK;
  }
  if (h->topology != (uint32_t)s->cfg.topology || h->topology_degree != s->cfg.topology_degree) {
    snprintf(why, cap, "topology %u/%u differs from the seed's %u/%u", h->topology,
             h->topology_degree, (unsigned)s->cfg.topology, s->cfg.topology_degree);
    return NEXAR_ERR_MISMATCH;
  }
  if (s->next_id >= NX_BOOT_WORLD_MAX) {
    snprintf(why, cap, "member ids are exhausted (%u)", NX_BOOT_WORLD_MAX);
    return NEXAR_ERR_UNSUPPORTED;
  }
  return 0;
}

void nx_seed_late_joiner(nexar_seed *s, joiner *j, nx_chan *ch, const char *peer) {
  char why[200];
  pthread_mutex_lock(&s->mu);
  int code = check_late_hello(s, &j->hello, why, sizeof why);
  if (!code) {
    uint32_t id = s->next_id;
    code = nx_ca_sign(s->ca, j->hello.csr, j->hello.csr_len, id, &j->cert, &j->cert_len);
    if (code)
      snprintf(why, sizeof why, "cannot sign its certificate: %s", nexar_last_error());
    else {
      s->next_id++;
      j->rank = id;
      j->late = 1;
      j->arrival = s->arrivals++;
      s->waiting_gen++;
      NX_INFO("seed: %s queued to join as member %u", j->hello.listen_addr, id);
      pthread_cond_broadcast(&s->cv);
    }
  }
  pthread_mutex_unlock(&s->mu);
  if (code) {
    NX_WARN("seed: refusing joiner %s: %s", peer, why);
    nx_seed_refuse(ch, code, why);
    return;
  }
  /* queued (the joiner is told, so it waits elastic_checkpoint_timeout_ms
   * instead of its formation deadline): wait for a checkpoint to take it, or
   * for it to give up */
  uint8_t *buf = NULL;
  size_t len = 0;
  int qrc = nx_waiting_encode(&buf, &len);
  if (!qrc) qrc = nx_chan_send(ch, buf, len, 5000);
  free(buf);
  pthread_mutex_lock(&s->mu);
  if (qrc) j->late = 0; /* it cannot hear us: out of the queue */
  while (j->late && !j->offered && !s->stop) {
    pthread_mutex_unlock(&s->mu);
    int gone = nx_chan_closed(ch);
    pthread_mutex_lock(&s->mu);
    if (gone && !j->offered) {
      j->late = 0; /* out of the queue */
      NX_INFO("seed: queued joiner %s (member %u) left", peer, j->rank);
      pthread_mutex_unlock(&s->mu);
      return;
    }
    if (!j->offered) nx_seed_timed_wait_locked(s, NX_SEED_POLL_MS);
  }
  int offered = j->offered;
  pthread_mutex_unlock(&s->mu);
  if (!offered) return;
  int rc = nx_chan_send(ch, j->offer_view, j->offer_vlen, 10000);
  if (!rc) rc = nx_chan_send(ch, j->offer_welcome, j->offer_wlen, 10000);
  if (rc) {
    NX_WARN("seed: admission of member %u (%s) failed: %s", j->rank, peer, nexar_last_error());
    return;
  }
  nx_seed_member_loop(s, j, ch, peer);
}

/* The offer for joiner j: its WELCOME over the table of the stayers and the
 * taken joiners, and the VIEW. Under s->mu. */
static int make_offer_locked(nexar_seed *s, joiner *j, const nx_admit_req *q, joiner **taken,
                             uint32_t k) {
  uint32_t len = 0;
  for (uint32_t i = 0; i < q->n; i++)
    if (q->m[i].id + 1 > len) len = q->m[i].id + 1;
  for (uint32_t i = 0; i < k; i++)
    if (taken[i]->rank + 1 > len) len = taken[i]->rank + 1;
  char(*addrs)[NX_ADDR_MAX] = nx_calloc(len, sizeof *addrs);
  char(*hosts)[NX_HOST_MAX] = nx_calloc(len, sizeof *hosts);
  uint32_t *ids = nx_calloc((size_t)q->n + k, sizeof *ids);
  int rc = addrs && hosts && ids ? 0 : nx_fail(NEXAR_ERR_NOMEM, "seed: admission");
  for (uint32_t i = 0; !rc && i < q->n; i++) {
    snprintf(addrs[q->m[i].id], NX_ADDR_MAX, "%s", q->m[i].addr);
    snprintf(hosts[q->m[i].id], NX_HOST_MAX, "%s", q->m[i].host);
    ids[i] = q->m[i].id;
  }
  for (uint32_t i = 0; !rc && i < k; i++) {
    snprintf(addrs[taken[i]->rank], NX_ADDR_MAX, "%s", taken[i]->hello.listen_addr);
    snprintf(hosts[taken[i]->rank], NX_HOST_MAX, "%s", taken[i]->hello.hostname);
    ids[q->n + i] = taken[i]->rank;
  }
  if (!rc) {
    nx_welcome w = {.rank = j->rank,
                    .world_size = len,
                    .ca_cert = s->ca_der,
                    .ca_len = s->ca_len,
                    .cert = j->cert,
                    .cert_len = j->cert_len,
                    .addrs = addrs,
                    .hosts = hosts};
    memcpy(w.cluster_id, s->cluster_id, 16);
    nx_view_msg v = {.comm_id = q->comm_id,
                     .epoch = q->epoch,
                     .old_world = q->old_world,
                     .nstay = q->n,
                     .n = q->n + k,
                     .ids = ids};
    rc = nx_welcome_encode(&w, &j->offer_welcome, &j->offer_wlen);
    if (!rc) rc = nx_view_encode(&v, &j->offer_view, &j->offer_vlen);
  }
  free(addrs);
  free(hosts);
  free(ids);
  return rc;
}

/* Answers one ADMIT_REQ: takes queued joiners in arrival order. */
static int admit_locked(nexar_seed *s, const nx_admit_req *q, nx_admit_list *out) {
  uint32_t room = q->max_new, queued = 0;
  uint32_t cap = s->cfg.elastic_max_world;
  if (cap) room = cap > q->n ? NX_MIN(room, cap - q->n) : 0;
  for (joiner *j = s->joiners; j; j = j->next)
    queued += j->late && !j->offered;
  room = NX_MIN(room, queued); /* the table below is sized by who can be taken */
  joiner **taken = nx_calloc(room ? room : 1, sizeof *taken);
  if (!taken) return nx_fail(NEXAR_ERR_NOMEM, "seed: admission");
  uint32_t k = 0;
  for (uint32_t a = 0; a < s->arrivals && k < room; a++)
    for (joiner *j = s->joiners; j && k < room; j = j->next)
      if (j->late && !j->offered && j->arrival == a) taken[k++] = j;
  out->n = 0;
  out->m = nx_calloc(k ? k : 1, sizeof *out->m);
  int rc = out->m ? 0 : nx_fail(NEXAR_ERR_NOMEM, "seed: admission");
  for (uint32_t i = 0; !rc && i < k; i++)
    rc = make_offer_locked(s, taken[i], q, taken, k);
  for (uint32_t i = 0; !rc && i < k; i++) {
    joiner *j = taken[i];
    j->offered = 1;
    out->m[i].id = j->rank;
    snprintf(out->m[i].addr, NX_ADDR_MAX, "%s", j->hello.listen_addr);
    snprintf(out->m[i].host, NX_HOST_MAX, "%s", j->hello.hostname);
    out->n++;
    NX_INFO("seed: offering member %u (%s) to the view after comm %llx", j->rank,
            j->hello.listen_addr, (unsigned long long)q->comm_id);
  }
  if (rc)
    for (uint32_t i = 0; i < k; i++) {
      free(taken[i]->offer_welcome), free(taken[i]->offer_view);
      taken[i]->offer_welcome = taken[i]->offer_view = NULL;
    }
  if (k) pthread_cond_broadcast(&s->cv);
  free(taken);
  return rc;
}

static int queued_locked(const nexar_seed *s) {
  for (const joiner *j = s->joiners; j; j = j->next)
    if (j->late && !j->offered) return 1;
  return 0;
}

/* Sends what an encoder made (rc is the encoder's), then frees it. */
static int send_encoded(nx_chan *ch, int rc, uint8_t *buf, size_t len) {
  if (rc) return rc;
  rc = nx_chan_send(ch, buf, len, 5000);
  free(buf);
  return rc;
}

void nx_seed_member_loop(nexar_seed *s, joiner *j, nx_chan *ch, const char *peer) {
  uint64_t told = 0;
  for (;;) {
    pthread_mutex_lock(&s->mu);
    int stop = s->stop;
    uint64_t gen = s->waiting_gen;
    int tell = gen != told && queued_locked(s);
    pthread_mutex_unlock(&s->mu);
    if (stop) return;
    uint8_t *buf = NULL;
    size_t len = 0;
    if (tell) {
      told = gen;
      int erc = nx_waiting_encode(&buf, &len); /* before buf and len are read */
      if (send_encoded(ch, erc, buf, len)) return;
    }
    void *msg = NULL;
    int rc = nx_chan_recv(ch, &msg, &len, NX_SEED_POLL_MS);
    if (rc == NEXAR_ERR_TIMEOUT) continue;
    if (rc) return; /* the member is gone (or left): nothing more to serve */
    nx_admit_req q;
    if (nx_admit_req_decode(msg, len, &q) != 0) {
      NX_WARN("seed: member %u (%s) sent an unexpected message: %s", j->rank, peer,
              nexar_last_error());
      free(msg);
      return;
    }
    free(msg);
    nx_admit_list al = {0};
    pthread_mutex_lock(&s->mu);
    rc = admit_locked(s, &q, &al);
    pthread_mutex_unlock(&s->mu);
    nx_admit_req_free(&q);
    if (rc) al.n = 0; /* nobody offered: the checkpoint goes on without joiners */
    rc = nx_admit_list_encode(&al, &buf, &len);
    rc = send_encoded(ch, rc, buf, len);
    nx_admit_list_free(&al);
    if (rc) return;
  }
}
