/* SPSC byte ring (ring.h). Indices are 64-bit byte counts that never wrap
 * in practice; offsets are index & (cap - 1). */
#include "core/ring.h"

#include <string.h>

void nx_ring_init(nx_ring *r, nx_ring_ctl *ctl, uint8_t *data, uint64_t cap, int producer) {
  r->ctl = ctl;
  r->data = data;
  r->cap = cap;
  r->pos = producer ? atomic_load(&ctl->tail) : atomic_load(&ctl->head);
  r->seen = producer ? atomic_load(&ctl->head) : 0;
  r->check = r->pos;
}

static void put_bytes(const nx_ring *r, uint64_t at, const void *src, uint64_t n) {
  uint64_t off = at & (r->cap - 1), first = r->cap - off < n ? r->cap - off : n;
  memcpy(r->data + off, src, (size_t)first);
  if (n > first) memcpy(r->data, (const uint8_t *)src + first, (size_t)(n - first));
}

static void get_bytes(const nx_ring *r, uint64_t at, void *dst, uint64_t n) {
  uint64_t off = at & (r->cap - 1), first = r->cap - off < n ? r->cap - off : n;
  memcpy(dst, r->data + off, (size_t)first);
  if (n > first) memcpy((uint8_t *)dst + first, r->data, (size_t)(n - first));
}

/* The lines the next record of the same size will take, fetched for
 * writing now, while the caller goes on (to wait for a reply, typically):
 * the consumer read them a lap ago, so each store of that record would
 * otherwise wait for a transfer between cores, and the unlock that follows
 * it (a locked instruction) for all of them. The first two lines are left
 * alone: a waiting consumer polls them (runtime/shm.c), and taking them
 * from it now would only move them twice. Where the next record starts is
 * guessed as nx_ring_put will choose it for a consumer that keeps up.
 * Harness ping-pong 1 KiB, n = 2, 20k round trips, alternating runs:
 * 0.91-0.98 -> 0.84-0.89 us one-way (Open MPI's default 0.81-0.92); with
 * the two cores sharing a cache 0.25-0.30 -> 0.24-0.26 (0.24-0.25). Not
 * for small records (ring.h, NX_RING_PULL_MAX), whose lines the consumer
 * fetches itself; above 4 KiB the hardware's prefetcher keeps up. */
static void prefetch_next(const nx_ring *r, uint64_t need) {
  if (need <= NX_RING_PULL_MAX || need > NX_RING_PREFETCH_MAX) return;
  uint64_t o = r->pos & (r->cap - 1);
  if (o + need > nx_ring_window(need)) o = 0;
  for (uint64_t x = (o + 128) & ~(uint64_t)63; x < o + need && x < r->cap; x += 64)
    nx_prefetch_write(r->data + x);
}

/* Reads the consumer's head: 0, or PROTOCOL if it is impossible. */
static int read_head(nx_ring *r) {
  uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
  if (r->pos - head > r->cap) return NEXAR_ERR_PROTOCOL; /* ahead of tail, or far behind */
  r->seen = head;
  return 0;
}

/* Whether the consumer has taken everything, or for small records all but
 * the last one (which it may still be reading, as in an exchange, where the
 * ack comes a record late). Not for larger ones: a stream of pieces that
 * started over with its consumer a piece behind rewrote lines the consumer
 * was still reading (ping-pong 1 MiB 36 -> 80 us, 4 MiB 134 -> 455). */
static int keeps_up(const nx_ring *r, uint64_t lap, uint64_t at0, uint64_t rec) {
  return r->seen >= lap + at0 && r->pos - r->seen <= (rec <= NX_RING_PULL_MAX ? rec : 0);
}

/* Where the record of len bytes goes: at pos, or at the ring's first byte
 * (after a skip) once it would leave the window, or at once for a small
 * one in a ring known empty, if the consumer keeps up. need: its size at
 * pos, updated. 0 or PROTOCOL (read_head). */
static int start_over(nx_ring *r, uint64_t len, uint64_t *need) {
  uint64_t off = r->pos & (r->cap - 1), rec = nx_ring_record(len); /* (need varies with pos) */
  uint64_t at0 = nx_ring_record_at(0, len), lap = r->pos - off;    /* the record there */
  if (!off || at0 > off) return 0;
  if (off + *need <= nx_ring_window(rec) && (r->seen != r->pos || rec > NX_RING_PULL_MAX)) return 0;
  if (!keeps_up(r, lap, at0, rec) && r->pos >= r->check) {
    int rc = read_head(r); /* the consumer's line: once per nx_ring_hot bytes */
    if (rc) return rc;
    r->check = r->pos + nx_ring_hot(r->cap, rec);
  }
  if (!keeps_up(r, lap, at0, rec)) return 0;
  uint32_t skip[2] = {0, ~0u};
  put_bytes(r, r->pos, skip, sizeof skip); /* records are 8-aligned: it fits */
  r->pos += r->cap - off;
  *need = at0;
  return 0;
}

int nx_ring_put(nx_ring *r, uint64_t ack, const uint8_t hdr[NX_FRAME_HDR_LEN],
                const nexar_iovec *iov, size_t niov, uint64_t len) {
  uint64_t need = nx_ring_record_at(r->pos, len);
  int rc = start_over(r, len, &need);
  if (rc) return rc;
  uint64_t used = r->pos - r->seen; /* seen was checked when read: used <= cap */
  if (need > r->cap - used) {
    if ((rc = read_head(r))) return rc;
    if (need > r->cap - (r->pos - r->seen)) return 1;
  }
  uint32_t pre[4] = {(uint32_t)(NX_FRAME_HDR_LEN + len), ~(uint32_t)(NX_FRAME_HDR_LEN + len),
                     (uint32_t)ack, (uint32_t)(ack >> 32)};
  uint64_t at = r->pos;
  put_bytes(r, at, pre, sizeof pre);
  put_bytes(r, at + nx_ring_hoff(at, len), hdr, NX_FRAME_HDR_LEN);
  at += nx_ring_lead(at, len);
  for (size_t i = 0; i < niov; i++) {
    if (iov[i].len) put_bytes(r, at, iov[i].base, iov[i].len);
    at += iov[i].len;
  }
  r->pos += need;
  /* release, not seq_cst: a seq_cst store waits for the record's lines to
   * leave this CPU, which cost a sender about 12% of an 8-byte ping-pong
   * (nexar-perf sendrecv --procs n=2, alternating runs: 0.30-0.32 ->
   * 0.26-0.29 us). The producer's load of waiters that follows may pass
   * this store; consumers that count themselves waiters look again for
   * NX_RING_GRACE_NS before they sleep (ring.h). */
  atomic_store_explicit(&r->ctl->tail, r->pos, memory_order_release);
  prefetch_next(r, need);
  return 0;
}

int64_t nx_ring_used(nx_ring *r) {
  int rc = read_head(r);
  return rc ? rc : (int64_t)(r->pos - r->seen);
}

int nx_ring_acked(nx_ring *r, uint64_t ack) {
  if (ack > r->pos) return NEXAR_ERR_PROTOCOL; /* it took what was never published */
  if (ack > r->seen) r->seen = ack;
  return 0;
}

int nx_ring_peek(const nx_ring *r, uint8_t hdr[NX_FRAME_HDR_LEN], nexar_iovec v[2], size_t *nv,
                 uint64_t *plen, uint64_t *adv, uint64_t *ack) {
  uint64_t tail = atomic_load(&r->ctl->tail);
  uint64_t avail = tail - r->pos, at = r->pos, skipped = 0;
  if (avail == 0) return 1;
  if (avail > r->cap || avail < NX_RING_PREFIX + NX_FRAME_HDR_LEN) return NEXAR_ERR_PROTOCOL;
  uint32_t pre[4];
  get_bytes(r, at, pre, NX_RING_SKIP);
  if (pre[0] == 0 && pre[1] == ~0u) {
    /* a skip: the record is at the ring's first byte, published with it
     * (a skip at the first byte would skip the whole ring: too long) */
    skipped = r->cap - (at & (r->cap - 1));
    if (skipped + NX_RING_PREFIX + NX_FRAME_HDR_LEN > avail) return NEXAR_ERR_PROTOCOL;
    at += skipped;
    avail -= skipped;
    get_bytes(r, at, pre, NX_RING_SKIP);
  }
  get_bytes(r, at + NX_RING_SKIP, pre + 2, NX_RING_PREFIX - NX_RING_SKIP);
  if (pre[1] != ~pre[0] || pre[0] < NX_FRAME_HDR_LEN) return NEXAR_ERR_PROTOCOL;
  uint64_t len = (uint64_t)pre[0] - NX_FRAME_HDR_LEN;
  uint64_t need = nx_ring_record_at(at, len);
  if (need > avail) return NEXAR_ERR_PROTOCOL; /* tail is published after whole records */
  get_bytes(r, at + nx_ring_hoff(at, len), hdr, NX_FRAME_HDR_LEN);
  uint64_t off = (at + nx_ring_lead(at, len)) & (r->cap - 1);
  uint64_t first = r->cap - off < len ? r->cap - off : len;
  v[0].base = r->data + off;
  v[0].len = (size_t)first;
  *nv = 1;
  if (len > first) {
    v[1].base = r->data;
    v[1].len = (size_t)(len - first);
    *nv = 2;
  }
  *plen = len;
  *adv = skipped + need;
  *ack = (uint64_t)pre[2] | (uint64_t)pre[3] << 32;
  return 0;
}

void nx_ring_pop(nx_ring *r, uint64_t adv) {
  r->pos += adv;
  atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
}

int nx_ring_ready(const nx_ring_ctl *ctl) {
  return atomic_load((_Atomic uint64_t *)&ctl->tail) != atomic_load((_Atomic uint64_t *)&ctl->head);
}
