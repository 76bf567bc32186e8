/* Relay routing for sparse topologies (API.md "Topologies").
 *
 * A rank connects only to its neighbours (proto/route); a message to any
 * other rank becomes a flow of segments along the route. Each segment is one
 * NX_KIND_RELAY message on one hop: a relay header (core/frame.h), the
 * origin's certificate (first segment only), up to NX_RELAY_SEG bytes of the
 * message as it would go on a stream (frame header, then payload), and the
 * origin's ECDSA signature (transport/pki.h) on the first and the last
 * segment. Every segment's digest (all of it except TTL and signature)
 * extends a chain, R' = SHA-256(R || digest); a signature covers the chain
 * so far, so the first proves the header (before anything is matched) and
 * the last proves every byte of the message: two signatures per message
 * however long (an ECDSA verify costs ~0.4 ms here, one per 128 KiB segment
 * would cap a flow near 300 MB/s). A middle segment altered on the way is
 * found at the last one, which then fails the receive instead of completing
 * it.
 *
 * Why signatures: a relay must not be able to forge or alter what it
 * forwards, and the destination has no connection to the origin whose TLS
 * would vouch for it. Signing needs no key agreement, no seed and no state
 * shared per pair, so it works for joiners and after recoveries alike; the
 * origin's certificate (issued by the cluster CA, naming its rank) travels
 * with the first segment and is checked once per origin. Sequence numbers,
 * which the signature covers, make a replayed or reordered segment fail.
 *
 * Flow control: the destination acknowledges every segment (ACK, relayed
 * back, not signed: a forged ACK can only make the origin send sooner, and
 * each relay's connection windows still bound what it accepts), and the
 * origin keeps at most NX_RELAY_WINDOW segments of a flow unacknowledged.
 * A relay forwards a segment as soon as it has all of it, so a long message
 * is pipelined over the hops and a relay holds flows x window x segment.
 *
 * Order: segments from one neighbour are handled in its stream order (a
 * per-neighbour queue), every node forwards by the same deterministic route,
 * so a flow arrives in order; at the destination each relayed message
 * becomes a virtual stream of its origin (msg.c parses and validates it
 * exactly like network bytes, and matching sees messages in origin order).
 *
 * Failure: a node that loses a neighbour tells its other neighbours
 * (NX_KIND_PEER_GONE, flooded once); every rank then recomputes its routes
 * around the dead set, fails its flows whose path went through the lost
 * rank ("send to rank 7 via relay 3: relay lost") and drops messages that
 * were arriving through it.
 *
 * Closing: any rank may be a relay, so one that closes first waits for the
 * acknowledgements of what it originated, then floods PEER_GONE status 3 and
 * keeps forwarding until every live, reachable rank has done the same
 * (nx_relay_linger_locked, from the endpoint's drain). Progress thread or a
 * driving thread, ep->mu. */
#include <gnutls/crypto.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/comm.h"
#include "runtime/request.h"

struct nx_rflow {
  nx_rflow *next;
  uint32_t dest;
  uint64_t seq;
  uint8_t hdr[NX_FRAME_HDR_LEN];
  uint8_t *data;    /* owned copy of the payload, or NULL (zero-copy) */
  nexar_iovec *iov; /* the payload (the copy's iovec, or the caller's) */
  size_t niov;
  uint64_t total; /* header + payload */
  uint64_t sent, acked;
  uint8_t chain[32];  /* digest chain of the segments emitted so far */
  nexar_request *req; /* zero-copy: completes when the destination has it all */
  uint32_t *path;     /* the hops after this rank, ending with dest */
  uint32_t npath;
  uint8_t ttl;
};

struct nx_rin {
  nx_rin *next;
  uint64_t seq, off, total;
  uint8_t chain[32]; /* digest chain of the segments received so far */
  nx_rxstream *rs;   /* the virtual stream the message is parsed from */
};

static const uint8_t SIG_CONTEXT[] = "nexar relay v1";

/* The dead set as the route sees it: dead or absent peers, except `alive`. */
static uint8_t *dead_set(nx_ep *ep, uint32_t alive) {
  uint8_t *d = nx_calloc(ep->world ? ep->world : 1, 1);
  if (!d) return NULL;
  for (uint32_t j = 0; j < ep->world; j++)
    d[j] = j != alive && ep->peers[j]->state == NX_PEER_DEAD;
  return d;
}

static int rebuild_route(nx_ep *ep) {
  uint8_t *dead = dead_set(ep, UINT32_MAX);
  if (!dead) return NEXAR_ERR_NOMEM;
  nx_route nr;
  int rc = nx_route_build(&nr, ep->route.topology, ep->route.degree, ep->world, ep->rank, dead);
  free(dead);
  if (rc) return rc;
  nx_route_free(&ep->route);
  ep->route = nr;
  return 0;
}

int nx_relay_start(nx_ep *ep, gnutls_certificate_credentials_t creds) {
  int topo = ep->cfg.topology;
  if (topo == NEXAR_TOPO_FULL_MESH) return 0;
  char why[160];
  int rc = nx_topo_check(topo, ep->cfg.topology_degree, ep->world, why, sizeof why);
  if (rc) return nx_fail(rc, "%s", why);
  ep->route.topology = topo;
  ep->route.degree = ep->cfg.topology_degree;
  if (rebuild_route(ep)) return nx_fail(NEXAR_ERR_NOMEM, "routes for %u ranks", ep->world);
  for (uint32_t j = 0; j < ep->world; j++) {
    nx_peer *p = ep->peers[j];
    if (j == ep->rank || p->state == NX_PEER_DEAD || nx_route_adjacent(&ep->route, ep->rank, j))
      continue;
    p->relayed = 1;
    p->state = NX_PEER_UP; /* reachable through the others: nothing to dial */
  }
  return nx_signer_new(&ep->signer, creds, ep->cluster_id);
}

/* ------------------------------------------------------------- hashing */

/* SHA-256 over the context, the cluster, the header without TTL and
 * signature length, and body (certificate + data). */
static int seg_hash(nx_ep *ep, const nx_relay_hdr *h, const uint8_t *body, size_t n,
                    uint8_t out[32]) {
  nx_relay_hdr c = *h;
  c.ttl = 0;
  c.siglen = 0;
  uint8_t hb[NX_RELAY_HDR_LEN];
  nx_relay_hdr_encode(&c, hb);
  gnutls_hash_hd_t hd;
  if (gnutls_hash_init(&hd, GNUTLS_DIG_SHA256) < 0) return NEXAR_ERR_TLS;
  gnutls_hash(hd, SIG_CONTEXT, sizeof SIG_CONTEXT);
  gnutls_hash(hd, ep->cluster_id, 16);
  gnutls_hash(hd, hb, sizeof hb);
  gnutls_hash(hd, body, n);
  gnutls_hash_deinit(hd, out);
  return 0;
}

/* chain = SHA-256(chain || digest) */
static int chain_step(uint8_t chain[32], const uint8_t digest[32]) {
  uint8_t in[64];
  memcpy(in, chain, 32);
  memcpy(in + 32, digest, 32);
  return gnutls_hash_fast(GNUTLS_DIG_SHA256, in, sizeof in, chain) < 0 ? NEXAR_ERR_TLS : 0;
}

/* ------------------------------------------------------------- sending */

/* Queues one relay payload (owned by the engine from here) to neighbour hop. */
static int send_body(nx_ep *ep, uint32_t hop, uint8_t *body, size_t len, int forwarded) {
  nx_frame f = {0};
  f.kind = NX_KIND_RELAY;
  return nx_ep_send_owned_locked(ep, ep->peers[hop], &f, body, len, forwarded ? len : 0);
}

static void gather(const nx_rflow *f, uint64_t off, uint8_t *dst, uint64_t n) {
  while (n && off < NX_FRAME_HDR_LEN) {
    *dst++ = f->hdr[off++];
    n--;
  }
  off -= NX_FRAME_HDR_LEN;
  for (size_t i = 0; n && i < f->niov; i++) {
    if (off >= f->iov[i].len) {
      off -= f->iov[i].len;
      continue;
    }
    uint64_t take = NX_MIN(n, f->iov[i].len - off);
    memcpy(dst, (const uint8_t *)f->iov[i].base + off, (size_t)take);
    dst += take, n -= take, off = 0;
  }
}

/* The DATA segment of flow f at f->sent (malloc'd, *len bytes); extends
 * f->chain, and the first and last are signed over it. */
static int build_segment(nx_ep *ep, nx_rflow *f, uint8_t **out, size_t *len) {
  uint64_t n = NX_MIN((uint64_t)NX_RELAY_SEG, f->total - f->sent);
  size_t certlen = 0;
  const uint8_t *cert = f->sent == 0 ? nx_signer_cert(ep->signer, &certlen) : NULL;
  if (certlen > NX_RELAY_CERT_MAX) return nx_fail(NEXAR_ERR_TLS, "relay: own certificate too long");
  size_t cap = NX_RELAY_HDR_LEN + certlen + (size_t)n + NX_SIG_MAX;
  uint8_t *b = malloc(cap);
  if (!b) return nx_fail(NEXAR_ERR_NOMEM, "relay to rank %u: a segment", f->dest);
  nx_relay_hdr h = {NX_RELAY_DATA, f->ttl,  ep->rank, f->dest,           (uint32_t)n,
                    f->seq,        f->sent, f->total, (uint16_t)certlen, 0};
  if (certlen) memcpy(b + NX_RELAY_HDR_LEN, cert, certlen);
  gather(f, f->sent, b + NX_RELAY_HDR_LEN + certlen, n);
  uint8_t hash[32];
  size_t siglen = 0;
  int sign = f->sent == 0 || f->sent + n == f->total;
  int rc = seg_hash(ep, &h, b + NX_RELAY_HDR_LEN, certlen + (size_t)n, hash);
  if (!rc) rc = chain_step(f->chain, hash);
  if (!rc && sign)
    rc = nx_signer_sign(ep->signer, f->chain, b + NX_RELAY_HDR_LEN + certlen + n, &siglen);
  if (rc) {
    free(b);
    return rc;
  }
  h.siglen = (uint16_t)siglen;
  nx_relay_hdr_encode(&h, b);
  *out = b;
  *len = NX_RELAY_HDR_LEN + certlen + (size_t)n + siglen;
  return 0;
}

/* Signs and queues the flow's next segment. */
static int emit(nx_ep *ep, nx_rflow *f) {
  uint8_t *b;
  size_t len;
  int rc = build_segment(ep, f, &b, &len);
  if (!rc) rc = send_body(ep, f->path[0], b, len, 0);
  if (rc) return rc;
  f->sent += NX_MIN((uint64_t)NX_RELAY_SEG, f->total - f->sent);
  return 0;
}

int nx_relay_test_message(nx_ep *ep, uint32_t dest, uint64_t seq, const nx_frame *fr,
                          const void *payload, size_t len, uint8_t **segs, size_t *lens,
                          size_t cap) {
  if (!ep->signer) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "relay test message");
  nx_rflow f = {0};
  nexar_iovec v = {(void *)payload, len};
  nx_frame x = *fr;
  x.src = ep->rank;
  x.length = len;
  nx_frame_encode(&x, f.hdr);
  f.iov = &v;
  f.niov = 1;
  f.dest = dest;
  f.seq = seq;
  f.total = NX_FRAME_HDR_LEN + len;
  f.ttl = 8;
  size_t k = 0;
  while (f.sent < f.total) {
    if (k == cap) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "relay test message: %zu segments", k);
    int rc = build_segment(ep, &f, &segs[k], &lens[k]);
    if (rc) return rc;
    f.sent += NX_MIN((uint64_t)NX_RELAY_SEG, f.total - f.sent);
    k++;
  }
  return (int)k;
}

static void flow_free(nx_ep *ep, nx_rflow *f, int rc, const char *why) {
  for (nx_rflow **pp = &ep->rflows; *pp; pp = &(*pp)->next)
    if (*pp == f) {
      *pp = f->next;
      break;
    }
  if (f->req) {
    f->req->rflow = NULL;
    nx_req_complete(f->req, rc, why);
  }
  free(f->data);
  free(f->iov);
  free(f->path);
  free(f);
}

/* Emits what the window allows; a failure fails the flow. */
static void pump(nx_ep *ep, nx_rflow *f) {
  while (f->sent < f->total && f->sent - f->acked < (uint64_t)NX_RELAY_WINDOW * NX_RELAY_SEG) {
    int rc = emit(ep, f);
    if (rc) {
      flow_free(ep, f, rc, nexar_last_error());
      return;
    }
  }
}

int nx_relay_send_locked(nx_ep *ep, uint32_t dest, const nx_frame *fr, const nexar_iovec *iov,
                         size_t niov, uint64_t len, nexar_request *req) {
  nx_peer *p = ep->peers[dest];
  uint32_t dist = ep->route.dist ? ep->route.dist[dest] : UINT32_MAX;
  if (dist == UINT32_MAX)
    return nx_fail(NEXAR_ERR_PEER_LOST,
                   "send to rank %u: unreachable (the live graph is partitioned)", dest);
  nx_rflow *f = nx_calloc(1, sizeof *f);
  if (!f) return nx_fail(NEXAR_ERR_NOMEM, "relay to rank %u", dest);
  f->path = malloc((size_t)dist * sizeof *f->path);
  uint8_t *dead = dead_set(ep, UINT32_MAX);
  if (f->path && dead)
    f->npath = nx_route_path(ep->route.topology, ep->route.degree, ep->world, dead, ep->rank, dest,
                             f->path, dist);
  free(dead);
  int copy = !req || len <= NX_EAGER_MAX;
  if (copy && len) f->data = malloc((size_t)len);
  f->niov = copy ? 1 : niov;
  f->iov = malloc(f->niov * sizeof *f->iov);
  if (f->npath != dist || !f->iov || (copy && len && !f->data)) {
    free(f->path), free(f->data), free(f->iov), free(f);
    return nx_fail(NEXAR_ERR_NOMEM, "relay to rank %u: %llu bytes", dest, (unsigned long long)len);
  }
  if (copy) {
    uint64_t off = 0;
    for (size_t i = 0; i < niov; i++) {
      if (iov[i].len) memcpy(f->data + off, iov[i].base, iov[i].len);
      off += iov[i].len;
    }
    f->iov[0] = (nexar_iovec){f->data, (size_t)len};
  } else {
    memcpy(f->iov, iov, niov * sizeof *iov);
    f->req = req;
    req->rflow = f; /* a timeout or close cancels the flow (nx_relay_cancel_locked) */
  }
  nx_frame_encode(fr, f->hdr);
  f->dest = dest;
  f->seq = p->relay_seq++;
  f->total = NX_FRAME_HDR_LEN + len;
  f->ttl = (uint8_t)NX_MIN(dist + 2, 255u);
  f->next = ep->rflows;
  ep->rflows = f;
  p->st.messages_sent++;
  p->st.bytes_sent += len;
  if (copy && req) nx_req_complete(req, 0, NULL); /* the data was copied */
  pump(ep, f);
  return 0;
}

/* An ACK (type NX_RELAY_ACK) or RESET (NX_RELAY_RESET) of message seq. */
static void send_ctl(nx_ep *ep, int type, uint32_t to, uint64_t seq, uint64_t off, uint64_t total) {
  uint32_t hop = nx_route_next_hop(&ep->route, to);
  if (hop == UINT32_MAX || hop == ep->rank) return;
  uint8_t *b = malloc(NX_RELAY_HDR_LEN);
  if (!b) return; /* an ACK: the origin's window stalls, its operation times out */
  nx_relay_hdr h = {(uint8_t)type,
                    (uint8_t)NX_MIN(ep->route.dist[to] + 2, 255u),
                    ep->rank,
                    to,
                    0,
                    seq,
                    off,
                    total,
                    0,
                    0};
  nx_relay_hdr_encode(&h, b);
  send_body(ep, hop, b, NX_RELAY_HDR_LEN, 0);
}

/* ------------------------------------------------------------ receiving */

static void rin_unlink(nx_peer *o, nx_rin *x) {
  for (nx_rin **pp = &o->rin; *pp; pp = &(*pp)->next)
    if (*pp == x) {
      *pp = x->next;
      return;
    }
}

/* Drops a message arriving from o through a lost path: its receive fails. */
static void rin_abort(nx_ep *ep, nx_peer *o, nx_rin *x, int code, const char *why) {
  rin_unlink(o, x);
  nx_msg *m = x->rs->msg;
  if (m && m->rcv) {
    nx_recv *r = m->rcv;
    m->rcv = NULL;
    r->msg = NULL;
    m->discard = 1;
    nx_recv_finish(ep, r, code, why);
  }
  nx_rx_stream_close(ep, x->rs);
  free(x);
}

/* A DATA segment for this rank. */
static void on_data(nx_ep *ep, const nx_relay_hdr *h, const uint8_t *body) {
  nx_peer *o = h->origin < ep->world ? ep->peers[h->origin] : NULL;
  if (!o || !o->relayed || o->state == NX_PEER_DEAD || !ep->signer) {
    ep->relay_drop_auth++; /* a neighbour's messages come directly */
    NX_DEBUG("relay: dropped a segment from rank %u (%s)", h->origin,
             o && o->state == NX_PEER_DEAD ? "lost" : "a neighbour");
    return;
  }
  const uint8_t *data = body + h->certlen, *sig = data + h->seglen;
  nx_rin *x = NULL;
  for (nx_rin *i = o->rin; i; i = i->next)
    if (i->seq == h->seq) x = i;
  int fresh = h->offset == 0 && !x && h->seq >= o->rin_seq;
  if (!fresh && (!x || x->off != h->offset || x->total != h->total)) {
    ep->relay_drop_auth++; /* replayed, reordered or out of a finished message */
    NX_WARN("relay: dropped segment %llu@%llu of message %llu from rank %u: out of sequence",
            (unsigned long long)h->offset, (unsigned long long)h->total, (unsigned long long)h->seq,
            h->origin);
    return;
  }
  uint8_t hash[32], chain[32] = {0};
  if (x) memcpy(chain, x->chain, 32);
  int bad = seg_hash(ep, h, body, (size_t)h->certlen + h->seglen, hash) || chain_step(chain, hash);
  if (!bad && h->siglen)
    bad = nx_signer_verify(ep->signer, h->origin, h->certlen ? body : NULL, h->certlen, chain, sig,
                           h->siglen) != 0;
  if (bad) {
    ep->relay_drop_auth++;
    NX_WARN("relay: dropped a segment claiming rank %u: %s", h->origin, nexar_last_error());
    if (x) { /* a middle segment was altered: the message is not the origin's */
      char why[160];
      snprintf(why, sizeof why,
               "relayed message from rank %u: its signature does not match (altered on the way)",
               h->origin);
      rin_abort(ep, o, x, NEXAR_ERR_PROTOCOL, why);
    }
    return;
  }
  if (fresh) { /* a new message */
    x = nx_calloc(1, sizeof *x);
    if (x) nx_rx_stream_open(ep, o, o->relay_sid, &x->rs);
    if (!x || !x->rs) {
      free(x);
      nx_peer_dead_locked(ep, o, NEXAR_ERR_NOMEM, "out of memory for a relayed message");
      return;
    }
    o->relay_sid += 4;
    o->rin_seq = h->seq + 1;
    x->seq = h->seq;
    x->total = h->total;
    x->next = o->rin;
    o->rin = x;
  }
  memcpy(x->chain, chain, 32);
  uint64_t credit, held;
  int fin = h->offset + h->seglen == h->total;
  int rc = nx_rx_stream_data(ep, x->rs, data, h->seglen, fin, &credit, &held);
  if (rc) { /* signed by the origin: it sent malformed bytes */
    char why[200];
    snprintf(why, sizeof why, "relayed: %s", nexar_last_error());
    nx_peer_dead_locked(ep, o, rc, why);
    return;
  }
  x->off += h->seglen;
  send_ctl(ep, NX_RELAY_ACK, h->origin, h->seq, x->off, h->total);
  if (fin) {
    rin_unlink(o, x);
    nx_rx_stream_close(ep, x->rs);
    free(x);
  }
}

void nx_relay_cancel_locked(nx_ep *ep, nexar_request *req, int rc, const char *why) {
  nx_rflow *f = req->rflow;
  if (!f) return;
  if (f->sent) send_ctl(ep, NX_RELAY_RESET, f->dest, f->seq, f->sent, f->total);
  flow_free(ep, f, rc, why);
}

/* The origin gave up a message: its receive ends as with a reset stream. */
static void on_reset(nx_ep *ep, const nx_relay_hdr *h) {
  nx_peer *o = ep->peers[h->origin];
  for (nx_rin *x = o->rin; x; x = x->next)
    if (x->seq == h->seq) {
      char why[160];
      snprintf(why, sizeof why, "rank %u cancelled the message after %llu of %llu bytes", h->origin,
               (unsigned long long)x->off, (unsigned long long)x->total);
      rin_abort(ep, o, x, NEXAR_ERR_TIMEOUT, why);
      return;
    }
}

static void on_ack(nx_ep *ep, const nx_relay_hdr *h) {
  for (nx_rflow *f = ep->rflows; f; f = f->next) {
    if (f->dest != h->origin || f->seq != h->seq) continue;
    if (h->offset > f->sent || h->offset <= f->acked) return;
    f->acked = h->offset;
    if (f->req) atomic_store(&f->req->progress_ns, nx_now_ns()); /* the timeout counts progress */
    if (f->acked == f->total)
      flow_free(ep, f, 0, NULL);
    else
      pump(ep, f);
    return;
  }
}

int nx_relay_deliver_locked(nx_ep *ep, nx_peer *from, const uint8_t *body, size_t len) {
  nx_relay_hdr h;
  if (!ep->route.topology || nx_relay_hdr_decode(body, len, &h) || h.certlen > NX_RELAY_CERT_MAX ||
      h.seglen > NX_RELAY_SEG || h.siglen > NX_SIG_MAX || h.origin >= ep->world ||
      h.dest >= ep->world || h.origin == h.dest)
    return nx_fail(NEXAR_ERR_PROTOCOL, "malformed relay segment from rank %u", from->rank);
  if (h.dest == ep->rank) {
    if (h.type == NX_RELAY_DATA)
      on_data(ep, &h, body + NX_RELAY_HDR_LEN);
    else if (ep->peers[h.origin]->relayed && h.type == NX_RELAY_ACK)
      on_ack(ep, &h);
    else if (ep->peers[h.origin]->relayed)
      on_reset(ep, &h);
    return 0;
  }
  if (h.ttl <= 1) {
    ep->relay_drop_ttl++;
    NX_DEBUG("relay: TTL ran out for rank %u -> %u", h.origin, h.dest);
    return 0;
  }
  uint32_t hop = nx_route_next_hop(&ep->route, h.dest);
  if (hop == UINT32_MAX || hop == from->rank || ep->peers[hop]->state == NX_PEER_DEAD ||
      ep->peers[hop]->relayed) { /* still connecting is fine: the segment waits in its queue */
    ep->relay_drop_route++;
    NX_DEBUG("relay: no route onwards for rank %u -> %u (hop %u)", h.origin, h.dest, hop);
    return 0;
  }
  uint8_t *b = malloc(len);
  if (!b) {
    ep->relay_drop_route++;
    return 0;
  }
  memcpy(b, body, len);
  b[2] = (uint8_t)(h.ttl - 1);
  if (send_body(ep, hop, b, len, 1) == 0) {
    ep->relay_forwarded += len;
    ep->peers[hop]->st.relayed_bytes += len;
  }
  return 0;
}

/* Handles complete RELAY messages of neighbour p in its stream order. */
static void drain(nx_ep *ep, nx_peer *p) {
  while (p->relq_head && p->relq_head->complete) {
    nx_msg *m = p->relq_head;
    p->relq_head = m->next;
    if (!p->relq_head) p->relq_tail = NULL;
    m->relq = 0;
    int rc = m->discard ? 0 : nx_relay_deliver_locked(ep, p, m->buf, (size_t)m->got);
    nx_msg_free(ep, m);
    if (rc) {
      nx_peer_dead_locked(ep, p, rc, nexar_last_error()); /* frees the rest of its queue */
      return;
    }
  }
}

void nx_relay_arrived_locked(nx_ep *ep, nx_msg *m) {
  nx_peer *p = m->peer;
  if (!m->relq) {
    m->relq = 1;
    m->next = NULL;
    if (p->relq_tail)
      p->relq_tail->next = m;
    else
      p->relq_head = m;
    p->relq_tail = m;
  }
  drain(ep, p);
}

/* ------------------------------------------------------------- failures */

/* Tells every up neighbour but `except` that rank `tag` died (1), left (2)
 * or is closing (3). */
static void flood_gone(nx_ep *ep, uint32_t tag, uint32_t status, uint32_t except) {
  nx_frame f = {0};
  f.kind = NX_KIND_PEER_GONE;
  f.tag = tag;
  f.status = status;
  for (uint32_t j = 0; j < ep->world; j++) {
    nx_peer *p = ep->peers[j];
    if (j != ep->rank && j != except && !p->relayed && p->state == NX_PEER_UP)
      nx_ep_send_locked(ep, j, &f, NULL, 0, NULL, NULL);
  }
}

int nx_relay_linger_locked(nx_ep *ep) {
  /* a world that never formed: nobody relies on us, and ranks that never
   * connected would hold us to the timeout */
  if (!ep->route.topology || !ep->formed) return 0;
  if (ep->rflows) return 1;
  if (ep->world_inproc) return 0;
  if (!ep->closing_sent) {
    ep->closing_sent = 1;
    flood_gone(ep, ep->rank, 3, UINT32_MAX);
    return 1; /* the notices just queued: the caller waits for them to go */
  }
  for (uint32_t j = 0; j < ep->world; j++) {
    const nx_peer *p = ep->peers[j];
    if (j != ep->rank && !p->closing && p->state != NX_PEER_DEAD && ep->route.dist &&
        ep->route.dist[j] != UINT32_MAX)
      return 1;
  }
  return 0;
}

void nx_relay_on_gone_locked(nx_ep *ep, nx_peer *from, const nx_frame *f) {
  if (!ep->route.topology || f->tag >= ep->world || f->tag == ep->rank) return;
  nx_peer *x = ep->peers[f->tag];
  if (f->status == 3) { /* a neighbour's too: flooded once, like the others */
    if (x->closing) return;
    x->closing = 1;
    flood_gone(ep, x->rank, 3, from->rank);
    pthread_cond_broadcast(&ep->cv);
    return;
  }
  if (!x->relayed || x->state == NX_PEER_DEAD) return; /* a neighbour: our own heartbeat decides */
  if (f->status == 2) {
    nx_peer_departed_locked(ep, x);
    return;
  }
  char why[96];
  snprintf(why, sizeof why, "reported lost by rank %u", from->rank);
  nx_peer_dead_locked(ep, x, NEXAR_ERR_PEER_LOST, why);
}

/* 1 if the path from src to dst over the live graph (with x still alive)
 * goes through x. */
static int path_has(nx_ep *ep, const uint8_t *dead, uint32_t src, uint32_t dst, uint32_t x) {
  uint32_t buf[64], *path = ep->world <= 64 ? buf : malloc(ep->world * sizeof *path);
  if (!path) return 1; /* cannot tell: treat it as lost */
  uint32_t n = nx_route_path(ep->route.topology, ep->route.degree, ep->world, dead, src, dst, path,
                             ep->world);
  int has = n == 0;
  for (uint32_t i = 0; i + 1 < n; i++)
    has |= path[i] == x;
  if (path != buf) free(path);
  return has;
}

void nx_relay_peer_lost_locked(nx_ep *ep, nx_peer *x) {
  if (!ep->route.topology) return;
  while (x->relq_head) { /* its half-arrived segments */
    nx_msg *m = x->relq_head;
    x->relq_head = m->next;
    m->relq = 0;
    nx_msg_free(ep, m);
  }
  x->relq_tail = NULL;
  uint8_t *dead = dead_set(ep, x->rank);
  char why[256];
  for (nx_rflow *f = ep->rflows, *n; f; f = n) {
    n = f->next;
    int via = 0;
    for (uint32_t i = 0; i + 1 < f->npath; i++)
      via |= f->path[i] == x->rank;
    if (f->dest == x->rank)
      snprintf(why, sizeof why, "send to rank %u: peer lost (%s)", f->dest, x->why);
    else if (via)
      snprintf(why, sizeof why, "send to rank %u via relay %u: relay lost (%s)", f->dest, x->rank,
               x->why);
    else
      continue;
    flow_free(ep, f, f->dest == x->rank ? x->dead_code : NEXAR_ERR_PEER_LOST, why);
  }
  for (uint32_t j = 0; j < ep->world; j++) {
    nx_peer *o = ep->peers[j];
    for (nx_rin *r = o->rin, *n; r; r = n) {
      n = r->next;
      if (o == x) { /* its streams went with its other traffic */
        rin_unlink(o, r);
        free(r);
        continue;
      }
      if (dead && !path_has(ep, dead, j, ep->rank, x->rank)) continue;
      snprintf(why, sizeof why, "message from rank %u via relay %u: relay lost (%s)", j, x->rank,
               x->why);
      rin_abort(ep, o, r, NEXAR_ERR_PEER_LOST, why);
    }
  }
  free(dead);
  if (rebuild_route(ep)) NX_WARN("relay: no memory to recompute routes around rank %u", x->rank);
  nx_agr_check_partition_locked(ep); /* a recovery over a split graph cannot succeed */
  flood_gone(ep, x->rank, x->departed ? 2 : 1, UINT32_MAX);
}

uint32_t nx_relay_partitioned_locked(nx_ep *ep, const nx_comm *c, char *why, size_t cap) {
  if (!ep->route.topology || !ep->route.hop) return 0;
  uint32_t k = 0;
  size_t o = (size_t)snprintf(why, cap, "the live graph is partitioned: rank(s)");
  for (uint32_t i = 0; i < c->size; i++) {
    uint32_t id = c->members[i];
    if (id == ep->rank || id >= ep->world || ep->peers[id]->state == NX_PEER_DEAD ||
        ep->route.hop[id] != UINT32_MAX)
      continue;
    k++;
    if (o + 16 < cap) o += (size_t)snprintf(why + o, cap - o, " %u", i);
  }
  if (o < cap) snprintf(why + o, cap - o, " unreachable from rank %u", c->rank);
  return k;
}

void nx_relay_free(nx_ep *ep) {
  while (ep->rflows)
    flow_free(ep, ep->rflows, NEXAR_ERR_ABORTED, "send: endpoint closed");
  for (uint32_t j = 0; ep->peers && j < ep->world; j++) {
    nx_peer *p = ep->peers[j];
    while (p->rin) {
      nx_rin *r = p->rin;
      p->rin = r->next;
      free(r); /* its stream is on ep->rx_all */
    }
    while (p->relq_head) {
      nx_msg *m = p->relq_head;
      p->relq_head = m->next;
      m->relq = 0;
      nx_msg_free(ep, m);
    }
    p->relq_tail = NULL;
  }
  nx_signer_del(ep->signer);
  ep->signer = NULL;
}
