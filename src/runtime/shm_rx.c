/* Same-host shared-memory link, the receiving half (shm.c has the rest and
 * says how the link works): records from a peer's ring are validated like
 * network bytes (core/ring.c, then the frame here) before they reach
 * matching or a waiting receive; a malformed one drops the peer with
 * PROTOCOL. Under ep->mu. */

#include <stdio.h>

#include "runtime/request.h"
#include "runtime/shm_int.h"

/* A record as nx_ring_peek hands it out. */
typedef struct shm_rec {
  uint8_t hdr[NX_FRAME_HDR_LEN];
  uint32_t hlen;
  nexar_iovec v[2]; /* the payload, in place */
  size_t nv;
  uint64_t plen, adv;
} shm_rec;

/* The next record from s's peer (nx_ring_peek), its ack applied to our
 * ring to the peer: 0, 1 if none, PROTOCOL. */
static int peek(nx_shm *s, shm_rec *r) {
  uint64_t ack = 0;
  int rc = nx_ring_peek(&s->rx, r->hdr, &r->hlen, r->v, &r->nv, &r->plen, &r->adv, &ack);
  return rc ? rc : nx_ring_acked(&s->tx, ack);
}

/* The frame of a record from p (its header hlen bytes, short or full),
 * validated like network bytes: 0 or PROTOCOL. */
static int record_frame(const nx_peer *p, const uint8_t hdr[NX_FRAME_HDR_LEN], uint32_t hlen,
                        uint64_t plen, nx_frame *f) {
  int rc = hlen == NX_FRAME_SHORT_LEN ? nx_frame_decode_short(hdr, p->rank, plen, f)
           : hlen == NX_FRAME_HDR_LEN ? nx_frame_decode(hdr, NX_FRAME_HDR_LEN, f)
                                      : NEXAR_ERR_PROTOCOL;
  if (rc || f->src != p->rank ||
      (f->kind != NX_KIND_P2P && f->kind != NX_KIND_COLL && f->kind != NX_KIND_RNDV_DONE &&
       f->kind != NX_KIND_RNDV_DATA))
    return NEXAR_ERR_PROTOCOL;
  if (f->kind == NX_KIND_RNDV_DATA &&
      ((f->flags & NX_FLAG_RNDV) || f->length == 0 || f->length > NX_SHM_PIECE))
    return NEXAR_ERR_PROTOCOL;
  if (f->kind == NX_KIND_RNDV_DONE && (f->length || (f->flags & NX_FLAG_RNDV)))
    return NEXAR_ERR_PROTOCOL;
  int rndv = (f->flags & NX_FLAG_RNDV) != 0;
  uint64_t wire = rndv ? (uint64_t)(uint32_t)f->status : f->length;
  if (wire != plen || (rndv && (f->status < 16 || f->status > 16 + 16 * NX_RNDV_MAX_IOV)))
    return NEXAR_ERR_PROTOCOL;
  return 0;
}

static void count_received(nx_peer *p, uint64_t len) {
  p->st.messages_received++;
  p->st.bytes_received += len;
  p->st.shm_bytes_received += len;
  p->last_heard_ns = nx_coarse_ns(); /* failure detection counts seconds */
}

static void deliver(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *v, size_t nv) {
  if (f->flags & NX_FLAG_RNDV)
    p->last_heard_ns = nx_coarse_ns();
  else
    count_received(p, f->length);
  if (nx_deliver_complete(ep, p, f, v, nv))
    NX_WARN("shared-memory frame from rank %u dropped: %s", p->rank, nexar_last_error());
}

/* A validated record: a stream's piece to the receive that asked for it,
 * anything else to matching. 0, or PROTOCOL (a piece nobody asked for). */
static int hand_over(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *v, size_t nv) {
  if (f->kind == NX_KIND_RNDV_DATA) {
    p->last_heard_ns = nx_coarse_ns();
    p->st.shm_bytes_received += f->length;
    return nx_rndv_on_piece_locked(ep, p, f, v, nv);
  }
  deliver(ep, p, f, v, nv);
  return 0;
}

int nx_shm_deliver_locked(nx_ep *ep, nx_peer *p, const uint8_t hdr[NX_FRAME_HDR_LEN], uint32_t hlen,
                          const nexar_iovec *v, size_t nv, uint64_t plen) {
  nx_frame f;
  if (record_frame(p, hdr, hlen, plen, &f)) return NEXAR_ERR_PROTOCOL;
  return hand_over(ep, p, &f, v, nv);
}

int nx_shm_rx_watch_locked(const nx_peer *p, nx_ring_watch *w, uint32_t *pull) {
  if (!p->shm || atomic_load(&p->shm->dead)) return 0;
  nx_ring_watch_of(&p->shm->rx, w);
  *pull = p->shm->rx_pull ? p->shm->rx_pull : NX_RING_PREFIX + NX_FRAME_SHORT_LEN;
  return 1;
}

int nx_shm_recv_now_locked(nx_ep *ep, nx_peer *p, const nx_key *k, const nexar_iovec *iov,
                           size_t niov, uint64_t len) {
  nx_shm *s = p->shm;
  if (!s || s->busy || atomic_load(&s->dead)) return 0;
  shm_rec r;
  int rc = peek(s, &r);
  if (rc == 1) return 0;
  /* the payload's lines are in the writer's cache: ask for all of them at
   * once (up to 4 KiB) while the header is checked, instead of one by one
   * as the copy reaches them */
  for (size_t i = 0; rc == 0 && i < r.nv; i++)
    for (size_t o = 0; o < r.v[i].len && o < 4096; o += 64)
      __builtin_prefetch((const uint8_t *)r.v[i].base + o);
  nx_frame f;
  if (rc || record_frame(p, r.hdr, r.hlen, r.plen, &f)) {
    s->busy = 1; /* as in drain: the peer's teardown must not read it again */
    nx_shm_protocol_locked(ep, s, "malformed record");
    s->busy = 0;
    return NEXAR_ERR_PROTOCOL;
  }
  int key = f.kind == NX_KIND_P2P && f.comm_id == k->comm && f.tag == k->tag;
  if (!key || (f.flags & NX_FLAG_RNDV) || f.length != len) {
    s->busy = 1; /* not one to take: matching has it, as a drain would */
    if (hand_over(ep, p, &f, r.v, r.nv)) {
      nx_shm_protocol_locked(ep, s, "malformed record");
      s->busy = 0;
      return NEXAR_ERR_PROTOCOL;
    }
    s->busy = 0;
    nx_ring_pop(&s->rx, r.adv);
    nx_shm_room_bell_locked(ep, s);
    return key ? 3 : 2;
  }
  nx_iovs_copy_in(iov, niov, 0, r.v, r.nv);
  /* (the record's bytes, not adv, which counts the lap's rest it skipped) */
  uint64_t rec = NX_RING_PREFIX + r.hlen + r.plen;
  s->rx_pull = rec <= NX_RING_PULL_MAX ? (uint32_t)rec : 0;
  count_received(p, len);
  nx_ring_pop(&s->rx, r.adv);
  nx_shm_room_bell_locked(ep, s);
  return 1;
}

int nx_shm_drain_locked(nx_ep *ep, nx_shm *s) {
  if (s->busy || atomic_load(&s->dead)) return 0;
  s->busy = 1;
  int took = 0;
  for (int i = 0; i < 64; i++) {
    shm_rec r;
    int rc = peek(s, &r);
    if (rc == 1) break;
    if (rc == 0) rc = nx_shm_deliver_locked(ep, s->peer, r.hdr, r.hlen, r.v, r.nv, r.plen);
    if (rc) { /* still busy: the peer's teardown must not read it again */
      nx_shm_protocol_locked(ep, s, "malformed record");
      s->busy = 0;
      return took;
    }
    nx_ring_pop(&s->rx, r.adv);
    took = 1;
  }
  s->busy = 0;
  if (took) nx_shm_room_bell_locked(ep, s);
  return took;
}
