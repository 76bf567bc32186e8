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

/* A record's first word (ring.h), stored last and released. */
static void set_word(const nx_ring *r, uint64_t at, uint64_t w) {
  __atomic_store_n((uint64_t *)(void *)(r->data + (at & (r->cap - 1))), w, __ATOMIC_RELEASE);
}
static uint64_t word_at(const nx_ring *r, uint64_t at) {
  return __atomic_load_n((const uint64_t *)(const void *)(r->data + (at & (r->cap - 1))),
                         __ATOMIC_ACQUIRE);
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

/* Where the record of len bytes (hlen of header) goes: at pos, or at the
 * ring's first byte once it would leave the window, or at once for a small
 * one in a ring known empty, if the consumer keeps up. need: its size at
 * pos, updated. 0 or PROTOCOL (read_head). */
static int start_over(nx_ring *r, uint64_t len, uint64_t hlen, uint64_t *need) {
  uint64_t off = r->pos & (r->cap - 1), rec = nx_ring_record(len);    /* (need varies with pos) */
  uint64_t at0 = nx_ring_record_at(0, len, hlen), lap = r->pos - off; /* the record there */
  if (!off || at0 > off) return 0;
  if (off + *need <= nx_ring_window(rec) && (r->seen != r->pos || rec > NX_RING_PULL_MAX)) return 0;
  if (!keeps_up(r, lap, at0, rec) && r->pos >= r->check) {
    int rc = read_head(r); /* the consumer's line: once per nx_ring_hot bytes */
    if (rc) return rc;
    r->check = r->pos + nx_ring_hot(r->cap, rec);
  }
  if (!keeps_up(r, lap, at0, rec)) return 0;
  r->pos += r->cap - off; /* (nx_ring_put marks the rest of the lap skipped) */
  *need = at0;
  return 0;
}

int nx_ring_put(nx_ring *r, uint64_t ack, const uint8_t *hdr, uint32_t hlen, const nexar_iovec *iov,
                size_t niov, uint64_t len) {
  uint64_t from = r->pos, need = nx_ring_record_at(r->pos, len, hlen);
  int rc = start_over(r, len, hlen, &need);
  if (rc) return rc;
  uint64_t used = from - r->seen; /* seen was checked when read: used <= cap */
  if (r->pos + need - from > r->cap - used) {
    if ((rc = read_head(r))) return rc;
    if (r->pos + need - from > r->cap - (from - r->seen)) {
      r->pos = from; /* no room: as if never tried */
      return 1;
    }
  }
  uint64_t at = r->pos;
  uint32_t words[4] = {(uint32_t)len, hlen, (uint32_t)ack, (uint32_t)(ack >> 32)};
  put_bytes(r, at + 8, words, sizeof words);
  put_bytes(r, at + nx_ring_hoff(at, len, hlen), hdr, hlen);
  uint64_t o = at + nx_ring_lead(at, len, hlen);
  for (size_t i = 0; i < niov; i++) {
    if (iov[i].len) put_bytes(r, o, iov[i].base, iov[i].len);
    o += iov[i].len;
  }
  /* last, and released: a consumer that reads it has the rest (ring.h);
   * where the record started over, the mark at from says so after it */
  set_word(r, at, ~from);
  if (at != from) set_word(r, from, ~from ^ NX_RING_SKIPPED);
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

int nx_ring_peek(const nx_ring *r, uint8_t hdr[NX_FRAME_HDR_LEN], uint32_t *hlen, nexar_iovec v[2],
                 size_t *nv, uint64_t *plen, uint64_t *adv, uint64_t *ack) {
  uint64_t at = r->pos, off = at & (r->cap - 1), skipped = 0, w0 = word_at(r, at);
  if (w0 == (~r->pos ^ NX_RING_SKIPPED)) {
    /* it started over: the record is at the next lap's first byte (a mark
     * at the first byte would skip the whole ring) */
    skipped = r->cap - off;
    at += skipped;
    if (!off || word_at(r, at) != ~r->pos) return NEXAR_ERR_PROTOCOL;
  } else if (w0 != ~r->pos) {
    return 1;
  }
  uint32_t w[4];
  get_bytes(r, at + 8, w, sizeof w);
  uint64_t len = w[0], hl = w[1];
  if (hl < 8 || hl > NX_FRAME_HDR_LEN || hl % 8 || len > r->cap) return NEXAR_ERR_PROTOCOL;
  uint64_t need = nx_ring_record_at(at, len, hl);
  if (skipped + need > r->cap) return NEXAR_ERR_PROTOCOL; /* more than the ring holds */
  get_bytes(r, at + nx_ring_hoff(at, len, hl), hdr, hl);
  uint64_t o = (at + nx_ring_lead(at, len, hl)) & (r->cap - 1);
  uint64_t first = r->cap - o < len ? r->cap - o : len;
  v[0].base = r->data + o;
  v[0].len = (size_t)first;
  *nv = 1;
  if (len > first) {
    v[1].base = r->data;
    v[1].len = (size_t)(len - first);
    *nv = 2;
  }
  *hlen = (uint32_t)hl;
  *plen = len;
  *adv = skipped + need;
  *ack = (uint64_t)w[2] | (uint64_t)w[3] << 32;
  return 0;
}

void nx_ring_pop(nx_ring *r, uint64_t adv) {
  r->pos += adv;
  atomic_store_explicit(&r->ctl->head, r->pos, memory_order_release);
}

int nx_ring_ready(const nx_ring_ctl *ctl) {
  /* (a consumer that found a record in place may store its head before the
   * producer's tail is seen: ahead is not ready) */
  uint64_t t = atomic_load((_Atomic uint64_t *)&ctl->tail);
  return (int64_t)(t - atomic_load((_Atomic uint64_t *)&ctl->head)) > 0;
}

void nx_ring_watch_of(const nx_ring *r, nx_ring_watch *w) {
  w->data = r->data;
  w->mask = r->cap - 1;
  w->pos = r->pos;
  w->ctl = r->ctl;
}
