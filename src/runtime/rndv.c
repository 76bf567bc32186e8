/* Same-host bulk path: rendezvous. A large message to a peer on this host
 * travels as a small descriptor (pid, addresses, lengths) in its
 * point-to-point order (the ring, or its authenticated QUIC stream), so
 * ordering and matching are unchanged. Once a receive matches it:
 *  - a point-to-point message from a peer with shared-memory rings up, of
 *    the receive's length, streams (ask_stream) or is read with one kernel
 *    copy, as the times the two took say (proto/pick.h, per peer and size:
 *    which is faster depends on where the hypervisor put the two CPUs).
 *    Harness ping-pong between ranks 0 and 1 of 8, 1 MiB: streamed 42-45 us
 *    and single copy 122-132 in the machine's fast state, 450-490 and
 *    490-530 in its slow one (Open MPI's 475 there); picked, 42-45 and
 *    330-400. Streamed, the receiver asks for it
 *    (RNDV_DONE round STREAM), the sender's progress passes write it into
 *    the ring in NX_SHM_PIECE pieces (RNDV_DATA) while the ring holds at
 *    most NX_SHM_STREAM_WINDOW unread, the receiver copies each piece into
 *    the receive as it comes; the send completes once its last piece is in
 *    the ring, the receive with its last piece. A receive given up (timeout,
 *    cancel) answers TIMEOUT, so its sender stops, and drops the pieces
 *    still on their way (engine.h says why a stream beats one kernel copy);
 *  - anything else (collectives, no rings): the receiver copies the bytes
 *    straight from the sender's buffer into its own with one kernel copy
 *    (process_vm_readv: no encryption, no UDP), then tells the sender, whose
 *    request completes. Whether a peer may use it
 * is proven, not guessed: at connection time each side publishes the address
 * and value of a random cookie; a peer that reads the same value through
 * process_vm_readv is on this host and allowed to (same user, ptrace rules),
 * and says so with SHM_OK. All under ep->mu. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/le.h"
#include "runtime/comm.h"
#include "runtime/request.h"
#include "runtime/rndv.h"
#include "transport/vmread.h"

/* round of an RNDV_DONE: a reader's answer, a sender's cancel, or a
 * reader's request that the bytes come through the rings (a stream) */
enum { NX_RNDV_ANSWER = 0, NX_RNDV_CANCEL = 1, NX_RNDV_STREAM = 2, NX_RNDV_REFUSE = 3 };

/* A receive that asked for its message as a stream: the pieces arrive in
 * order, through the sender's ring to us. */
struct nx_rstream {
  nx_rstream *next;
  nx_peer *peer;
  uint64_t id;
  nx_msg *m;  /* the descriptor, freed at the end */
  nx_recv *r; /* pieces are copied under ep->mu; one given up is unlinked first */
  uint64_t got;
  uint64_t t0; /* when it was asked for (its time counts in the peer's rpick) */
};

static void control_round(nx_ep *ep, nx_peer *p, uint8_t kind, uint64_t tag, int32_t status,
                          const void *data, size_t len, uint32_t round) {
  nx_frame f = {0};
  f.kind = kind;
  f.tag = tag;
  f.status = status;
  f.round = round;
  nexar_iovec v = {(void *)data, len};
  if (nx_ep_send_locked(ep, p->rank, &f, &v, len ? 1 : 0, NULL, NULL))
    NX_DEBUG("rendezvous control to rank %u: %s", p->rank, nexar_last_error());
}

static void control(nx_ep *ep, nx_peer *p, uint8_t kind, uint64_t tag, int32_t status,
                    const void *data, size_t len) {
  control_round(ep, p, kind, tag, status, data, len, NX_RNDV_ANSWER);
}

void nx_rndv_answer_locked(nx_ep *ep, nx_peer *p, uint64_t id, int32_t status) {
  control(ep, p, NX_KIND_RNDV_DONE, id, status, NULL, 0);
}

/* The path hello: pid, address and value of our cookie (same host), and our
 * bulk listener's port with the secret this peer must present (other host). */
void nx_rndv_hello_locked(nx_ep *ep, nx_peer *p) {
  if (!ep->cfg.bulk_transport) return;
  uint8_t b[NX_PATH_HELLO_LEN];
  nx_put64(b, (uint64_t)getpid());
  nx_put64(b + 8, (uint64_t)(uintptr_t)ep->shm_cookie);
  memcpy(b + 16, ep->shm_cookie, 16);
  nx_put64(b + 32, ep->bulk_lfd >= 0 ? ep->bulk_port : 0);
  memcpy(b + 40, p->bulk_secret, 32);
  control(ep, p, NX_KIND_SHM_HELLO, 0, 0, b, sizeof b);
}

static int read_remote(pid_t pid, const struct iovec *local, size_t nl, const struct iovec *remote,
                       size_t nr, size_t total) {
  if (pid == getpid()) { /* ranks as threads: a plain copy */
    size_t li = 0, lo = 0;
    for (size_t ri = 0; ri < nr; ri++) {
      const uint8_t *src = remote[ri].iov_base;
      size_t left = remote[ri].iov_len;
      while (left) {
        while (li < nl && lo == local[li].iov_len)
          li++, lo = 0;
        if (li == nl) return -1;
        size_t n = NX_MIN(left, local[li].iov_len - lo);
        memcpy((uint8_t *)local[li].iov_base + lo, src, n);
        src += n, left -= n, lo += n;
      }
    }
    return 0;
  }
  return nx_vm_read(pid, local, nl, remote, nr, total);
}

/* A descriptor is the id, then pid | niov << 32 and niov (address, length)
 * pairs for a same-host reader; pid 0 and no pairs for the TCP path. */
int nx_rndv_send_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                        size_t niov, uint64_t len, nexar_request *req) {
  if (!(p->shm_ok || p->bulk_up) || !req || niov > NX_RNDV_MAX_IOV ||
      (f->kind != NX_KIND_P2P && f->kind != NX_KIND_COLL))
    return 0;
  nx_rndv *rv = nx_calloc(1, sizeof *rv);
  uint8_t desc[16 + 16 * NX_RNDV_MAX_IOV];
  if (!rv) return nx_fail(NEXAR_ERR_NOMEM, "send to rank %u", p->rank);
  rv->id = ++ep->rndv_next;
  rv->req = req;
  rv->peer = p;
  rv->len = len;
  nx_put64(desc, rv->id);
  /* the TCP writer sends from these; a same-host reader may ask for a
   * stream (nx_rndv_read_locked), which the progress passes write from them */
  rv->iov = malloc(niov * sizeof *iov);
  if (!rv->iov) {
    free(rv);
    return nx_fail(NEXAR_ERR_NOMEM, "send to rank %u", p->rank);
  }
  memcpy(rv->iov, iov, niov * sizeof *iov);
  rv->niov = niov;
  rv->tcp = !p->shm_ok;
  if (p->shm_ok) {
    nx_put64(desc + 8, (uint64_t)getpid() | (uint64_t)niov << 32);
    for (size_t i = 0; i < niov; i++) {
      nx_put64(desc + 16 + 16 * i, (uint64_t)(uintptr_t)iov[i].base);
      nx_put64(desc + 24 + 16 * i, iov[i].len);
    }
  } else {
    nx_put64(desc + 8, 0);
    niov = 0;
  }
  nx_frame fr = *f;
  fr.flags |= NX_FLAG_RNDV;
  fr.status = (int32_t)(16 + 16 * niov);
  nx_txmsg *m = NULL;
  nexar_iovec v = {desc, 16 + 16 * niov};
  /* the descriptor goes as an eager message; `length` stays the message's.
   * A collective's may take the same-host lane (its key is unique); a
   * point-to-point one keeps its place in the QUIC order. */
  fr.src = ep->rank;
  fr.length = len;
  int rc = nx_shm_send_desc_locked(ep, p, &fr, &v); /* in point-to-point order */
  if (rc == 1)
    rc = 0;
  else if (rc == 0)
    rc = fr.kind == NX_KIND_COLL && nx_lane_send_locked(ep, p, &fr, &v, 1, v.len)
             ? 0
             : nx_ep_send_raw_locked(ep, p, &fr, &v, 1, len, &m);
  if (rc) {
    free(rv->iov);
    free(rv);
    return rc;
  }
  req->rndv = rv;
  rv->next = ep->rndv_head;
  ep->rndv_head = rv;
  return 1;
}

nx_rndv *nx_rndv_find_locked(nx_ep *ep, nx_peer *p, uint64_t id) {
  for (nx_rndv *rv = ep->rndv_head; rv; rv = rv->next)
    if (rv->id == id && rv->peer == p) return rv;
  return NULL;
}

static void finish(nx_ep *ep, nx_rndv *rv, int rc, const char *why) {
  if (rv->stream)
    for (nx_rndv **pp = &ep->streams; *pp; pp = &(*pp)->snext)
      if (*pp == rv) {
        *pp = rv->snext;
        break;
      }
  if (rv->req) {
    rv->req->rndv = NULL;
    nx_req_complete(rv->req, rc, why);
  }
  free(rv->iov);
  free(rv);
}

void nx_rndv_finish_locked(nx_ep *ep, nx_rndv *rv, int rc, const char *why) {
  for (nx_rndv **pp = &ep->rndv_head; *pp; pp = &(*pp)->next)
    if (*pp == rv) {
      *pp = rv->next;
      break;
    }
  finish(ep, rv, rc, why);
}

/* The copy itself runs without the endpoint lock (gigabytes take seconds,
 * and heartbeats must go on meanwhile), on a pool thread; the receive stays
 * pending, flagged `reading`, so nothing frees its buffer until it is done. */
typedef struct read_job {
  nx_ep *ep;
  nx_msg *m;
  nx_recv *r;
  uint64_t t0; /* (do_read) */
} read_job;

int nx_pool_submit(void (*fn)(void *arg), void *arg);
static int do_read(nx_ep *ep, nx_msg *m, nx_recv *r, int locked, uint64_t t0);

static void read_main(void *arg) {
  read_job *j = arg;
  do_read(j->ep, j->m, j->r, 0, j->t0);
  nx_ep_unref(j->ep);
  free(j);
}

/* A point-to-point message from a peer with rings up may come as a stream
 * (NX_SHM_PIECE): we ask, and take its pieces as they arrive; or, as the
 * peer's rpick says, by do_read (*t0: the clock's start, for its time to
 * count). Anything irregular (another length than the receive's) takes
 * do_read, which says what is wrong. 1 if asked. */
static int ask_stream(nx_ep *ep, nx_msg *m, nx_recv *r, uint64_t *t0) {
  if (m->f.kind != NX_KIND_P2P || m->got < 16 || m->f.length != r->len || !r->len ||
      !nx_shm_streamable_locked(m->peer))
    return 0;
  *t0 = nx_now_ns();
  if (nx_pick_way(&m->peer->rpick, r->len)) return 0;
  nx_rstream *x = calloc(1, sizeof *x);
  if (!x) return *t0 = 0; /* the single copy needs no memory (nor counts) */
  x->peer = m->peer;
  x->id = nx_get64(m->buf);
  x->m = m;
  x->r = r;
  x->t0 = *t0;
  if (x->id > m->peer->rstream_max) m->peer->rstream_max = x->id;
  m->answered = 1; /* the request is the answer; the sender finishes with its last piece */
  nx_rstream **pp = &ep->rstreams;
  while (*pp)
    pp = &(*pp)->next;
  *pp = x;
  control_round(ep, m->peer, NX_KIND_RNDV_DONE, x->id, 0, NULL, 0, NX_RNDV_STREAM);
  return 1;
}

int nx_rndv_on_piece_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *v,
                            size_t nv) {
  nx_rstream **pp = &ep->rstreams;
  while (*pp && ((*pp)->peer != p || (*pp)->id != f->tag))
    pp = &(*pp)->next;
  nx_rstream *x = *pp;
  /* one we gave up (its sender stops once it learns; ids only grow) */
  if (!x && f->tag && f->tag <= p->rstream_max) return 0;
  if (!x || f->count != x->got || f->length > x->r->len - x->got)
    return nx_fail(NEXAR_ERR_PROTOCOL,
                   "rank %u sent %llu bytes at %llu of stream %llu, not asked for", p->rank,
                   (unsigned long long)f->length, (unsigned long long)f->count,
                   (unsigned long long)f->tag);
  nx_recv *r = x->r;
  nx_iovs_copy_in(r->iov, r->niov, x->got, v, nv);
  x->got += f->length;
  if (r->req) atomic_store(&r->req->progress_ns, nx_now_ns());
  if (x->got < r->len) return 0;
  *pp = x->next;
  p->st.messages_received++;
  p->st.bytes_received += r->len;
  nx_pick_done(&p->rpick, r->len, 0, nx_now_ns() - x->t0);
  r->got = r->len;
  nx_recv_finish(ep, r, 0, NULL);
  nx_msg_free(ep, x->m);
  free(x);
  return 0;
}

int nx_rndv_stream_cancel_locked(nx_ep *ep, nx_recv *r) {
  for (nx_rstream **pp = &ep->rstreams; *pp; pp = &(*pp)->next) {
    nx_rstream *x = *pp;
    if (x->r != r) continue;
    *pp = x->next;
    nx_peer *p = x->peer;
    /* its sender finishes with this (TIMEOUT) and writes no more */
    if (p->state == NX_PEER_UP && !ep->stop)
      control(ep, p, NX_KIND_RNDV_DONE, x->id, NEXAR_ERR_TIMEOUT, NULL, 0);
    nx_msg_free(ep, x->m);
    free(x);
    return 1;
  }
  return 0;
}

/* Up to NX_SHM_PIECE bytes of rv's payload from its offset `sent`, as at
 * most 16 pieces of its iov (fewer bytes if it is cut finer): the bytes. */
static uint64_t slice(const nx_rndv *rv, nexar_iovec out[16], size_t *n) {
  uint64_t off = rv->sent, want = NX_MIN(rv->len - rv->sent, (uint64_t)NX_SHM_PIECE), got = 0;
  *n = 0;
  for (size_t i = 0; i < rv->niov && got < want && *n < 16; i++) {
    if (off >= rv->iov[i].len) {
      off -= rv->iov[i].len;
      continue;
    }
    size_t k = (size_t)NX_MIN(rv->iov[i].len - off, want - got);
    out[(*n)++] = (nexar_iovec){(uint8_t *)rv->iov[i].base + off, k};
    got += k;
    off = 0;
  }
  return got;
}

/* Writes rv's pieces while its ring has room: 1 it is done (and freed), 0
 * it waits for room, <0 its peer was dropped (rv freed with the peer's). */
static int push(nx_ep *ep, nx_rndv *rv) {
  while (rv->sent < rv->len) {
    nexar_iovec v[16];
    size_t nv;
    uint64_t len = slice(rv, v, &nv);
    nx_frame f = {0};
    f.kind = NX_KIND_RNDV_DATA;
    f.src = ep->rank;
    f.tag = rv->id;
    f.count = rv->sent;
    f.length = len;
    int rc = nx_shm_put_piece_locked(ep, rv->peer, &f, v, nv, len);
    if (rc <= 0) return rc;
    rv->sent += len;
    if (rv->req) atomic_store(&rv->req->progress_ns, nx_now_ns());
  }
  nx_rndv_finish_locked(ep, rv, 0, NULL); /* all of it is in the ring: copied */
  return 1;
}

void nx_rndv_push_locked(nx_ep *ep) {
  for (nx_rndv *rv = ep->streams, *next; rv; rv = next) {
    next = rv->snext;
    if (push(ep, rv) < 0) next = ep->streams; /* its peer's are gone */
  }
}

/* Our reader asked for rendezvous id as a stream. */
static void on_stream(nx_ep *ep, nx_peer *p, uint64_t id) {
  nx_rndv *rv = nx_rndv_find_locked(ep, p, id);
  if (!rv || rv->stream || rv->writing || rv->tcp) {
    /* not one we can stream: it reads it itself (0), or it has no such
     * message of ours (ABORTED) */
    int code = rv && !rv->writing && !rv->tcp ? 0 : NEXAR_ERR_ABORTED;
    if (!rv || !rv->stream)
      control_round(ep, p, NX_KIND_RNDV_DONE, id, code, NULL, 0, NX_RNDV_REFUSE);
    return;
  }
  rv->stream = 1;
  p->st.bulk_bytes_sent -= rv->len; /* counted as a single copy: ring bytes instead */
  nx_rndv **pp = &ep->streams;
  while (*pp)
    pp = &(*pp)->snext;
  *pp = rv;
  push(ep, rv);
}

/* The sender of stream id refused it: 0, read it with one kernel copy;
 * otherwise the receive fails with that code. */
static void on_refused(nx_ep *ep, nx_peer *p, uint64_t id, int32_t code) {
  for (nx_rstream **pp = &ep->rstreams; *pp; pp = &(*pp)->next) {
    nx_rstream *x = *pp;
    if (x->peer != p || x->id != id) continue;
    *pp = x->next;
    nx_msg *m = x->m;
    nx_recv *r = x->r;
    free(x);
    if (code == 0) {
      m->answered = 0;         /* do_read answers it */
      do_read(ep, m, r, 1, 0); /* (not the way picked: its time does not count) */
      return;
    }
    char why[120];
    snprintf(why, sizeof why, "recv from rank %u: it has no such message to stream (%s)", p->rank,
             nexar_strerror(code));
    nx_recv_finish(ep, r, code, why);
    nx_msg_free(ep, m);
    return;
  }
}

int nx_rndv_read_locked(nx_ep *ep, nx_msg *m, nx_recv *r) {
  if (m->got == 16 && nx_get64(m->buf + 8) == 0) { /* the TCP path: ask for the bytes */
    nx_bulk_pull_locked(ep, m, r, nx_get64(m->buf));
    return 0;
  }
  uint64_t t0 = 0;
  if (ask_stream(ep, m, r, &t0)) return 0;
  /* a copy of up to NX_RNDV_INLINE_MAX takes tens of microseconds: cheaper
   * here than the hand-off to a worker and back */
  if (m->f.length <= NX_RNDV_INLINE_MAX) return do_read(ep, m, r, 1, t0);
  read_job *j = nx_calloc(1, sizeof *j);
  if (j) {
    j->ep = ep, j->m = m, j->r = r, j->t0 = t0;
    r->reading = 1;
    nx_ep_ref(ep);
    if (nx_pool_submit(read_main, j) == 0) return 0;
    atomic_fetch_sub(&ep->refs, 1);
    r->reading = 0;
    free(j);
  }
  return do_read(ep, m, r, 1, t0); /* no worker: copy here, under the lock */
}

/* t0: when a point-to-point receive that could have streamed chose this
 * way (its time counts in the peer's rpick), else 0. */
static int do_read(nx_ep *ep, nx_msg *m, nx_recv *r, int locked, uint64_t t0) {
  const uint8_t *d = m->buf;
  uint64_t id = nx_get64(d), w = nx_get64(d + 8);
  pid_t pid = (pid_t)(uint32_t)w;
  size_t n = (size_t)(w >> 32);
  int rc = 0;
  char why[160] = "";
  struct iovec remote[NX_RNDV_MAX_IOV], local[NX_RNDV_MAX_IOV];
  uint64_t total = 0;
  if (m->got != 16 + 16 * n || n > NX_RNDV_MAX_IOV || r->niov > NX_RNDV_MAX_IOV ||
      !m->peer->same_host || pid != m->peer->shm_pid) {
    rc = NEXAR_ERR_PROTOCOL;
    snprintf(why, sizeof why, "rank %u sent a malformed rendezvous descriptor", m->f.src);
  } else {
    for (size_t i = 0; i < n; i++) {
      remote[i].iov_base = (void *)(uintptr_t)nx_get64(d + 16 + 16 * i);
      remote[i].iov_len = (size_t)nx_get64(d + 24 + 16 * i);
      total += remote[i].iov_len;
    }
    for (size_t i = 0; i < r->niov; i++)
      local[i].iov_base = r->iov[i].base, local[i].iov_len = r->iov[i].len;
    if (total != m->f.length || total != r->len) {
      rc = NEXAR_ERR_PROTOCOL;
      snprintf(why, sizeof why, "rank %u: rendezvous of %llu bytes for a %llu-byte message",
               m->f.src, (unsigned long long)total, (unsigned long long)m->f.length);
    } else {
      /* on a worker without the lock; inline (no worker to be had) it stays
       * under the lock, which may be inside an ngtcp2 callback */
      if (!read_remote(pid, local, r->niov, remote, n, (size_t)total)) goto copied;
      int e = errno;
      /* ESRCH: its process is gone, which is the peer's death, known early */
      rc = e == ESRCH ? NEXAR_ERR_PEER_LOST : NEXAR_ERR_IO;
      snprintf(why, sizeof why, "reading %llu bytes from rank %u (pid %d): %s",
               (unsigned long long)total, m->f.src, (int)pid,
               e == ESRCH ? "its process is gone" : strerror(e));
    }
  }
copied:
  if (!locked) pthread_mutex_lock(&ep->mu);
  if (rc == NEXAR_ERR_PEER_LOST) nx_peer_dead_locked(ep, m->peer, rc, "its process is gone");
  if (m->peer->state != NX_PEER_DEAD) { /* its buffer may be released now */
    m->peer->st.bytes_received += rc ? 0 : total;
    m->peer->st.bulk_bytes_received += rc ? 0 : total;
    if (!rc && t0) nx_pick_done(&m->peer->rpick, total, 1, nx_now_ns() - t0);
    control(ep, m->peer, NX_KIND_RNDV_DONE, id, rc, NULL, 0);
  }
  m->answered = 1;
  if (rc) NX_WARN("%s", why);
  r->got = total;
  r->reading = 0;
  nx_recv_finish(ep, r, rc, rc ? why : NULL);
  nx_msg_free(ep, m);
  if (!locked) pthread_mutex_unlock(&ep->mu);
  return rc;
}

void nx_rndv_cancel_locked(nx_ep *ep, nexar_request *req) {
  nx_rndv *rv = req->rndv;
  if (!rv || rv->cancel_sent) return;
  rv->cancel_sent = 1; /* the request completes when the reader answers */
  control_round(ep, rv->peer, NX_KIND_RNDV_DONE, rv->id, NEXAR_ERR_TIMEOUT, NULL, 0,
                NX_RNDV_CANCEL);
}

static int is_descriptor(const nx_msg *m) {
  return (m->f.flags & NX_FLAG_RNDV) && (m->f.kind == NX_KIND_P2P || m->f.kind == NX_KIND_COLL);
}

/* Drops an unread descriptor and gives its sender the outcome. */
static void drop(nx_ep *ep, nx_msg *m, int code) {
  if (m->queued) nx_match_unqueue(ep, m);
  if (m->got >= 8 && m->peer->state == NX_PEER_UP && !ep->stop)
    control(ep, m->peer, NX_KIND_RNDV_DONE, nx_get64(m->buf), code, NULL, 0);
  m->answered = 1;
  nx_msg_free(ep, m);
}

void nx_rndv_decline_locked(nx_ep *ep, nx_msg *m) {
  if (!is_descriptor(m) || m->answered || m->got < 8) return;
  m->answered = 1;
  /* a collective we gave up because a rank died: the sender learns that
   * cause (PEER_LOST), not a bare ABORTED, even before it sees the death */
  int code = m->f.kind == NX_KIND_COLL ? nx_coll_gave_up_code_locked(ep, m->f.comm_id, m->f.tag)
                                       : NEXAR_ERR_ABORTED;
  if (m->peer->state == NX_PEER_UP && !ep->stop)
    control(ep, m->peer, NX_KIND_RNDV_DONE, nx_get64(m->buf), code, NULL, 0);
}

/* A cancel from the sender: drop its descriptor if no receive took it yet.
 * Each message has its own stream, so the cancel can overtake the end of its
 * descriptor: then it is remembered until the descriptor is complete. */
static void on_cancel(nx_ep *ep, nx_peer *p, uint64_t id) {
  /* matched and streaming: too late to cancel (its sender writes on) */
  for (nx_rstream *x = ep->rstreams; x; x = x->next)
    if (x->peer == p && x->id == id) return;
  for (nx_msg *m = ep->unexp_head; m; m = m->next) {
    if (m->peer != p || !is_descriptor(m) || !m->complete || m->got < 8 || nx_get64(m->buf) != id)
      continue;
    drop(ep, m, NEXAR_ERR_TIMEOUT);
    return;
  }
  /* already read or dropped (its answer went out), or still arriving */
  p->rndv_cancelled[p->ncancelled++ % 8] = id;
}

int nx_rndv_drop_cancelled_locked(nx_ep *ep, nx_msg *m) {
  nx_peer *p = m->peer;
  if (!is_descriptor(m) || m->got < 8 || !p->ncancelled) return 0;
  uint64_t id = nx_get64(m->buf);
  for (unsigned i = 0; i < 8 && i < p->ncancelled; i++)
    if (p->rndv_cancelled[i] == id) {
      p->rndv_cancelled[i] = 0; /* ids start at 1 */
      drop(ep, m, NEXAR_ERR_TIMEOUT);
      return 1;
    }
  return 0;
}

void nx_rndv_on_frame_locked(nx_ep *ep, nx_msg *m) {
  nx_peer *p = m->peer;
  switch (m->f.kind) {
  case NX_KIND_SHM_HELLO:
    if (m->got == NX_PATH_HELLO_LEN && ep->cfg.bulk_transport) {
      uint8_t seen[16];
      struct iovec l = {seen, 16};
      struct iovec r = {(void *)(uintptr_t)nx_get64(m->buf + 8), 16};
      pid_t pid = (pid_t)nx_get64(m->buf);
      int same = pid == getpid() ? 0 == memcmp(r.iov_base, m->buf + 16, 16)
                                 : process_vm_readv(pid, &l, 1, &r, 1, 0) == 16 &&
                                       !memcmp(seen, m->buf + 16, 16);
      NX_DEBUG("rank %u is %son this host", p->rank, same ? "" : "not ");
      p->same_host = same;
      p->shm_pid = pid;
      /* the one place the paths are chosen: memory and the lane on this host
       * (unless NEXAR_BULK_TCP_LOCAL asks to behave as separate hosts), the
       * bulk TCP stream otherwise */
      if (same && !ep->bulk_tcp_local) {
        control(ep, p, NX_KIND_SHM_OK, 0, 0, NULL, 0);
        nx_lane_hello_locked(ep, p, m->buf + 16);
      } else {
        nx_bulk_on_hello_locked(ep, p, (uint16_t)nx_get64(m->buf + 32), m->buf + 40);
      }
    }
    break;
  case NX_KIND_SHM_OK:
    if (!p->shm_ok) atomic_fetch_add(&ep->local_peers, 1);
    p->shm_ok = 1;
    break;
  case NX_KIND_RNDV_DONE:
    if (m->f.round == NX_RNDV_CANCEL) {
      on_cancel(ep, p, m->f.tag);              /* we are the reader: the sender gave up */
    } else if (m->f.round == NX_RNDV_STREAM) { /* our reader asks for a stream */
      on_stream(ep, p, m->f.tag);
    } else if (m->f.round == NX_RNDV_REFUSE) { /* we asked, its sender refuses */
      on_refused(ep, p, m->f.tag, m->f.status);
    } else {
      nx_rndv *rv = nx_rndv_find_locked(ep, p, m->f.tag);
      if (rv && !rv->writing) { /* a bulk writer finishes its own */
        char why[120];
        snprintf(why, sizeof why, "send to rank %u: %s", p->rank,
                 m->f.status == NEXAR_ERR_TIMEOUT     ? "no progress (cancelled before it was read)"
                 : m->f.status == NEXAR_ERR_PEER_LOST ? "it gave the collective up: a rank was lost"
                                                      : nexar_strerror(m->f.status));
        nx_rndv_finish_locked(ep, rv, m->f.status, m->f.status ? why : NULL);
      }
    }
    break;
  default:
    break;
  }
}

void nx_rndv_peer_dead_locked(nx_ep *ep, nx_peer *p, int code, const char *why) {
  for (nx_rndv **pp = &ep->rndv_head; *pp;) {
    nx_rndv *rv = *pp;
    if (rv->peer != p || rv->writing) { /* a bulk writer fails its own */
      pp = &rv->next;
      continue;
    }
    *pp = rv->next;
    finish(ep, rv, code, why);
  }
  for (nx_rstream **pp = &ep->rstreams; *pp;) { /* its streams to us stop */
    nx_rstream *x = *pp;
    if (x->peer != p) {
      pp = &x->next;
      continue;
    }
    *pp = x->next;
    nx_recv_finish(ep, x->r, code, why);
    nx_msg_free(ep, x->m);
    free(x);
  }
  /* its queued descriptors point into a process that is gone */
  for (nx_msg *m = ep->unexp_head, *n; m; m = n) {
    n = m->next;
    if (m->peer == p && (m->f.flags & NX_FLAG_RNDV)) {
      nx_match_unqueue(ep, m);
      m->answered = 1;
      nx_msg_free(ep, m);
    }
  }
  if (p->shm_ok) atomic_fetch_sub(&ep->local_peers, 1);
  p->shm_ok = 0;
}

int nx_rndv_pending_locked(nx_ep *ep) {
  for (nx_rndv *rv = ep->rndv_head; rv; rv = rv->next)
    if (rv->peer->state == NX_PEER_UP) return 1;
  return 0;
}
