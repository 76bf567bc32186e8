/* The runtime side of collectives: sequence numbers, signatures checked on
 * every frame (mismatch detection on every rank), keyed non-blocking
 * send/recv, failure propagation, and dropping late frames. */
#include <stdlib.h>
#include <string.h>

#include "runtime/coll_port.h"
#include "runtime/comm.h"
#include "runtime/cseg.h"
#include "runtime/request.h"

struct nx_active_coll {
  nx_active_coll *next;
  uint64_t seq;
  nx_coll_sig sig;
  /* written under ep->mu (after why); atomic so that the collective's own
   * thread may look without the lock (nx_coll_failed) */
  _Atomic int failed_rc;
  /* Ended well by nx_coll_end_quick, without ep->mu: still linked, no
   * longer in flight; the communicator's next begin retires it. Everything
   * that looks at the list for collectives in flight skips it (live()). */
  _Atomic int ended;
  char why[240];
  nx_coll *k;
};

struct nx_coll {
  nexar_client *c;
  uint64_t log_id;
  nx_active_coll ac;
  nexar_request **reqs; /* outstanding, so a failure can cancel them */
  size_t nreqs, capreqs;
  void (*watch)(void *arg); /* completion hook of every request */
  void *watch_arg;
  int fast;  /* begun without ep->mu, not registered (nx_coll_begin_seg) */
  int clean; /* its begin found c clear for the next to begin so */
};

static const char *op_name(uint8_t op) {
  static const char *names[] = {"?",
                                "all_reduce",
                                "broadcast",
                                "all_gather",
                                "reduce_scatter",
                                "reduce",
                                "all_to_all",
                                "gather",
                                "scatter",
                                "scan",
                                "exclusive_scan",
                                "barrier",
                                "all_reduce_bucketed",
                                "all_reduce_rs_ag",
                                "split",
                                "all_gather_v",
                                "reduce_scatter_v",
                                "all_to_all_v",
                                "gather_v",
                                "scatter_v"};
  return op < sizeof names / sizeof *names ? names[op] : "?";
}

void nx_coll_describe(char *buf, size_t cap, uint8_t op, uint8_t dt, uint8_t redop, uint32_t root,
                      uint64_t count) {
  if (op == NX_COLL_ALL_GATHER_V || op == NX_COLL_REDUCE_SCATTER_V)
    snprintf(buf, cap, "%s(counts hash=%llx, dtype=%s, op=%s)", op_name(op),
             (unsigned long long)count, nexar_dtype_name((nexar_dtype)dt),
             nexar_op_name((nexar_op)redop));
  else
    snprintf(buf, cap, "%s(count=%llu, dtype=%s, op=%s, root=%u)", op_name(op),
             (unsigned long long)count, nexar_dtype_name((nexar_dtype)dt),
             nexar_op_name((nexar_op)redop), root);
}

static int sig_equal(const nx_frame *f, const nx_coll_sig *s) {
  return f->coll_op == s->op && f->dtype == s->dtype && f->redop == s->redop &&
         f->root == s->root && f->count == s->count;
}

static int live(const nx_active_coll *a) {
  return !atomic_load_explicit(&a->ended, memory_order_acquire);
}

/* Something that a begin under the lock would find changed on c: a
 * collective begun without it registers itself (nx_coll_begin_seg). */
static void bump_locked(nx_comm *c) {
  uint64_t v = atomic_load_explicit(&c->coll_events, memory_order_relaxed);
  atomic_store_explicit(&c->coll_events, v + 1, memory_order_release);
}

/* The count moved since the last begin under the lock (issuing thread). */
static int moved(const nx_comm *c) {
  return atomic_load_explicit(&c->coll_events, memory_order_acquire) != c->fast_seen;
}

static nx_active_coll *find_active(nx_comm *c, uint64_t seq) {
  for (nx_active_coll *a = c->colls; a; a = a->next)
    if (a->seq == seq && live(a)) return a;
  return NULL;
}

int nx_coll_inflight_locked(const nx_comm *c) {
  if (atomic_load_explicit(&c->fast_seq1, memory_order_relaxed)) return 1;
  for (const nx_active_coll *a = c->colls; a; a = a->next)
    if (live(a)) return 1;
  return 0;
}

void nx_coll_retire_locked(nx_comm *c) {
  for (nx_active_coll **pp = &c->colls; *pp;) {
    nx_active_coll *a = *pp;
    if (live(a)) {
      pp = &a->next;
      continue;
    }
    *pp = a->next;
    nx_coll *k = a->k;
    nx_comm_log_end_locked(c, k->log_id, 0, NULL);
    free(k->reqs);
    k->reqs = NULL;
    if (c->coll_spare)
      free(k);
    else
      c->coll_spare = k;
  }
}

/* Fails an active collective: its receives and sends are cancelled, so its
 * waiter returns at once; nx_coll_end waits for the sends whose buffers a
 * peer or ngtcp2 still holds (a same-host reader answers promptly). */
static void fail_active(nx_comm *c, nx_active_coll *a, int rc, const char *why) {
  if (a->failed_rc) return;
  snprintf(a->why, sizeof a->why, "%s", why);
  a->failed_rc = rc;
  nx_coll *k = a->k;
  for (size_t i = 0; i < k->nreqs; i++)
    nx_req_abandon_locked(c->ep, k->reqs[i], rc, why);
}

static void tell_failed_locked(nx_comm *c, uint32_t root_rank, uint64_t seq, int rc) {
  nx_ep *ep = c->ep;
  nx_frame f = {0};
  f.kind = NX_KIND_COLL_FAIL;
  f.comm_id = c->id;
  f.tag = seq;
  f.status = rc;
  if (root_rank < ep->world && ep->peers[root_rank]->state == NX_PEER_UP)
    nx_ep_send_locked(ep, root_rank, &f, NULL, 0, NULL, NULL);
}

void nx_coll_tell_failed(nx_comm *c, uint32_t peer, uint64_t seq, int rc) {
  pthread_mutex_lock(&c->ep->mu);
  if (peer < c->size) tell_failed_locked(c, c->members[peer], seq, rc);
  pthread_mutex_unlock(&c->ep->mu);
}

void nx_coll_mark_seg_nowait(nx_comm *c, uint64_t seq) {
  atomic_store_explicit(&c->seg_nowait[seq % NX_SEG_NOWAIT], seq + 1, memory_order_release);
}

/* Took c's collective seq the shared segment without waiting for the others
 * (a broadcast's root)? Then any frame a peer sends for seq means that peer
 * took the message path: a mismatch it would otherwise wait out, since
 * nothing here will ever answer it. */
static int seg_nowait(const nx_comm *c, uint64_t seq) {
  return atomic_load_explicit(&c->seg_nowait[seq % NX_SEG_NOWAIT], memory_order_acquire) == seq + 1;
}

int nx_coll_check_frame_locked(nx_ep *ep, const nx_frame *f) {
  nx_comm *c = nx_comm_find(ep, f->comm_id);
  if (!c) return 0; /* a communicator not created here yet: keep it */
  bump_locked(c);   /* one running unregistered registers, and judges it */
  if (f->kind == NX_KIND_COLL && f->tag < c->next_seq && seg_nowait(c, f->tag)) {
    tell_failed_locked(c, f->src, f->tag, NEXAR_ERR_MISMATCH);
    return 1;
  }
  nx_active_coll *a = find_active(c, f->tag);
  if (a) {
    /* failed here: no receive of it will be posted, and a same-host
     * descriptor's sender hears so now (dropping answers it) */
    if (a->failed_rc) return 1;
    if (sig_equal(f, &a->sig)) return 0;
    char mine[96], theirs[96], why[240];
    nx_coll_describe(mine, sizeof mine, a->sig.op, a->sig.dtype, a->sig.redop, a->sig.root,
                     a->sig.count);
    nx_coll_describe(theirs, sizeof theirs, f->coll_op, f->dtype, f->redop, f->root, f->count);
    uint32_t peer = nx_comm_rank_of(c, f->src);
    snprintf(why, sizeof why, "collective #%llu on comm %llu: rank %u called %s, rank %u called %s",
             (unsigned long long)a->seq, (unsigned long long)c->id, c->rank, mine, peer, theirs);
    fail_active(c, a, NEXAR_ERR_MISMATCH, why);
    return 1;
  }
  /* one of the collective that runs unregistered: kept for it to judge
   * as it registers (the bump above makes it) */
  if (atomic_load_explicit(&c->fast_seq1, memory_order_acquire) == f->tag + 1) return 0;
  return f->tag < c->next_seq; /* finished here: a late frame */
}

static int map_remote(int32_t status) {
  if (status == NEXAR_ERR_MISMATCH || status == NEXAR_ERR_INVALID_ARGUMENT ||
      status == NEXAR_ERR_INVALID_RANK || status == NEXAR_ERR_SIZE_MISMATCH)
    return NEXAR_ERR_MISMATCH;
  if (status >= 0 || status < NEXAR_ERR_UNSUPPORTED) return NEXAR_ERR_PROTOCOL;
  return status;
}

void nx_coll_remote_fail_locked(nx_ep *ep, const nx_frame *f) {
  nx_comm *c = nx_comm_find(ep, f->comm_id);
  if (!c) return;
  int rc = map_remote(f->status);
  uint32_t peer = nx_comm_rank_of(c, f->src);
  nx_active_coll *a = find_active(c, f->tag);
  if (a) {
    char why[240];
    snprintf(why, sizeof why, "%s #%llu on comm %llu: rank %u failed it (%s)", op_name(a->sig.op),
             (unsigned long long)a->seq, (unsigned long long)c->id, peer,
             nexar_strerror(f->status));
    fail_active(c, a, rc, why);
    return;
  }
  /* a collective begun without the lock may hold the sequence: kept for it
   * (the next begin under the lock drops what is stale) */
  if (f->tag < atomic_load_explicit(&c->next_seq, memory_order_acquire) &&
      atomic_load_explicit(&c->fast_seq1, memory_order_relaxed) != f->tag + 1)
    return;
  bump_locked(c);
  if (c->nfailed == c->capfailed) {
    size_t nc = c->capfailed ? c->capfailed * 2 : 8;
    uint64_t *s = realloc(c->failed_seqs, nc * sizeof *s);
    if (s) c->failed_seqs = s;
    int32_t *k = realloc(c->failed_codes, nc * sizeof *k);
    if (k) c->failed_codes = k;
    if (!s || !k) return;
    c->capfailed = nc;
  }
  c->failed_seqs[c->nfailed] = f->tag;
  c->failed_codes[c->nfailed++] = (int32_t)((uint32_t)peer << 8 | (uint32_t)(-rc & 0xff));
}

int nx_coll_gave_up_code_locked(nx_ep *ep, uint64_t comm_id, uint64_t seq) {
  nx_comm *c = nx_comm_find(ep, comm_id);
  if (!c) return NEXAR_ERR_ABORTED;
  nx_active_coll *a = find_active(c, seq);
  int rc = a ? a->failed_rc : (c->last_fail_seq == seq ? c->last_fail_rc : 0);
  /* a member is dead: whatever made us drop it, the collective cannot
   * complete, and the sender should hear the cause; so should it hear that
   * the two sides called different collectives (its send's answer may
   * overtake the failure notice that says so, which made it ABORTED) */
  if (rc == NEXAR_ERR_PEER_LOST || c->ndead || c->revoke_lost != UINT32_MAX)
    return NEXAR_ERR_PEER_LOST;
  return rc == NEXAR_ERR_MISMATCH ? NEXAR_ERR_MISMATCH : NEXAR_ERR_ABORTED;
}

void nx_coll_fail_all_locked(nx_comm *c, int rc, const char *why) {
  bump_locked(c);
  for (nx_active_coll *a = c->colls; a; a = a->next) {
    if (!live(a)) continue;
    char msg[240];
    snprintf(msg, sizeof msg, "%s #%llu on comm %llu: %s", op_name(a->sig.op),
             (unsigned long long)a->seq, (unsigned long long)c->id, why);
    fail_active(c, a, rc, msg);
  }
}

/* Under ep->mu: k (its sequence and signature set) joins c's collectives
 * in flight, and what peers said of its sequence before it began reaches
 * it (a failure notice, a frame of other arguments). 1 when c is then
 * clear for its next segment collective to begin without the lock:
 * nothing else in flight, failed or queued. */
static int register_locked(nx_comm *c, nx_coll *k) {
  nx_ep *ep = c->ep;
  const nx_coll_sig *sig = &k->ac.sig;
  int vcount = sig->op >= NX_COLL_ALL_GATHER_V; /* sig->count is no element count */
  k->log_id =
      nx_oplog_begin(&c->log, k->ac.seq, op_name(sig->op),
                     vcount ? 0 : sig->count * NX_MAX(nexar_dtype_size((nexar_dtype)sig->dtype), 1),
                     sig->op == NX_COLL_BROADCAST || sig->op == NX_COLL_REDUCE ||
                             sig->op == NX_COLL_GATHER || sig->op == NX_COLL_SCATTER ||
                             sig->op == NX_COLL_GATHER_V || sig->op == NX_COLL_SCATTER_V
                         ? sig->root
                         : UINT32_MAX,
                     0);
  int clean = !c->ndead && c->revoke_lost == UINT32_MAX;
  for (nx_active_coll *a = c->colls; a; a = a->next)
    if (live(a)) clean = 0;
  k->ac.k = k;
  k->ac.next = c->colls;
  c->colls = &k->ac;
  for (size_t i = 0; i < c->nfailed;) {
    if (c->failed_seqs[i] > k->ac.seq) {
      i++;
      continue;
    }
    /* ours, or a stale one: a collective begun without the lock that
     * ended before it looked */
    if (c->failed_seqs[i] == k->ac.seq) {
      uint32_t peer = (uint32_t)c->failed_codes[i] >> 8;
      int code = -(int)((uint32_t)c->failed_codes[i] & 0xff);
      char why[200];
      snprintf(why, sizeof why, "%s #%llu on comm %llu: rank %u failed it (%s)", op_name(sig->op),
               (unsigned long long)k->ac.seq, (unsigned long long)c->id, peer,
               nexar_strerror(code));
      fail_active(c, &k->ac, code, why);
    }
    c->failed_seqs[i] = c->failed_seqs[--c->nfailed];
    c->failed_codes[i] = c->failed_codes[c->nfailed];
  }
  if (c->nfailed) clean = 0;
  /* frames that arrived before we began are checked now */
  for (nx_msg *m = ep->unexp_head; m && !k->ac.failed_rc; m = m->next) {
    if (m->f.kind != NX_KIND_COLL || m->f.comm_id != c->id) continue;
    clean = 0;
    if (m->f.tag == k->ac.seq && !sig_equal(&m->f, sig))
      nx_coll_check_frame_locked(ep, &m->f);
    else if (m->f.tag == k->ac.seq && seg_nowait(c, k->ac.seq)) /* see seg_nowait */
      tell_failed_locked(c, m->f.src, k->ac.seq, NEXAR_ERR_MISMATCH);
  }
  c->fast_seen = atomic_load_explicit(&c->coll_events, memory_order_relaxed);
  return clean && !k->ac.failed_rc;
}

/* Collective seq cannot run: c has a dead member, which revokes c (ULFM). */
static int lost_member_locked(nx_comm *c, uint8_t op, uint64_t seq) {
  int rc = nx_fail(NEXAR_ERR_PEER_LOST, "%s #%llu on comm %llu: rank %u is dead", op_name(op),
                   (unsigned long long)seq, (unsigned long long)c->id, c->dead[0]);
  nx_comm_lost_locked(c, nexar_last_error());
  return rc;
}

int nx_coll_begin(nexar_client *c, const nx_coll_sig *sig, nx_coll **out) {
  *out = NULL;
  int rc = nx_comm_check(c, op_name(sig->op));
  if (rc) return rc;
  nx_ep *ep = c->ep;
  c->fast_ready = 0; /* until this one ends well, if it may */
  pthread_mutex_lock(&ep->mu);
  nx_coll_retire_locked(c);
  /* the last one that ended, if any: a blocking loop allocates nothing */
  nx_coll *k = c->coll_spare;
  c->coll_spare = NULL;
  if (k) {
    memset(k, 0, sizeof *k);
  } else if (!(k = nx_calloc(1, sizeof *k))) {
    pthread_mutex_unlock(&ep->mu);
    return nx_fail(NEXAR_ERR_NOMEM, "%s", op_name(sig->op));
  }
  if ((rc = nx_comm_check_peer_locked(c, op_name(sig->op), UINT32_MAX))) {
    pthread_mutex_unlock(&ep->mu);
    free(k);
    return rc;
  }
  uint64_t seq = atomic_load_explicit(&c->next_seq, memory_order_relaxed);
  atomic_store_explicit(&c->next_seq, seq + 1, memory_order_release);
  if (c->ndead) {
    if (c->cseg) nx_cseg_enter(c->cseg, seq);
    rc = lost_member_locked(c, sig->op, seq);
    pthread_mutex_unlock(&ep->mu);
    free(k);
    return rc;
  }
  k->c = c;
  k->ac.seq = seq;
  k->ac.sig = *sig;
  k->clean = register_locked(c, k);
  pthread_mutex_unlock(&ep->mu);
  /* Segment ranks may reuse what we read. After the unlock: that locked
   * instruction would otherwise wait for this store to reach a line the
   * others poll (a transfer between cores), on every collective. */
  if (c->cseg) nx_cseg_enter(c->cseg, k->ac.seq);
  *out = k;
  return 0;
}

/* With the lock, a blocking segment collective of a small message costs
 * about as much again as without: the lock's locked instruction waits for
 * the last call's stores to reach the CPUs that poll them, and the rest
 * (registration, the log) is as long as the collective itself. */
int nx_coll_begin_seg(nexar_client *c, const nx_coll_sig *sig, nx_coll **out) {
  if (!c || !c->fast_ready || !c->cseg || moved(c) ||
      atomic_load_explicit(&c->aborted, memory_order_relaxed) ||
      atomic_load_explicit(&c->revoked, memory_order_relaxed))
    return nx_coll_begin(c, sig, out);
  nx_coll *k = c->fast_k;
  if (!k && !(k = c->fast_k = calloc(1, sizeof *k))) return nx_coll_begin(c, sig, out);
  uint64_t seq = atomic_load_explicit(&c->next_seq, memory_order_relaxed);
  k->c = c;
  k->fast = 1;
  k->clean = 0;
  k->log_id = 0;
  k->nreqs = 0;
  k->watch = NULL;
  k->watch_arg = NULL;
  k->ac.seq = seq;
  k->ac.sig = *sig;
  k->ac.k = k;
  k->ac.next = NULL;
  atomic_store_explicit(&k->ac.failed_rc, 0, memory_order_relaxed);
  atomic_store_explicit(&k->ac.ended, 0, memory_order_relaxed);
  /* in flight before the sequence moves: an engine that sees the sequence
   * past a failure notice's sees this too, and keeps the notice */
  atomic_store_explicit(&c->fast_seq1, seq + 1, memory_order_relaxed);
  atomic_store_explicit(&c->next_seq, seq + 1, memory_order_release);
  nx_cseg_enter(c->cseg, seq);
  *out = k;
  return 0;
}

/* k, begun without the lock, registers as nx_coll_begin would have (failed
 * at once when c lost a member meanwhile); c's list owns it from here. */
static void upgrade(nx_coll *k) {
  nexar_client *c = k->c;
  nx_ep *ep = c->ep;
  k->fast = 0;
  c->fast_k = NULL;
  c->fast_ready = 0;
  pthread_mutex_lock(&ep->mu);
  nx_coll_retire_locked(c);
  register_locked(c, k);
  atomic_store_explicit(&c->fast_seq1, 0, memory_order_relaxed); /* listed now */
  int rc = k->ac.failed_rc ? 0 : nx_comm_check_peer_locked(c, op_name(k->ac.sig.op), UINT32_MAX);
  if (!rc && !k->ac.failed_rc && c->ndead) rc = lost_member_locked(c, k->ac.sig.op, k->ac.seq);
  if (rc) fail_active(c, &k->ac, rc, nexar_last_error());
  pthread_mutex_unlock(&ep->mu);
}

nexar_client *nx_coll_client(const nx_coll *k) {
  return k->c;
}

int nx_coll_failed(nx_coll *k) {
  nx_ep *ep = k->c->ep;
  if (k->fast && moved(k->c)) upgrade(k);
  /* the common answer without the lock (a segment collective asks twice) */
  if (!atomic_load_explicit(&k->ac.failed_rc, memory_order_relaxed)) return 0;
  pthread_mutex_lock(&ep->mu);
  int rc = k->ac.failed_rc;
  if (rc) nx_set_error_text(k->ac.why);
  pthread_mutex_unlock(&ep->mu);
  return rc;
}

uint32_t nx_coll_rank(const nx_coll *k) {
  return k->c->rank;
}
uint32_t nx_coll_size(const nx_coll *k) {
  return k->c->size;
}
uint64_t nx_coll_seq(const nx_coll *k) {
  return k->ac.seq;
}
int nx_coll_graph(const nx_coll *k, uint32_t *degree) {
  const nx_comm *c = k->c;
  const nx_ep *ep = c->ep;
  *degree = ep->route.degree;
  if (!ep->route.topology || c->size != ep->route.world) return 0;
  for (uint32_t i = 0; i < c->size; i++)
    if (c->members[i] != i) return 0;
  return ep->route.topology;
}

const nexar_config *nx_coll_config(const nx_coll *k) {
  return &k->c->cfg;
}

uint32_t nx_coll_timeout_ms(const nx_coll *k) {
  return k->ac.sig.op == NX_COLL_BARRIER ? k->c->cfg.barrier_timeout_ms
                                         : k->c->cfg.collective_timeout_ms;
}

static int track(nx_coll *k, nexar_request *r) {
  if (k->nreqs == k->capreqs) {
    size_t nc = k->capreqs ? k->capreqs * 2 : 16;
    nexar_request **a = realloc(k->reqs, nc * sizeof *a);
    if (!a) return NEXAR_ERR_NOMEM;
    k->reqs = a, k->capreqs = nc;
  }
  k->reqs[k->nreqs++] = r;
  return 0;
}

static nexar_request *new_req(nx_coll *k, int kind, uint32_t peer, const char *dir, uint32_t round,
                              uint32_t seg) {
  nexar_request *r = nx_req_new();
  if (!r) return NULL;
  r->kind = kind;
  r->ep = k->c->ep;
  r->peer = peer;
  r->timeout_ms = nx_coll_timeout_ms(k);
  r->w_op = op_name(k->ac.sig.op);
  r->w_seq = k->ac.seq;
  r->w_comm = k->c->id;
  r->w_verb = dir;
  r->w_tag = (uint64_t)round << 32 | seg; /* shown as "round R, segment S" */
  r->on_done = k->watch;
  r->on_done_arg = k->watch_arg;
  return r;
}

void nx_coll_watch(nx_coll *k, void (*fn)(void *arg), void *arg) {
  k->watch = fn;
  k->watch_arg = arg;
}

int nx_coll_isend(nx_coll *k, uint32_t dest, uint32_t round, uint32_t seg, const void *buf,
                  size_t len, nx_creq **out) {
  *out = NULL;
  if (k->fast) upgrade(k);
  nexar_client *c = k->c;
  nexar_request *r = new_req(k, NX_REQ_SEND, dest, "sending to", round, seg);
  if (!r) return nx_fail(NEXAR_ERR_NOMEM, "collective send");
  nx_frame f = {0};
  f.kind = NX_KIND_COLL;
  f.comm_id = c->id;
  f.tag = k->ac.seq;
  f.round = round;
  f.segment = seg;
  f.coll_op = k->ac.sig.op;
  f.dtype = k->ac.sig.dtype;
  f.redop = k->ac.sig.redop;
  f.root = k->ac.sig.root;
  f.count = k->ac.sig.count;
  nexar_iovec v = {(void *)buf, len};
  pthread_mutex_lock(&c->ep->mu);
  int rc = k->ac.failed_rc;
  if (rc)
    nx_set_error_text(k->ac.why);
  else if ((rc = track(k, r)) != 0)
    nx_fail(rc, "collective send");
  else if ((rc = nx_ep_send_locked(c->ep, c->members[dest], &f, &v, 1, r, NULL)) != 0)
    k->nreqs--;
  pthread_mutex_unlock(&c->ep->mu);
  if (rc) {
    nx_req_free(r);
    return rc;
  }
  *out = (nx_creq *)r;
  return 0;
}

int nx_coll_irecv(nx_coll *k, uint32_t src, uint32_t round, uint32_t seg, void *buf, size_t len,
                  nx_creq **out) {
  *out = NULL;
  if (k->fast) upgrade(k);
  nexar_client *c = k->c;
  nexar_request *r = new_req(k, NX_REQ_RECV, src, "no data from", round, seg);
  if (!r) return nx_fail(NEXAR_ERR_NOMEM, "collective receive");
  r->recv.iov1 = (nexar_iovec){buf, len};
  r->recv.iov = &r->recv.iov1;
  r->recv.niov = 1;
  r->recv.len = len;
  r->recv.req = r;
  r->recv.key = (nx_key){.comm = c->id,
                         .kind = NX_KIND_COLL,
                         .src = c->members[src],
                         .tag = k->ac.seq,
                         .round = round,
                         .seg = seg};
  nx_ep *ep = c->ep;
  pthread_mutex_lock(&ep->mu);
  int rc = k->ac.failed_rc;
  nx_peer *p = ep->peers[c->members[src]];
  if (rc)
    nx_set_error_text(k->ac.why);
  else if ((rc = track(k, r)) != 0)
    nx_fail(rc, "collective receive");
  else if ((rc = nx_match_post(ep, &r->recv)) != 0) {
    k->nreqs--;
    if (rc == NEXAR_ERR_SIZE_MISMATCH && nx_coll_keeps_size_mismatch(k->ac.sig.op))
      rc = nx_fail(NEXAR_ERR_SIZE_MISMATCH,
                   "%s #%llu on comm %llu: rank %u sent a block of another length than the %zu "
                   "bytes its count here asks for",
                   op_name(k->ac.sig.op), (unsigned long long)k->ac.seq, (unsigned long long)c->id,
                   src, len);
    else if (rc == NEXAR_ERR_SIZE_MISMATCH)
      rc = nx_fail(NEXAR_ERR_MISMATCH,
                   "%s #%llu on comm %llu: rank %u sent a block of another "
                   "size",
                   op_name(k->ac.sig.op), (unsigned long long)k->ac.seq, (unsigned long long)c->id,
                   src);
  } else if (!r->recv.done && !r->recv.msg && p->state == NX_PEER_DEAD) {
    /* what a departed peer sent before it left is still received above */
    nx_match_cancel(ep, &r->recv);
    k->nreqs--;
    rc = nx_fail(p->dead_code, "%s #%llu on comm %llu: rank %u is gone (%s)", op_name(k->ac.sig.op),
                 (unsigned long long)k->ac.seq, (unsigned long long)c->id, src, p->why);
  }
  pthread_mutex_unlock(&ep->mu);
  if (rc) {
    nx_req_free(r);
    return rc;
  }
  *out = (nx_creq *)r;
  return 0;
}

static void untrack_locked(nx_coll *k, nexar_request *r) {
  for (size_t i = 0; i < k->nreqs; i++)
    if (k->reqs[i] == r) {
      k->reqs[i] = k->reqs[--k->nreqs];
      return;
    }
}

/* The result of finished request r (freed here). */
static int reaped(nx_coll *k, nexar_request *r, int rc) {
  if (rc == NEXAR_ERR_SIZE_MISMATCH && nx_coll_keeps_size_mismatch(k->ac.sig.op)) {
    rc = nx_fail(NEXAR_ERR_SIZE_MISMATCH,
                 "%s #%llu on comm %llu: rank %u sent a block of another length than the %zu "
                 "bytes its count here asks for",
                 op_name(k->ac.sig.op), (unsigned long long)k->ac.seq, (unsigned long long)k->c->id,
                 r->peer, (size_t)r->recv.len);
  } else if (rc == NEXAR_ERR_SIZE_MISMATCH) {
    rc = nx_fail(NEXAR_ERR_MISMATCH, "%s #%llu on comm %llu: rank %u sent a block of another size",
                 op_name(k->ac.sig.op), (unsigned long long)k->ac.seq, (unsigned long long)k->c->id,
                 r->peer);
  }
  pthread_mutex_lock(&k->c->ep->mu);
  untrack_locked(k, r);
  if (rc == NEXAR_ERR_TIMEOUT) { /* a timeout on one peer ends the whole collective */
    char why[240];
    snprintf(why, sizeof why, "%s", nexar_last_error());
    fail_active(k->c, &k->ac, rc, why);
  }
  pthread_mutex_unlock(&k->c->ep->mu);
  nx_req_free(r);
  return rc;
}

int nx_coll_wait(nx_coll *k, nx_creq *cr) {
  nexar_request *r = (nexar_request *)cr;
  if (!r) return 0;
  return reaped(k, r, nx_req_wait(r));
}

int nx_coll_reap(nx_coll *k, nx_creq *cr, uint64_t now, uint64_t *wake, int *rc) {
  nexar_request *r = (nexar_request *)cr;
  if (!nx_req_check_deadline(r, now, wake)) return 0;
  int v = r->rc;
  if (v) nx_set_error_text(r->errtext ? r->errtext : nexar_strerror(v));
  *rc = reaped(k, r, v);
  return 1;
}

void nx_coll_fail(nx_coll *k, int rc) {
  char why[240];
  snprintf(why, sizeof why, "%s", nexar_last_error());
  if (k->fast) upgrade(k);
  pthread_mutex_lock(&k->c->ep->mu);
  fail_active(k->c, &k->ac, rc, why);
  pthread_mutex_unlock(&k->c->ep->mu);
}

int nx_coll_waitall(nx_coll *k, nx_creq **r, size_t n) {
  int first = 0;
  char msg[256] = "";
  for (size_t i = 0; i < n; i++) {
    if (!r[i]) continue;
    int rc = nx_coll_wait(k, r[i]);
    r[i] = NULL;
    if (rc && !first) {
      first = rc;
      snprintf(msg, sizeof msg, "%s", nexar_last_error());
    }
  }
  if (first) nx_set_error_text(msg);
  return first;
}

int nx_coll_end_quick(nx_coll *k) {
  if (k->fast) {
    /* Something happened meanwhile (a loss the engine could not count as
     * an operation in flight, a kept notice or frame): registered late, it
     * ends as one begun under the lock would, so a loss revokes c now */
    if (moved(k->c)) {
      upgrade(k);
      atomic_store_explicit(&k->ac.ended, 1, memory_order_release);
      return 0;
    }
    /* nothing registered: c keeps it for the next */
    atomic_store_explicit(&k->c->fast_seq1, 0, memory_order_release);
    return 0;
  }
  if (k->nreqs) return nx_coll_end(k, 0);
  if (k->clean) k->c->fast_ready = 1;
  /* A failure notice that reaches k from here on finds it ended, as it
   * would find it gone after nx_coll_end: the call succeeded. */
  atomic_store_explicit(&k->ac.ended, 1, memory_order_release);
  return 0;
}

int nx_coll_end(nx_coll *k, int rc) {
  nexar_client *c = k->c;
  nx_ep *ep = c->ep;
  char why[256];
  why[0] = 0;
  if (rc) snprintf(why, sizeof why, "%s", nexar_last_error());
  if (k->fast) upgrade(k);
  pthread_mutex_lock(&ep->mu);
  if (rc && k->ac.failed_rc && rc != k->ac.failed_rc) { /* report the root cause */
    rc = k->ac.failed_rc;
    snprintf(why, sizeof why, "%s", k->ac.why);
  } else if (rc && k->ac.failed_rc) {
    snprintf(why, sizeof why, "%s", k->ac.why);
  }
  if (!rc && k->nreqs) fail_active(c, &k->ac, NEXAR_ERR_ABORTED, "collective ended early");
  if (rc) {
    fail_active(c, &k->ac, rc, why);
    if (rc != NEXAR_ERR_PEER_LOST && rc != NEXAR_ERR_ABORTED) {
      nx_frame f = {0};
      f.kind = NX_KIND_COLL_FAIL;
      f.comm_id = c->id;
      f.tag = k->ac.seq;
      f.status = rc;
      for (uint32_t i = 0; i < c->size; i++)
        if (i != c->rank && ep->peers[c->members[i]]->state == NX_PEER_UP)
          nx_ep_send_locked(ep, c->members[i], &f, NULL, 0, NULL, NULL);
    }
  }
  for (nx_active_coll **pp = &c->colls; *pp; pp = &(*pp)->next)
    if (*pp == &k->ac) {
      *pp = k->ac.next;
      break;
    }
  if (rc) {
    c->last_fail_seq = k->ac.seq, c->last_fail_rc = rc;
    nx_comm_drop_coll_locked(c, k->ac.seq);
  }
  nx_comm_log_end_locked(c, k->log_id, rc, rc ? why : NULL);
  int spare = !k->nreqs && !c->coll_spare; /* k is the next begin's from here */
  if (spare) {
    free(k->reqs);
    c->coll_spare = k;
  }
  pthread_mutex_unlock(&ep->mu);
  if (!spare) {
    /* requests still out (cancelled sends) finish shortly; wait so no
     * buffer is touched after we return */
    for (size_t i = 0; i < k->nreqs; i++) {
      k->reqs[i]->timeout_ms = 0;
      nx_req_wait(k->reqs[i]);
      nx_req_free(k->reqs[i]);
    }
    free(k->reqs);
    free(k);
  }
  if (rc) nx_set_error_text(why);
  return rc;
}

int nx_comm_derive(nexar_client *parent, uint64_t comm_id, const uint32_t *members, uint32_t n,
                   nexar_client **out) {
  return nx_comm_derive_view(parent, comm_id, members, n, parent ? parent->epoch : 0, out);
}

int nx_comm_derive_view(nexar_client *parent, uint64_t comm_id, const uint32_t *members, uint32_t n,
                        uint64_t epoch, nexar_client **out) {
  *out = NULL;
  if (!parent || !members || n == 0)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "derive: bad arguments");
  uint32_t *roots = malloc(n * sizeof *roots);
  if (!roots) return nx_fail(NEXAR_ERR_NOMEM, "derive");
  int me = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (members[i] >= parent->size) {
      free(roots);
      return nx_fail(NEXAR_ERR_INVALID_RANK, "derive: member %u of %u", members[i], parent->size);
    }
    roots[i] = parent->members[members[i]];
    if (members[i] == parent->rank) me = 1;
  }
  if (!me) {
    free(roots);
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "derive: the caller is not a member");
  }
  pthread_mutex_lock(&parent->ep->mu);
  int dup = nx_comm_find(parent->ep, comm_id) != NULL;
  pthread_mutex_unlock(&parent->ep->mu);
  int rc = dup ? nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "derive: comm id %llu already in use",
                         (unsigned long long)comm_id)
               : nx_comm_new(parent->ep, comm_id, roots, n, parent->members[parent->rank],
                             &parent->cfg, epoch, parent->id, out);
  free(roots);
  return rc;
}
