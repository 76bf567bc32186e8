/* Same-host lane for small collective frames: one AF_UNIX datagram socket
 * per endpoint (abstract name derived from its random cookie). A frame is one
 * datagram (header + payload), so a message costs one sendmsg and one
 * recvmmsg slot, where QUIC costs a stream, packet protection and ACK
 * bookkeeping: the latency of barriers and small allreduces is mostly that.
 *
 * Only COLL frames (data, or the descriptor of a same-host rendezvous) and
 * rendezvous answers use it: collective match keys (sequence, round,
 * segment) are unique and answers name their rendezvous id, so they need no
 * ordering against the QUIC streams, and any frame the lane cannot take
 * (full socket, peer gone, too large) simply goes by QUIC. Point-to-point
 * keeps QUIC's non-overtaking order.
 *
 * Trust: the kernel stamps each datagram with the sender's pid
 * (SCM_CREDENTIALS); it must be the pid the peer proved in its path hello
 * (it read our cookie with process_vm_readv), and the header's source rank
 * that peer's. The lane is used towards a peer once it answered our ping, so
 * peers in other network namespaces (other abstract socket spaces) never
 * use it. All under ep->mu. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "runtime/cseg.h"
#include "runtime/engine.h"

#define LANE_BATCH 16
#define LANE_BUF (NX_FRAME_HDR_LEN + NX_LANE_MAX)
#define LANE_PING NX_LANE_PING
#define LANE_PONG NX_LANE_PONG

struct nx_lane_rx {
  struct mmsghdr h[LANE_BATCH];
  struct iovec v[LANE_BATCH];
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(4 * sizeof(int))];
  } cm[LANE_BATCH];
  uint8_t data[LANE_BATCH][LANE_BUF];
  int busy;
};

typedef struct nx_lane_owed {
  struct nx_lane_owed *next;
  uint32_t peer;
  nx_frame f;
  int fd; /* a duplicate, or -1 */
} nx_lane_owed;

static socklen_t lane_name(struct sockaddr_un *a, const uint8_t cookie[16]) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "nexar-lane-");
  for (int i = 0; i < 16; i++)
    n += snprintf(a->sun_path + 1 + n, sizeof a->sun_path - 1 - (size_t)n, "%02x", cookie[i]);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int nx_lane_open(nx_ep *ep) {
  ep->lane_fd = -1;
  if (!ep->cfg.bulk_transport || !ep->knobs.lane) return 0; /* NEXAR_LANE=0 */
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0; /* QUIC carries everything */
  struct sockaddr_un a;
  socklen_t al = lane_name(&a, ep->shm_cookie);
  int one = 1, sz = 4 << 20;
  ep->lane_rx = nx_calloc(1, sizeof *ep->lane_rx);
  if (!ep->lane_rx || bind(fd, (struct sockaddr *)&a, al) ||
      setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one)) {
    close(fd);
    free(ep->lane_rx);
    ep->lane_rx = NULL;
    return 0;
  }
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
  ep->lane_fd = fd;
  return 0;
}

void nx_lane_close(nx_ep *ep) {
  while (ep->lane_owed) {
    nx_lane_owed *o = ep->lane_owed;
    ep->lane_owed = o->next;
    if (o->fd >= 0) close(o->fd);
    free(o);
  }
  if (ep->lane_fd >= 0) close(ep->lane_fd);
  ep->lane_fd = -1;
  free(ep->lane_rx);
  ep->lane_rx = NULL;
}

static int send_dgram_fd(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                         size_t niov, int fd) {
  uint8_t hdr[NX_FRAME_HDR_LEN];
  struct iovec v[1 + NX_LANE_MAX_IOV];
  if (niov > NX_LANE_MAX_IOV) return -1;
  nx_frame_encode(f, hdr);
  v[0].iov_base = hdr, v[0].iov_len = sizeof hdr;
  for (size_t i = 0; i < niov; i++)
    v[1 + i].iov_base = iov[i].base, v[1 + i].iov_len = iov[i].len;
  struct msghdr mh = {.msg_name = &p->lane_addr,
                      .msg_namelen = p->lane_addrlen,
                      .msg_iov = v,
                      .msg_iovlen = 1 + niov};
  union {
    struct cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int))];
  } cm;
  if (fd >= 0) { /* a shared-memory segment for this peer alone (shm.c) */
    memset(&cm, 0, sizeof cm);
    mh.msg_control = cm.buf;
    mh.msg_controllen = sizeof cm.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  return sendmsg(ep->lane_fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 ? -1 : 0;
}

static int send_dgram(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                      size_t niov) {
  return send_dgram_fd(ep, p, f, iov, niov, -1);
}

int nx_lane_send_ctl_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, int fd) {
  if (ep->lane_fd < 0 || !p->lane_known) return -1;
  return send_dgram_fd(ep, p, f, NULL, 0, fd);
}

/* Control datagrams that must arrive: one the peer's queue could not take
 * (many ranks pinging at start-up fill it) waits here and every progress
 * pass retries it, in order; without that a pair would never bring its lane
 * (nor its rings, nor a communicator's segment) up. */

static int transient(int e) {
  return e == EAGAIN || e == EWOULDBLOCK || e == ENOBUFS || e == EINTR;
}

int nx_lane_send_ctl_owed_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, int fd) {
  nx_lane_owed **tail = &ep->lane_owed;
  int queued = 0; /* keep the order behind what already waits for this peer */
  for (; *tail; tail = &(*tail)->next)
    queued |= (*tail)->peer == p->rank;
  if (!queued && nx_lane_send_ctl_locked(ep, p, f, fd) == 0) return 0;
  if (!queued && !transient(errno)) return -1;
  nx_lane_owed *o = malloc(sizeof *o);
  if (!o || (fd >= 0 && (o->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)) {
    free(o);
    return -1;
  }
  if (fd < 0) o->fd = -1;
  NX_DEBUG("lane to rank %u: control datagram %d owed", p->rank, f->status);
  o->next = NULL;
  o->peer = p->rank;
  o->f = *f;
  *tail = o;
  return 0;
}

static void retry_owed(nx_ep *ep) {
  uint32_t stuck = UINT32_MAX; /* a peer whose queue is still full: its later ones wait */
  for (nx_lane_owed **pp = &ep->lane_owed; *pp;) {
    nx_lane_owed *o = *pp;
    nx_peer *p = o->peer < ep->world ? ep->peers[o->peer] : NULL;
    int drop = !p || p->state == NX_PEER_DEAD;
    if (!drop && o->peer != stuck) {
      if (nx_lane_send_ctl_locked(ep, p, &o->f, o->fd) == 0)
        drop = 1;
      else if (transient(errno))
        stuck = o->peer;
      else
        drop = 1;
    }
    if (!drop) {
      pp = &o->next;
      continue;
    }
    *pp = o->next;
    if (o->fd >= 0) close(o->fd);
    free(o);
  }
}

static void ping(nx_ep *ep, nx_peer *p, int kind) {
  nx_frame f = {0};
  f.kind = NX_KIND_LANE;
  f.src = ep->rank;
  f.status = kind;
  if (nx_lane_send_ctl_owed_locked(ep, p, &f, -1))
    NX_DEBUG("lane %s to rank %u: %s", kind == LANE_PING ? "ping" : "pong", p->rank,
             strerror(errno));
}

/* Writes every page of the receive buffers once, when the first same-host
 * peer appears. They come zeroed and unmapped from the allocator, and the
 * kernel's first write of a datagram into each slot then faults in the
 * middle of a later receive: on this paravirtualised guest about 18 us a
 * page (`perf` on page_fault_kernel, in _copy_to_iter), and the harness's
 * first 8-byte ping-pong, when batches of doorbells first filled several
 * slots, took 8 of them. */
static void touch_rx(struct nx_lane_rx *rx) {
  memset(rx->data, 0, sizeof rx->data);
}

long nx_lane_rx_absent_locked(const nx_ep *ep) {
  if (!ep->lane_rx) return -1;
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = (uintptr_t)ep->lane_rx->data, end = a + sizeof ep->lane_rx->data;
  uintptr_t lo = a & ~(uintptr_t)(pg - 1);
  size_t n = (end - lo + pg - 1) / pg;
  unsigned char *v = malloc(n);
  if (!v || mincore((void *)lo, n * pg, v)) {
    free(v);
    return -1;
  }
  long absent = 0;
  for (size_t i = 0; i < n; i++)
    absent += !(v[i] & 1);
  free(v);
  return absent;
}

void nx_lane_hello_locked(nx_ep *ep, nx_peer *p, const uint8_t cookie[16]) {
  if (ep->lane_fd < 0) return;
  p->lane_addrlen = lane_name(&p->lane_addr, cookie);
  p->lane_known = 1;
  int first = !ep->lane_live;
  ep->lane_live = 1; /* from now on progress passes read the lane */
  ping(ep, p, LANE_PING);
  if (first) touch_rx(ep->lane_rx); /* after the ping: the peer answers meanwhile */
}

int nx_lane_send_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                        size_t niov, uint64_t len) {
  if (!p->lane_ok || len > NX_LANE_MAX || (f->kind != NX_KIND_COLL && f->kind != NX_KIND_RNDV_DONE))
    return 0;
  if (send_dgram(ep, p, f, iov, niov)) return 0; /* full or gone: QUIC takes it */
  if (!(f->flags & NX_FLAG_RNDV)) {              /* a rendezvous is counted when it is sent */
    p->st.messages_sent++;
    p->st.bytes_sent += len;
  }
  return 1;
}

/* The pid the kernel stamped on a datagram (SCM_CREDENTIALS), or -1; the
 * first fd it carried (SCM_RIGHTS) in *fd, every other one closed. */
static pid_t sender_pid(const struct msghdr *mh, int *fd) {
  pid_t pid = -1;
  *fd = -1;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR((struct msghdr *)mh, c)) {
    if (c->cmsg_level != SOL_SOCKET) continue;
    if (c->cmsg_type == SCM_CREDENTIALS && c->cmsg_len >= CMSG_LEN(sizeof(struct ucred))) {
      struct ucred u;
      memcpy(&u, CMSG_DATA(c), sizeof u);
      pid = u.pid;
    } else if (c->cmsg_type == SCM_RIGHTS) {
      size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; i++) {
        int x;
        memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof x);
        if (*fd < 0)
          *fd = x;
        else
          close(x);
      }
    }
  }
  return pid;
}

int nx_lane_deliver_locked(nx_ep *ep, const uint8_t *d, size_t n, pid_t pid) {
  return nx_lane_deliver_fd_locked(ep, d, n, pid, NULL);
}

int nx_lane_deliver_fd_locked(nx_ep *ep, const uint8_t *d, size_t n, pid_t pid, int *fd) {
  nx_frame f;
  nx_peer *p = NULL;
  uint64_t wire = 0; /* payload bytes: a rendezvous carries its descriptor */
  if (n < NX_FRAME_HDR_LEN || nx_frame_decode(d, NX_FRAME_HDR_LEN, &f) || f.src >= ep->world ||
      f.src == ep->rank)
    return -1;
  p = ep->peers[f.src]; /* the source rank's process, by the kernel's word */
  if (!p->lane_known || !p->same_host || p->shm_pid != pid || p->state != NX_PEER_UP) return -1;
  wire = (f.flags & NX_FLAG_RNDV) ? (uint64_t)f.status : f.length;
  if (wire != n - NX_FRAME_HDR_LEN ||
      (f.kind != NX_KIND_COLL &&
       !((f.kind == NX_KIND_LANE || f.kind == NX_KIND_RNDV_DONE) && f.length == 0)))
    return -1;
  p->last_heard_ns = nx_now_ns();
  if (f.kind == NX_KIND_LANE) {
    if (f.status == NX_LANE_BELL) {
      nx_shm_bell_heard_locked(ep, p);
      return 0;
    }
    if (f.status == NX_LANE_SEG) {
      if (!fd || *fd < 0) return -1;
      int sfd = *fd;
      *fd = -1;
      nx_shm_on_seg_locked(ep, p, sfd);
      return 0;
    }
    if (f.status == NX_LANE_CSEG) {
      if (!fd || *fd < 0) return -1;
      int sfd = *fd;
      *fd = -1;
      nx_cseg_on_offer_locked(ep, p, f.comm_id, f.tag, sfd);
      return 0;
    }
    if (f.status == NX_LANE_SEG_OK) {
      nx_shm_on_seg_ok_locked(ep, p);
      return 0;
    }
    if (f.status == LANE_PONG) {
      if (!p->lane_ok) {
        NX_DEBUG("lane to rank %u up", p->rank);
        p->lane_ok = 1;
        nx_shm_lane_up_locked(ep, p);
      }
    } else if (f.status == LANE_PING) {
      ping(ep, p, LANE_PONG);
      if (!p->lane_ok) ping(ep, p, LANE_PING); /* ours may have come too early */
    } else {
      return -1;
    }
    return 0;
  }
  if (!(f.flags & NX_FLAG_RNDV)) {
    p->st.messages_received++;
    p->st.bytes_received += f.length;
  }
  nexar_iovec v = {(void *)(d + NX_FRAME_HDR_LEN), (size_t)wire};
  if (nx_deliver_complete(ep, p, &f, &v, 1))
    NX_WARN("lane frame from rank %u dropped: %s", p->rank, nexar_last_error());
  return 0;
}

static void on_dgram(nx_ep *ep, struct mmsghdr *h, const uint8_t *d) {
  int fd = -1;
  pid_t pid = sender_pid(&h->msg_hdr, &fd);
  if ((h->msg_hdr.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
      nx_lane_deliver_fd_locked(ep, d, h->msg_len, pid, &fd))
    ep->dropped_datagrams++; /* not from a proven peer, or malformed: ignored */
  if (fd >= 0) close(fd);    /* fds nobody asked for are not kept */
}

static void lane_drain(nx_ep *ep, struct nx_lane_rx *rx);

void nx_lane_recv_locked(nx_ep *ep) {
  struct nx_lane_rx *rx = ep->lane_rx;
  /* no same-host peer (yet): no recvmmsg per progress pass; a busy rx means
   * its buffers are in use up the stack */
  if (ep->lane_fd < 0 || !ep->lane_live || rx->busy) return;
  if (ep->lane_owed) retry_owed(ep);
  rx->busy = 1;
  lane_drain(ep, rx);
  rx->busy = 0;
}

static void lane_drain(nx_ep *ep, struct nx_lane_rx *rx) {
  for (int round = 0; round < 8; round++) {
    /* a receiver far behind on collective data stops reading: senders then
     * find the socket full and fall back to QUIC, whose flow control holds
     * them (user point-to-point data over the budget must not stop
     * collective frames: their receives may come first) */
    if (ep->unexp_coll > ep->unexp_budget) return;
    for (int i = 0; i < LANE_BATCH; i++) {
      rx->v[i].iov_base = rx->data[i];
      rx->v[i].iov_len = LANE_BUF;
      memset(&rx->h[i].msg_hdr, 0, sizeof rx->h[i].msg_hdr);
      rx->h[i].msg_hdr.msg_iov = &rx->v[i];
      rx->h[i].msg_hdr.msg_iovlen = 1;
      rx->h[i].msg_hdr.msg_control = rx->cm[i].buf;
      rx->h[i].msg_hdr.msg_controllen = sizeof rx->cm[i].buf;
    }
    int n = recvmmsg(ep->lane_fd, rx->h, LANE_BATCH, MSG_DONTWAIT | MSG_CMSG_CLOEXEC, NULL);
    for (int i = 0; i < n; i++)
      on_dgram(ep, &rx->h[i], rx->data[i]);
    if (n < LANE_BATCH) return;
  }
}
