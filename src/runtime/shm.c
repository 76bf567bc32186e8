/* Same-host shared-memory link: per-pair SPSC rings (core/ring.h) in one
 * memfd segment, for point-to-point messages up to NX_SHM_EAGER_MAX, the
 * descriptors of larger ones and then their bytes as a stream of pieces
 * once the receive matched (rndv.c), collective frames up to
 * NX_RNDV_COLL_MIN and rendezvous answers.
 *
 * Setup. Once the lane to a peer is up (it proved with process_vm_readv that
 * it is on this host and reads our memory, and its lane datagrams carry the
 * pid the kernel stamps), the lower rank creates the segment: a memfd sealed
 * against shrinking and growing (so the peer can never make our mapping
 * fault), sent with SCM_RIGHTS in a lane datagram. The fd reaches only the
 * socket named by the peer's cookie, and the receiver accepts it only from
 * the proven pid of the lower rank; no file in the file system names it.
 * (Why not /proc/<pid>/fd: opening another process's fd needs ptrace rights
 * which hardened hosts deny, and the lane already authenticates the pid.)
 * The receiver checks the size and the seals before it maps, answers
 * LANE_SEG_OK, and both sides then send by the ring.
 *
 * Order. Point-to-point keeps MPI's non-overtaking order: the first message
 * to a peer goes by the ring only when nothing of ours to it is on a QUIC
 * stream any more (every stream acknowledged, so the receiver ordered it);
 * from then on every point-to-point message to it goes by the ring, waiting
 * in order in a backlog while the ring is full (the data is copied: eager
 * semantics). Collective frames need no order (unique keys): they take the
 * ring when it has room, else the lane or QUIC as before.
 *
 * Waking. Readers poll the rings on every progress pass. A thread about to
 * sleep counts itself in each inbound ring's `waiters`, then looks on for
 * NX_RING_GRACE_NS (ring.h says why); a writer that sees waiters after
 * publishing sends one lane datagram (the doorbell), which wakes the epoll
 * the sleeper waits in; it rings again only once that datagram was read
 * (nx_shm_bell_heard_locked). Spinning or
 * yielding before the sleep is the engine's choice (nx_ep_spin_ns). The
 * other way round, a writer short of room (a backlog, a stream's piece)
 * sets the ring's `room` word and a sleeper treats a moved head as ready;
 * the reader rings the writer's doorbell after it consumed (want_room).
 *
 * Trust. Records are validated like network bytes (ring.c, then the frame
 * in shm_rx.c, the receiving half); a malformed one drops the peer with PROTOCOL and is counted
 * (ep->shm_dropped). All under ep->mu except the sleep hooks, which read
 * only segments' control blocks from a list that only grows. */

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/request.h"
#include "runtime/shm_int.h"

#define SHM_MAGIC 0x314d48535841454eull /* "NEAXSHM1" */
#define SHM_CTL_A 1024u                 /* lower rank -> higher rank */
#define SHM_CTL_B 2048u
#define SHM_DATA 4096u
#define SHM_SIZE (SHM_DATA + 2ull * NX_SHM_RING)
_Static_assert(sizeof(nx_ring_ctl) <= 1024, "control block fits its slot");
_Static_assert(NX_SHM_RING >= NX_SHM_EAGER_MAX + NX_EAGER_MAX + 8192,
               "the largest eager message and an ordinary one fit together");

typedef struct shm_seg_hdr {
  uint64_t magic;
  uint32_t cap;
  uint32_t lower, higher; /* root ranks */
} shm_seg_hdr;

/* ------------------------------------------------- process-wide mappings */

/* Ranks of one process (threads mode) map a segment once, so every atomic
 * on it has one address (what ThreadSanitizer needs to see the ordering). */
typedef struct shm_map {
  struct shm_map *next;
  dev_t dev;
  ino_t ino;
  void *base;
  size_t size;
  int refs;
} shm_map;
static pthread_mutex_t g_map_mu = PTHREAD_MUTEX_INITIALIZER;
static shm_map *g_maps;

void *nx_shm_map(int fd, size_t size, int populate) {
  struct stat st;
  if (fstat(fd, &st)) return NULL;
  pthread_mutex_lock(&g_map_mu);
  for (shm_map *m = g_maps; m; m = m->next)
    if (m->dev == st.st_dev && m->ino == st.st_ino) {
      m->refs++;
      pthread_mutex_unlock(&g_map_mu);
      return m->base;
    }
  void *b =
      mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
  shm_map *m = b == MAP_FAILED ? NULL : calloc(1, sizeof *m);
  if (m) {
    m->dev = st.st_dev, m->ino = st.st_ino, m->base = b, m->size = size, m->refs = 1;
    m->next = g_maps;
    g_maps = m;
  } else if (b != MAP_FAILED) {
    munmap(b, size);
  }
  pthread_mutex_unlock(&g_map_mu);
  return m ? b : NULL;
}

void nx_shm_unmap(void *base) {
  pthread_mutex_lock(&g_map_mu);
  for (shm_map **pp = &g_maps; *pp; pp = &(*pp)->next) {
    shm_map *m = *pp;
    if (m->base != base) continue;
    if (--m->refs == 0) {
      *pp = m->next;
      munmap(m->base, m->size);
      free(m);
    }
    break;
  }
  pthread_mutex_unlock(&g_map_mu);
}

/* ------------------------------------------------------------------ setup */

/* Whether segments are backed and mapped whole at set-up. A ring's writer
 * moves through all of it (2 MiB a direction), and a first touch of each
 * page costs a fault on both sides: measured on this PVM guest, about 4 us
 * each, which made the first 2000 round trips of 1 KiB 3-5x slower than
 * the rest (harness pingpong, n = 2). Bounded, as a host holds a segment
 * per pair of its ranks. */
static int populate(const nx_ep *ep) {
  return ep->world <= NX_SHM_POPULATE_RANKS;
}

/* Accesses every page of the rings' data from this process now: a write to
 * the ring it fills, a read of the one it drains. On this paravirtualised
 * guest a process's first access to a page costs the host several
 * microseconds however the guest mapped it (MAP_POPULATE and
 * MADV_POPULATE_WRITE do not help; cseg.c, touch), and on pages mapped
 * with MAP_POPULATE, as these are, a write after a read pays again (the
 * collective segment's, populated for writing, measured no such cost).
 * Small messages stay in the ring's first lines (ring.h,
 * the hot window), so each larger size a program sends first walked new
 * pages: harness ping-pong n = 2, the first three round trips of a size
 * after smaller ones, 64 KiB 530-650 us against 10 steady, 256 KiB 1.7-2.0
 * ms against 35 (a two-process copy through a 2 MiB memfd ring, 64 KiB
 * pieces: 150-275 us a piece on the first lap, 8-9 once touched so). Here
 * it costs 4-7 ms per pair and process, once. Only between processes:
 * ranks of one process share their page tables, and nothing orders a
 * thread's touch before another's first write but the lane (which
 * ThreadSanitizer does not see). The offer's maker touches after sending
 * it, so that both sides touch at once (n = 2, from the lane up to the
 * segment up: 15-19 -> 11-14.5 ms). Safe against the peer: a
 * fetch-and-add of 0 changes no byte, and each side writes only the ring it
 * fills, once up, which comes after its touch (SEG_OK, handled under ep->mu,
 * which the touch holds). */
static void touch(const nx_ep *ep, const nx_shm *s) {
  if (!populate(ep) || s->peer->shm_pid == getpid()) return;
  size_t pg = (size_t)sysconf(_SC_PAGESIZE);
  uint64_t x = 0;
  for (size_t o = 0; o < NX_SHM_RING; o += pg) {
    __atomic_fetch_add((uint64_t *)(void *)(s->tx.data + o), 0, __ATOMIC_RELAXED);
    x += __atomic_load_n((const uint64_t *)(const void *)(s->rx.data + o), __ATOMIC_RELAXED);
  }
  __asm__ volatile("" : : "r"(x)); /* (kept) */
}

static nx_shm *seg_new(nx_ep *ep, nx_peer *p, void *base) {
  nx_shm *s = nx_calloc(1, sizeof *s);
  if (!s) return NULL;
  s->peer = p;
  s->base = base;
  int lower = ep->rank < p->rank;
  uint8_t *b = base;
  nx_ring_ctl *a = (nx_ring_ctl *)(b + SHM_CTL_A), *bb = (nx_ring_ctl *)(b + SHM_CTL_B);
  uint8_t *da = b + SHM_DATA, *db = b + SHM_DATA + NX_SHM_RING;
  nx_ring_init(&s->tx, lower ? a : bb, lower ? da : db, NX_SHM_RING, 1);
  nx_ring_init(&s->rx, lower ? bb : a, lower ? db : da, NX_SHM_RING, 0);
  p->shm = s;
  s->next = atomic_load(&ep->shm_all);
  atomic_store(&ep->shm_all, s);
  return s;
}

/* A lane control datagram: the set-up ones must arrive (the lane keeps and
 * retries them), a doorbell is only worth sending now. */
static int send_ctl(nx_ep *ep, nx_peer *p, int what, int fd) {
  nx_frame f = {0};
  f.kind = NX_KIND_LANE;
  f.src = ep->rank;
  f.status = what;
  return what == NX_LANE_BELL ? nx_lane_send_ctl_locked(ep, p, &f, fd)
                              : nx_lane_send_ctl_owed_locked(ep, p, &f, fd);
}

void nx_shm_lane_up_locked(nx_ep *ep, nx_peer *p) {
  if (!ep->knobs.shm || p->shm || ep->rank > p->rank || p->relayed) return;
  int fd = memfd_create("nexar-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    NX_DEBUG("shm to rank %u: memfd_create: %s", p->rank, strerror(errno));
    return;
  }
  void *base = NULL;
  int whole = populate(ep);
  int rc = ftruncate(fd, (off_t)SHM_SIZE);
  /* backed whole now (best effort: else page by page as the rings move) */
  if (!rc && whole && fallocate(fd, 0, 0, (off_t)SHM_SIZE))
    NX_DEBUG("shm to rank %u: fallocate: %s", p->rank, strerror(errno));
  if (rc || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) ||
      !(base = nx_shm_map(fd, SHM_SIZE, whole))) {
    NX_DEBUG("shm to rank %u: segment: %s", p->rank, strerror(errno));
    close(fd);
    return;
  }
  shm_seg_hdr h = {SHM_MAGIC, NX_SHM_RING, ep->rank, p->rank};
  memcpy(base, &h, sizeof h);
  if (!seg_new(ep, p, base)) {
    nx_shm_unmap(base);
    close(fd);
    return;
  }
  if (send_ctl(ep, p, NX_LANE_SEG, fd))
    NX_DEBUG("shm to rank %u: offer not sent: %s", p->rank, strerror(errno));
  close(fd);         /* the mapping (and the peer's copy of the fd) keep it */
  touch(ep, p->shm); /* after the offer, so that the peer touches meanwhile */
}

void nx_shm_on_seg_locked(nx_ep *ep, nx_peer *p, int fd) {
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  int need = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  void *base = NULL;
  if (!ep->knobs.shm || p->shm || p->rank > ep->rank || p->relayed) goto out;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != SHM_SIZE || seals < 0 ||
      (seals & need) != need) {
    NX_WARN("shm from rank %u: segment refused (size or seals)", p->rank);
    ep->shm_dropped++;
    p->st.shm_dropped++;
    goto out;
  }
  if (!(base = nx_shm_map(fd, SHM_SIZE, populate(ep)))) goto out;
  shm_seg_hdr h;
  memcpy(&h, base, sizeof h);
  if (h.magic != SHM_MAGIC || h.cap != NX_SHM_RING || h.lower != p->rank || h.higher != ep->rank) {
    NX_WARN("shm from rank %u: segment refused (header)", p->rank);
    ep->shm_dropped++;
    p->st.shm_dropped++;
    nx_shm_unmap(base);
    goto out;
  }
  nx_shm *s = seg_new(ep, p, base);
  if (!s) {
    nx_shm_unmap(base);
    goto out;
  }
  touch(ep, s);
  if (send_ctl(ep, p, NX_LANE_SEG_OK, -1) == 0) { /* sent or kept for the lane's retries */
    s->up = 1;
    NX_DEBUG("shm to rank %u up", p->rank);
  }
out:
  close(fd);
}

void nx_shm_on_seg_ok_locked(nx_ep *ep, nx_peer *p) {
  (void)ep;
  if (p->shm && !atomic_load(&p->shm->dead) && !p->shm->up) {
    p->shm->up = 1;
    NX_DEBUG("shm to rank %u up", p->rank);
  }
}

/* ------------------------------------------------------------------- send */

static void ring_bell(nx_ep *ep, nx_shm *s) {
  /* a reader that counted itself in waiters before its last look (which
   * lasts NX_RING_GRACE_NS: ring.h) either saw the record or is seen here */
  if (!atomic_load(&s->tx.ctl->waiters) || atomic_exchange(&s->tx.ctl->bell, 1)) return;
  ep->shm_bells++;
  if (send_ctl(ep, s->peer, NX_LANE_BELL, -1))
    atomic_store(&s->tx.ctl->bell, 0); /* not sent (socket full): the next record tries */
}

void nx_shm_protocol_locked(nx_ep *ep, nx_shm *s, const char *what) {
  char why[128];
  snprintf(why, sizeof why, "shared-memory ring: %s", what);
  ep->shm_dropped++;
  s->peer->st.shm_dropped++;
  nx_peer_dead_locked(ep, s->peer, NEXAR_ERR_PROTOCOL, why);
}

/* f's header as a record carries it: short where f has one (the ring says
 * who sent it and how long it is), else full. Its length. */
static uint32_t encode(const nx_frame *f, uint8_t hdr[NX_FRAME_HDR_LEN]) {
  if (nx_frame_encode_short(f, hdr)) return NX_FRAME_SHORT_LEN;
  nx_frame_encode(f, hdr);
  return NX_FRAME_HDR_LEN;
}

/* 0 sent, 1 no room, <0 the peer was dropped. */
static int put(nx_ep *ep, nx_shm *s, const uint8_t *hdr, uint32_t hlen, const nexar_iovec *iov,
               size_t niov, uint64_t len) {
  /* the ack: how far we have read the peer's ring (ring.h) */
  int rc = nx_ring_put(&s->tx, s->rx.pos, hdr, hlen, iov, niov, len);
  if (rc < 0) {
    nx_shm_protocol_locked(ep, s, "the reader's index is impossible");
    return NEXAR_ERR_PROTOCOL;
  }
  if (rc == 0) ring_bell(ep, s);
  return rc;
}

/* Something of ours found no room: the reader rings our doorbell once it
 * frees some. The flag is set (seq_cst) before a sleeper's last looks at
 * the head (nx_shm_sleep_begin), and the reader stores the head before it
 * reads the flag, so either it sees the flag or the sleeper sees the head
 * move within NX_RING_GRACE_NS (ring.h). */
static void want_room(nx_shm *s) {
  atomic_store(&s->room_at, s->tx.seen + 1);
  if (!atomic_load_explicit(&s->tx.ctl->room, memory_order_relaxed))
    atomic_store(&s->tx.ctl->room, 1);
}

/* Reader: we consumed records; a writer that waits for room is told. */
void nx_shm_room_bell_locked(nx_ep *ep, nx_shm *s) {
  if (atomic_load_explicit(&s->rx.ctl->room, memory_order_relaxed) &&
      atomic_exchange(&s->rx.ctl->room, 0) && send_ctl(ep, s->peer, NX_LANE_BELL, -1))
    atomic_store(&s->rx.ctl->room, 1); /* not sent (socket full): the next pop tries */
}

static void flush_backlog(nx_ep *ep, nx_shm *s) {
  while (s->bl_head) {
    shm_bl *b = s->bl_head;
    nexar_iovec v = {b->data, (size_t)b->len};
    int rc = put(ep, s, b->hdr, b->hlen, &v, 1, b->len);
    if (rc == 1) want_room(s);
    if (rc) return;
    s->bl_head = b->next;
    if (!s->bl_head) s->bl_tail = NULL;
    s->bl_bytes -= b->len;
    free(b);
  }
}

static int backlog(nx_ep *ep, nx_shm *s, const uint8_t *hdr, uint32_t hlen, const nexar_iovec *iov,
                   size_t niov, uint64_t len) {
  shm_bl *b = malloc(sizeof *b + (size_t)len);
  if (!b)
    return nx_fail(NEXAR_ERR_NOMEM, "send to rank %u: %llu bytes", s->peer->rank,
                   (unsigned long long)len);
  (void)ep;
  b->next = NULL;
  b->len = len;
  b->hlen = hlen;
  memcpy(b->hdr, hdr, hlen);
  uint64_t off = 0;
  for (size_t i = 0; i < niov; i++) {
    if (iov[i].len) memcpy(b->data + off, iov[i].base, iov[i].len);
    off += iov[i].len;
  }
  if (s->bl_tail)
    s->bl_tail->next = b;
  else
    s->bl_head = b;
  s->bl_tail = b;
  s->bl_bytes += len;
  return 0;
}

/* An ordered record: by the ring, or behind what waits for room. */
static int put_ordered(nx_ep *ep, nx_shm *s, const nx_frame *f, const nexar_iovec *iov, size_t niov,
                       uint64_t len) {
  uint8_t hdr[NX_FRAME_HDR_LEN];
  uint32_t hlen = encode(f, hdr);
  if (!s->bl_head) {
    int rc = put(ep, s, hdr, hlen, iov, niov, len);
    if (rc <= 0) return rc;
  }
  return backlog(ep, s, hdr, hlen, iov, niov, len);
}

/* 1 once point-to-point to p may go by the ring: none of ours is on a QUIC
 * stream any more (so the receiver has ordered all of them). */
static int p2p_switch(nx_ep *ep, nx_shm *s) {
  if (s->p2p) return 1;
  for (nx_txmsg *m = ep->tx_all; m; m = m->all_next)
    if (m->peer == s->peer && (m->q.sid >= 0 || m->q.hdr[3] == NX_KIND_P2P)) return 0;
  s->p2p = 1;
  NX_DEBUG("point-to-point to rank %u by shared memory from now on", s->peer->rank);
  return 1;
}

static int usable(const nx_peer *p) {
  return p->shm && p->shm->up && !atomic_load(&p->shm->dead) && p->state == NX_PEER_UP;
}

static void count_sent(nx_peer *p, uint64_t len) {
  p->st.messages_sent++;
  p->st.bytes_sent += len;
  p->st.shm_bytes_sent += len;
}

int nx_shm_send_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                       size_t niov, uint64_t len, nexar_request *req) {
  if (!usable(p)) return 0;
  nx_shm *s = p->shm;
  if (f->kind == NX_KIND_COLL || f->kind == NX_KIND_RNDV_DONE) {
    /* no order needed (unique keys; a rendezvous' answer or a sender's
     * cancel): by the ring when it has room, where a waiting sender's every
     * pass looks, not by the lane, which it reads on every 32nd */
    if (len > NX_RNDV_COLL_MIN) return 0;
    uint8_t hdr[NX_FRAME_HDR_LEN];
    int rc = put(ep, s, hdr, encode(f, hdr), iov, niov, len);
    if (rc < 0) return rc;
    if (rc == 1) return 0; /* full: the lane or QUIC takes it */
  } else if (f->kind == NX_KIND_P2P) {
    if (!p2p_switch(ep, s)) return 0;
    int eager = len <= NX_SHM_EAGER_MAX || !req;
    if (eager && req && s->bl_bytes + len > NX_EAGER_QUEUE_MAX) eager = 0;
    if (!eager) { /* the descriptor comes back through nx_shm_send_desc_locked */
      int t = nx_rndv_send_locked(ep, p, f, iov, niov, len, req);
      if (t < 0) return t;
      if (t == 1) {
        p->st.messages_sent++;
        p->st.bytes_sent += len;
        p->st.bulk_bytes_sent += len;
        return 1;
      }
    }
    if (nx_ring_record(len) > NX_SHM_RING)
      return nx_fail(NEXAR_ERR_UNSUPPORTED, "send to rank %u: %llu bytes without a request",
                     p->rank, (unsigned long long)len);
    int rc = put_ordered(ep, s, f, iov, niov, len);
    if (rc < 0) return rc;
  } else {
    return 0;
  }
  count_sent(p, len);
  if (req) nx_req_complete(req, 0, NULL); /* copied */
  return 1;
}

int nx_shm_streamable_locked(const nx_peer *p) {
  return usable(p);
}

int nx_shm_put_piece_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                            size_t niov, uint64_t len) {
  if (!usable(p)) return 0; /* not up yet: its set-up's arrival makes a pass */
  nx_shm *s = p->shm;
  int64_t used = nx_ring_used(&s->tx);
  if (used < 0) {
    nx_shm_protocol_locked(ep, s, "the reader's index is impossible");
    return NEXAR_ERR_PROTOCOL;
  }
  int rc = 1;
  if ((uint64_t)used + nx_ring_record(len) <= NX_SHM_STREAM_WINDOW) {
    uint8_t hdr[NX_FRAME_HDR_LEN];
    rc = put(ep, s, hdr, encode(f, hdr), iov, niov, len);
    if (rc < 0) return rc;
  }
  if (rc == 1) {
    want_room(s);
    return 0;
  }
  p->st.shm_bytes_sent += len;
  return 1;
}

int nx_shm_send_now_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *iov,
                           size_t niov, uint64_t len) {
  /* what nx_shm_send_locked would do at once for an eager message, and
   * nothing else: a backlog, a full ring or a rendezvous needs a request */
  if (!usable(p) || f->kind != NX_KIND_P2P || !p->shm->p2p || p->shm->bl_head ||
      len > NX_SHM_EAGER_MAX)
    return 0;
  uint8_t hdr[NX_FRAME_HDR_LEN];
  int rc = put(ep, p->shm, hdr, encode(f, hdr), iov, niov, len);
  if (rc) return rc < 0 ? rc : 0;
  count_sent(p, len);
  return 1;
}

int nx_shm_send_desc_locked(nx_ep *ep, nx_peer *p, const nx_frame *f, const nexar_iovec *v) {
  if (!usable(p) || (f->kind == NX_KIND_P2P && !p->shm->p2p)) return 0;
  if (f->kind == NX_KIND_P2P) {
    int rc = put_ordered(ep, p->shm, f, v, 1, v->len);
    return rc ? rc : 1;
  }
  uint8_t hdr[NX_FRAME_HDR_LEN];
  return put(ep, p->shm, hdr, encode(f, hdr), v, 1, v->len) == 0;
}

void nx_shm_poll_locked(nx_ep *ep, const nx_peer *skip) {
  for (nx_shm *s = atomic_load(&ep->shm_all); s; s = s->next) {
    if (atomic_load(&s->dead)) continue;
    /* set again below by what still finds no room (a backlog, a stream) */
    if (atomic_load_explicit(&s->room_at, memory_order_relaxed))
      atomic_store_explicit(&s->room_at, 0, memory_order_relaxed);
    if (s->peer != skip) nx_shm_drain_locked(ep, s);
    if (s->bl_head && !atomic_load(&s->dead)) flush_backlog(ep, s);
  }
  if (ep->streams) nx_rndv_push_locked(ep);
}

/* The bell is re-armed here, where its datagram is read, and not by every
 * look at the ring: a reader counted in waiters that has not run yet (a
 * woken progress thread waiting for a CPU the application thread polls on)
 * would otherwise be rung once per record, each a system call of the
 * writer's, until it ran (up to a scheduler tick). The clear is a seq_cst
 * store (a full barrier) before this look: a writer whose exchange still
 * found the bell set had published its record before that exchange, so
 * this look sees it; a writer that exchanges after the clear rings again. */
void nx_shm_bell_heard_locked(nx_ep *ep, nx_peer *p) {
  nx_shm *s = p->shm;
  if (!s || atomic_load(&s->dead)) return;
  if (atomic_load_explicit(&s->rx.ctl->bell, memory_order_relaxed))
    atomic_store(&s->rx.ctl->bell, 0);
  nx_shm_drain_locked(ep, s);
}

void nx_shm_peer_down_locked(nx_ep *ep, nx_peer *p) {
  nx_shm *s = p->shm;
  if (!s || atomic_load(&s->dead)) return;
  nx_shm_drain_locked(ep, s); /* what it published before it went counts, as on the lane */
  atomic_store(&s->dead, 1);
  while (s->bl_head) {
    shm_bl *b = s->bl_head;
    s->bl_head = b->next;
    free(b);
  }
  s->bl_tail = NULL;
  s->bl_bytes = 0;
}

int nx_shm_pending_locked(nx_ep *ep) {
  for (nx_shm *s = atomic_load(&ep->shm_all); s; s = s->next) {
    if (atomic_load(&s->dead) || s->peer->state != NX_PEER_UP) continue;
    if (s->bl_head || atomic_load(&s->tx.ctl->head) != s->tx.pos) return 1;
  }
  return 0;
}

int nx_shm_room_wanted(nx_ep *ep) {
  for (nx_shm *s = atomic_load(&ep->shm_all); s; s = s->next)
    if (atomic_load_explicit(&s->room_at, memory_order_relaxed)) return 1;
  return 0;
}

static int any_ready(nx_shm *first) {
  for (nx_shm *s = first; s; s = s->next) {
    if (atomic_load(&s->dead)) continue;
    if (nx_ring_ready(s->rx.ctl)) return 1;
    uint64_t w = atomic_load_explicit(&s->room_at, memory_order_relaxed);
    if (w && atomic_load(&s->tx.ctl->head) + 1 != w) return 1; /* room for what waits */
  }
  return 0;
}

void *nx_shm_sleep_begin(nx_ep *ep, int *ready) {
  nx_shm *first = atomic_load(&ep->shm_all);
  if (!first) {
    *ready = 0;
    return NULL;
  }
  for (nx_shm *s = first; s; s = s->next)
    atomic_fetch_add(&s->rx.ctl->waiters, 1);
  /* looking on for the grace (ring.h, NX_RING_GRACE_NS) */
  /* the clock before each look, so the last look comes after the grace
   * even if this thread lost its CPU in between */
  uint64_t until = nx_now_ns() + NX_RING_GRACE_NS;
  for (;;) {
    int late = nx_now_ns() >= until;
    if ((*ready = any_ready(first)) || late) break;
    nx_cpu_relax();
  }
  return first;
}

void nx_shm_sleep_end(void *token) {
  for (nx_shm *s = token; s; s = s->next)
    atomic_fetch_sub(&s->rx.ctl->waiters, 1);
}

void nx_shm_free(nx_ep *ep) {
  for (nx_shm *s = atomic_load(&ep->shm_all), *n; s; s = n) {
    n = s->next;
    while (s->bl_head) {
      shm_bl *b = s->bl_head;
      s->bl_head = b->next;
      free(b);
    }
    nx_shm_unmap(s->base);
    s->peer->shm = NULL;
    free(s);
  }
  atomic_store(&ep->shm_all, NULL);
}

int nx_shm_state_locked(const nx_peer *p) {
  const nx_shm *s = p->shm;
  if (!s || atomic_load(&s->dead)) return 0;
  return s->p2p ? 3 : s->up ? 2 : 1;
}

int nx_shm_test_forge(nx_ep *ep, nx_peer *p, int how) {
  nx_shm *s = p->shm;
  if (!s || atomic_load(&s->dead)) return -1;
  (void)ep;
  uint8_t *d = s->tx.data;
  uint64_t at = s->tx.pos & (s->tx.cap - 1);
  if (how == 0) { /* a record announced in place with an impossible header length */
    uint32_t w[2] = {8, 12};
    memcpy(d + ((at + 8) & (s->tx.cap - 1)), w, sizeof w);
    __atomic_store_n((uint64_t *)(void *)(d + at), ~s->tx.pos, __ATOMIC_RELEASE);
    atomic_store(&s->tx.ctl->tail, s->tx.pos + 128);
  } else { /* a well-formed record with a frame that lies about its length */
    uint8_t hdr[NX_FRAME_HDR_LEN];
    nx_frame f = {0};
    f.kind = NX_KIND_P2P;
    f.src = ep->rank;
    f.length = 1000; /* carries 8 */
    nx_frame_encode(&f, hdr);
    uint8_t pay[8] = {0};
    nexar_iovec v = {pay, 8};
    return nx_ring_put(&s->tx, s->rx.pos, hdr, NX_FRAME_HDR_LEN, &v, 1, 8);
  }
  return 0;
}
