/* Matching as in MPI: posted receives and unexpected messages, both in
 * order, keyed by (communicator, kind, source, tag, round, segment); a
 * receive of the wrong length leaves the message queued. ep->mu held. */
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/request.h"

static int key_match(const nx_key *k, const nx_frame *f, int any_src) {
  if (f->comm_id != k->comm || f->kind != k->kind || f->tag != k->tag) return 0;
  if (!any_src && f->src != k->src) return 0;
  if (f->kind == NX_KIND_COLL && (f->round != k->round || f->segment != k->seg)) return 0;
  return 1;
}

/* Takes posted receive r (after prev, NULL if first) off the posted list. */
static void posted_unlink(nx_ep *ep, nx_recv *prev, nx_recv *r) {
  if (prev)
    prev->next = r->next;
  else
    ep->posted_head = r->next;
  if (ep->posted_tail == r) ep->posted_tail = prev;
  r->next = NULL;
}

void nx_iov_copy_in(const nexar_iovec *iov, size_t niov, uint64_t off, const uint8_t *data,
                    size_t len) {
  for (size_t i = 0; i < niov && len > 0; i++) {
    size_t l = iov[i].len;
    if (off >= l) {
      off -= l;
      continue;
    }
    size_t n = NX_MIN(l - (size_t)off, len);
    memcpy((uint8_t *)iov[i].base + off, data, n);
    data += n;
    len -= n;
    off = 0;
  }
}

void nx_iovs_copy_in(const nexar_iovec *iov, size_t niov, uint64_t off, const nexar_iovec *src,
                     size_t nsrc) {
  for (size_t i = 0; i < nsrc; off += src[i].len, i++)
    if (src[i].len) nx_iov_copy_in(iov, niov, off, src[i].base, src[i].len);
}

void nx_recv_finish(nx_ep *ep, nx_recv *r, int rc, const char *why) {
  if (r->done) return;
  r->done = 1;
  r->rc = rc;
  if (r->req) nx_req_complete(r->req, rc, why);
  (void)ep;
}

void nx_match_unlink(nx_ep *ep, nx_msg *prev, nx_msg *m) {
  if (prev)
    prev->next = m->next;
  else
    ep->unexp_head = m->next;
  if (ep->unexp_tail == m) ep->unexp_tail = prev;
  m->next = NULL;
  m->queued = 0;
}

void nx_match_unqueue(nx_ep *ep, nx_msg *m) {
  nx_msg *prev = NULL;
  for (nx_msg *x = ep->unexp_head; x; prev = x, x = x->next)
    if (x == m) {
      nx_match_unlink(ep, prev, m);
      return;
    }
}

/* Binds a message to its receive and moves what was buffered. */
static void bind_msg(nx_ep *ep, nx_msg *m, nx_recv *r) {
  m->rcv = r;
  r->msg = m;
  if (!r->anylen && m->got && !(m->f.flags & NX_FLAG_RNDV)) {
    nx_iov_copy_in(r->iov, r->niov, 0, m->buf, (size_t)m->got);
    r->got = m->got;
    nx_unexp_release(ep, m, m->got);
    free(m->buf);
    m->buf = NULL;
    m->bufcap = 0;
    if (r->req) atomic_store(&r->req->progress_ns, nx_coarse_ns());
  }
  nx_msg_release_credit(ep, m);
  nx_msg_finish_if_complete(ep, m);
}

static int size_ok(const nx_recv *r, const nx_msg *m) {
  return r->anylen || m->f.length == r->len;
}

int nx_match_post(nx_ep *ep, nx_recv *r) {
  for (nx_msg *m = ep->unexp_head; m; m = m->next) {
    if (m->discard || !key_match(&r->key, &m->f, 0)) continue;
    if (!size_ok(r, m))
      return nx_fail(NEXAR_ERR_SIZE_MISMATCH,
                     "recv from rank %u tag %llu: message has %llu bytes, receive asked %llu",
                     m->f.src, (unsigned long long)m->f.tag, (unsigned long long)m->f.length,
                     (unsigned long long)r->len);
    nx_match_unqueue(ep, m);
    bind_msg(ep, m, r);
    return 0;
  }
  r->next = NULL;
  if (ep->posted_tail)
    ep->posted_tail->next = r;
  else
    ep->posted_head = r;
  ep->posted_tail = r;
  return 0;
}

int nx_match_posted(const nx_ep *ep, const nx_key *k) {
  for (const nx_recv *r = ep->posted_head; r; r = r->next)
    if (r->key.comm == k->comm && r->key.kind == k->kind && r->key.src == k->src &&
        r->key.tag == k->tag)
      return 1;
  return 0;
}

nx_msg *nx_match_peek(nx_ep *ep, const nx_key *k, int any_src) {
  for (nx_msg *m = ep->unexp_head; m; m = m->next)
    if (!m->discard && key_match(k, &m->f, any_src)) return m;
  return NULL;
}

size_t nx_match_fail_posted(nx_ep *ep, nx_recv_pick_fn pick, void *arg, const char *why) {
  size_t n = 0;
  nx_recv *prev = NULL;
  for (nx_recv *r = ep->posted_head, *next; r; r = next) {
    next = r->next;
    int rc = pick(r, arg);
    if (!rc) {
      prev = r;
      continue;
    }
    posted_unlink(ep, prev, r);
    nx_recv_finish(ep, r, rc, why);
    n++;
  }
  return n;
}

int nx_match_cancel(nx_ep *ep, nx_recv *r) {
  nx_recv *prev = NULL;
  for (nx_recv *x = ep->posted_head; x; prev = x, x = x->next) {
    if (x != r) continue;
    posted_unlink(ep, prev, x);
    return 1;
  }
  if (nx_rndv_stream_cancel_locked(ep, r)) return 0;
  if (r->msg) { /* matched and part-received: the rest of it is dropped */
    nx_msg *m = r->msg;
    m->rcv = NULL;
    m->discard = 1;
    r->msg = NULL;
  }
  return 0;
}

static void enqueue_unexpected(nx_ep *ep, nx_msg *m) {
  m->next = NULL;
  m->queued = 1;
  if (ep->unexp_tail)
    ep->unexp_tail->next = m;
  else
    ep->unexp_head = m;
  ep->unexp_tail = m;
  pthread_cond_broadcast(&ep->cv);
}

int nx_match_direct(nx_ep *ep, const nx_frame *f, const nexar_iovec *iov, size_t niov) {
  /* what nx_match_arrived does for such a frame, less the message: no
   * special kind, no view to check (ep->nrevoked_live), a posted receive */
  if (f->kind != NX_KIND_P2P || (f->flags & NX_FLAG_RNDV) || ep->nrevoked_live) return 0;
  nx_recv *prev = NULL;
  for (nx_recv *r = ep->posted_head; r; prev = r, r = r->next) {
    if (!key_match(&r->key, f, 0)) continue;
    if (r->anylen || r->len != f->length) return 0; /* the general path says why */
    posted_unlink(ep, prev, r);
    nx_iovs_copy_in(r->iov, r->niov, 0, iov, niov);
    r->got = f->length;
    r->status = f->status;
    nx_recv_finish(ep, r, 0, NULL);
    return 1;
  }
  return 0;
}

void nx_match_arrived(nx_ep *ep, nx_msg *m) {
  switch (m->f.kind) {
  case NX_KIND_HEARTBEAT:
    m->discard = 1;
    nx_msg_finish_if_complete(ep, m);
    return;
  case NX_KIND_ABORT:
    nx_comm_remote_abort_locked(ep, m->f.comm_id, m->f.src);
    m->discard = 1;
    nx_msg_finish_if_complete(ep, m);
    return;
  case NX_KIND_COLL_FAIL:
    nx_coll_remote_fail_locked(ep, &m->f);
    m->discard = 1;
    nx_msg_finish_if_complete(ep, m);
    return;
  case NX_KIND_REVOKE:
    nx_comm_on_revoke_locked(ep, &m->f);
    m->discard = 1;
    nx_msg_finish_if_complete(ep, m);
    return;
  case NX_KIND_PEER_GONE:
    if (m->peer) nx_relay_on_gone_locked(ep, m->peer, &m->f);
    m->discard = 1;
    nx_msg_finish_if_complete(ep, m);
    return;
  case NX_KIND_RELAY:
    if (!m->peer || m->peer->relayed || m->peer->rank == ep->rank) { /* only a neighbour's */
      m->discard = 1;
      nx_msg_finish_if_complete(ep, m);
      return;
    }
    nx_relay_arrived_locked(ep, m);
    return;
  case NX_KIND_AGREE:
  case NX_KIND_RPC_REQ:
  case NX_KIND_RNDV_DONE:
  case NX_KIND_SHM_HELLO:
  case NX_KIND_SHM_OK:
    nx_msg_finish_if_complete(ep, m);
    return;
  case NX_KIND_COLL:
    if (nx_coll_check_frame_locked(ep, &m->f)) { /* late frame of a finished collective */
      m->discard = 1;
      nx_msg_release_credit(ep, m);
      nx_msg_finish_if_complete(ep, m);
      return;
    }
    break;
  default:
    break;
  }
  /* a frame of an old view is never delivered (looked up only while some
   * communicator here is revoked: the common path costs nothing) */
  nx_comm *vc = ep->nrevoked_live ? nx_comm_find(ep, m->f.comm_id) : NULL;
  if (vc && atomic_load(&vc->revoked)) {
    if (m->peer) m->peer->st.stale_frames++;
    m->discard = 1;
    nx_msg_release_credit(ep, m);
    nx_msg_finish_if_complete(ep, m);
    return;
  }
  nx_recv *prev = NULL;
  for (nx_recv *r = ep->posted_head; r; prev = r, r = r->next) {
    if (!key_match(&r->key, &m->f, 0)) continue;
    posted_unlink(ep, prev, r);
    if (!size_ok(r, m)) {
      char why[200];
      snprintf(why, sizeof why,
               "recv from rank %u tag %llu: message has %llu bytes, receive asked %llu", m->f.src,
               (unsigned long long)m->f.tag, (unsigned long long)m->f.length,
               (unsigned long long)r->len);
      nx_recv_finish(ep, r, NEXAR_ERR_SIZE_MISMATCH, why);
      break; /* the message stays queued for a receive of the right length */
    }
    bind_msg(ep, m, r);
    return;
  }
  if (m->f.kind == NX_KIND_RPC_RESP) { /* its caller gave up */
    m->discard = 1;
    nx_msg_release_credit(ep, m);
    nx_msg_finish_if_complete(ep, m);
    return;
  }
  /* A descriptor whose sender's cancel overtook it: msg_finish checks one
   * that completes once queued; one that arrives whole (the ring, the lane,
   * a stream ordered after its end) is checked here, or its sender would
   * wait for an answer forever. */
  if (m->complete && nx_rndv_drop_cancelled_locked(ep, m)) return;
  enqueue_unexpected(ep, m);
}

void nx_match_data(nx_ep *ep, nx_msg *m, const uint8_t *data, size_t len) {
  nx_recv *r = m->rcv;
  if (r->anylen) {
    if (m->bufcap < m->got + len) {
      uint64_t cap = m->bufcap ? m->bufcap * 2 : 4096;
      while (cap < m->got + len)
        cap *= 2;
      if (cap > m->f.length) cap = m->f.length;
      uint8_t *b = realloc(m->buf, (size_t)cap);
      if (!b) {
        m->rcv = NULL;
        r->msg = NULL;
        m->discard = 1;
        nx_recv_finish(ep, r, NEXAR_ERR_NOMEM, "out of memory receiving a reply");
        return;
      }
      m->buf = b, m->bufcap = cap;
    }
    memcpy(m->buf + m->got, data, len);
  } else {
    nx_iov_copy_in(r->iov, r->niov, m->got, data, len);
  }
  m->got += len;
  r->got = m->got;
  if (r->req) atomic_store_explicit(&r->req->progress_ns, nx_coarse_ns(), memory_order_relaxed);
}
