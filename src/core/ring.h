/* Single-producer/single-consumer byte ring for shared memory between two
 * processes (runtime/shm.c). Pure: no system calls, no engine; unit-tested
 * and fuzzed on plain memory.
 *
 * Layout: a control block (nx_ring_ctl, three cache lines) and `cap` data
 * bytes (a power of two). tail (bytes ever published) is written by the
 * producer only, head (bytes ever consumed) by the consumer only; each side
 * keeps its own index privately (pos) and never trusts the other's word for
 * it. A record is a 24-byte prefix (u64 ~from, u32 payload length, u32
 * header length, u64 ack), from NX_RING_ALIGN_MIN payload bytes a gap that
 * puts the payload on a cache line, a header (a frame's, full or short:
 * core/frame.h) and the payload, padded to 8 bytes; it may wrap.
 * from is the producer's index before the record, stored last (release,
 * complemented so that zeroed memory is no record): a consumer that finds
 * ~(its own index) there has the whole record without reading the
 * producer's tail, whose line would be one more transfer between cores on
 * a message's path. A producer whose consumer has taken the records at the
 * ring's first byte may start over there (the record's from is still its
 * index before), then marks the word at from with ~from ^
 * NX_RING_SKIPPED; small messages then keep reusing the same few cache
 * lines instead of walking the ring (8-byte ping-pong 0.37 -> 0.22 us
 * one-way once the ring's lines were warm). A consumer's look (under its
 * lock) reads one word to know, which nothing but a publication writes
 * while the consumer is at it. With the short header an 8-byte message
 * takes one line, not two. Two threads passing records through one line,
 * in the VM's slow state: 96 bytes announced by a tail 0.22 us one-way, 48
 * bytes found in place 0.18-0.20 (bench/ring_lines.c). tail is still
 * published: waiters without the lock watch it (nx_ring_ready; see
 * nx_ring_watch for why not the word). from only grows, so no stale word
 * says what a consumer waits for.
 * ack is the writer's consumer index of the ring that runs the other way
 * (rings come in pairs, one each way): what the reader's own producer may
 * reuse. With it a producer learns, from the replies it reads anyway, that
 * its ring is empty, and starts over after every small record of a
 * request and reply (a line of the consumer's, read once per record, is a
 * transfer between cores on the message's path). The same few lines then
 * go back and forth: two CPUs passing 80-byte records through 256-384
 * bytes took 0.035 us one-way, through 1-8 KiB 0.07-0.10 (bench/ring_lines.c
 * on the 2-vCPU VM, in its fast state). Harness ping-pong n = 2, 16
 * alternating runs, median round trip in cycles (Open MPI's default 724):
 * 8 B 925 -> 802, 64 B 1004 -> 790, 256 B 1064 -> 834.
 *
 * Trust: the other side can write anything anywhere in the segment at any
 * time. The consumer copies the prefix and the header out before it
 * validates them; a tail that claims more than the ring holds, a prefix
 * whose two words disagree, a record longer than what is published, or an
 * ack of more than was published is NEXAR_ERR_PROTOCOL. Payload bytes are
 * handed out in place (the peer changing them under us changes only data it
 * sent anyway); an ack that lies only lets the producer overwrite what the
 * liar has yet to read, as a head that lies would. */
#ifndef NX_CORE_RING_H
#define NX_CORE_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "core/frame.h"

/* A consumer about to sleep counts itself in waiters (a read-modify-write,
 * seen at once) and keeps looking for this long before it sleeps: the
 * producer's release store of tail may still sit in its CPU's store buffer
 * when it reads waiters (no fence: see nx_ring_put), but that drains within
 * far less, so either the producer sees the waiter and rings the doorbell,
 * or the consumer sees the record. */
#define NX_RING_GRACE_NS 2000u

typedef struct nx_ring_ctl {
  _Atomic uint64_t tail; /* producer */
  char pad0[56];
  _Atomic uint64_t head; /* consumer */
  char pad1[56];
  _Atomic uint32_t waiters; /* consumer threads about to sleep (doorbell wanted) */
  _Atomic uint32_t bell;    /* a doorbell is on its way */
  /* the producer waits for room (a stream piece or a backlog did not fit):
   * the consumer that frees some rings its doorbell (runtime/shm.c) */
  _Atomic uint32_t room;
  char pad2[52];
} nx_ring_ctl;

typedef struct nx_ring {
  nx_ring_ctl *ctl;
  uint8_t *data;
  uint64_t cap; /* power of two, >= 4096 */
  uint64_t pos; /* own index: tail (producer) or head (consumer) */
  /* producer: the consumer's head as last read or acknowledged; read
   * again only when it says there is no room (a load of the consumer's
   * cache line per record costs a transfer between cores) */
  uint64_t seen;
  /* producer: the index from which it reads the consumer's head again to
   * start over at the first byte; once per nx_ring_hot bytes, as the look
   * reads the consumer's line */
  uint64_t check;
} nx_ring;

#define NX_RING_PREFIX 24u
#define NX_RING_SKIPPED 1u /* in a record's first word: it started over (ring.h) */
/* The window: NX_RING_HOT_RECORDS records of the size being written. A
 * record that would end past it starts over at the first byte if the
 * consumer has taken what is there (ack or head). Not below a few records:
 * a 16 KiB ping-pong that started over after every record took 2.5-2.7 us
 * instead of 2.3-2.4; small records (up to NX_RING_PULL_MAX) start over as
 * soon as the ring is known empty. */
#define NX_RING_HOT_RECORDS 4u
static inline uint64_t nx_ring_window(uint64_t need) {
  return NX_RING_HOT_RECORDS * need;
}
/* How often a producer that knows of no room at the first byte reads the
 * consumer's head to find some (a transfer between cores): every cap /
 * NX_RING_HOT_DIV bytes (8 KiB of a 2 MiB ring), or window, if more. Its
 * lines are cold until the writer's first lap through them (nexar-perf
 * sendrecv 8 B --procs n=2, 1500 round trips: 64 KiB 0.78-0.80 us one-way,
 * 8 KiB 0.55-0.59; the steady cost is the same). */
#define NX_RING_HOT_DIV 256u
static inline uint64_t nx_ring_hot(uint64_t cap, uint64_t need) {
  uint64_t w = cap / NX_RING_HOT_DIV;
  return w > nx_ring_window(need) ? w : nx_ring_window(need);
}
/* Who fetches a small record's lines ahead of time, so that its arrival
 * costs one transfer between cores rather than two in a row. Up to
 * NX_RING_PULL_MAX bytes, a waiting consumer prefetches the next record's
 * lines while it polls (as many as the last record took; runtime/shm.c);
 * up to NX_RING_PREFETCH_MAX, the producer fetches for writing all but the
 * first two lines of its next record as soon as it published one (ring.c,
 * prefetch_next), and the consumer polls those two. */
#define NX_RING_PULL_MAX 512u
#define NX_RING_PREFETCH_MAX 4096u
/* From this many payload bytes a record's payload starts on a cache line
 * of the ring (up to 56 bytes of gap after the prefix): copies whose
 * source and destination are aligned alike mod 64 run faster, and callers'
 * buffers are mostly line- or page-aligned. Harness ping-pong n = 2,
 * 50000 round trips, 4 alternating runs, payload at 8 mod 64 -> at 0: 1
 * KiB 0.93-0.97 -> 0.81-0.86 us one-way (Open MPI's default 0.89-0.90),
 * 64 KiB 5.2-5.6 -> 5.0-5.2; 256 B no different, so smaller records stay
 * dense (a gap would cost them a line). Both sides compute the gap from
 * the record's index and lengths: nothing in the ring says it. */
#define NX_RING_ALIGN_MIN 256u
/* Bytes from the start of a record at index `at` with `hlen` header bytes
 * to its header, and to its payload (right after the header). */
static inline uint64_t nx_ring_hoff(uint64_t at, uint64_t len, uint64_t hlen) {
  return len < NX_RING_ALIGN_MIN ? NX_RING_PREFIX
                                 : NX_RING_PREFIX + ((0 - (at + NX_RING_PREFIX + hlen)) & 63u);
}
static inline uint64_t nx_ring_lead(uint64_t at, uint64_t len, uint64_t hlen) {
  return nx_ring_hoff(at, len, hlen) + hlen;
}
/* Bytes a record of `len` payload bytes takes at index at (a multiple of
 * 8, as every record's size is). */
static inline uint64_t nx_ring_record_at(uint64_t at, uint64_t len, uint64_t hlen) {
  return nx_ring_lead(at, len, hlen) + ((len + 7u) & ~(uint64_t)7u);
}
/* The most bytes a record of `len` payload bytes takes, wherever it is and
 * whichever its header. */
static inline uint64_t nx_ring_record(uint64_t len) {
  /* (the widest gap, 56 bytes, with the longest header) */
  return nx_ring_record_at((8u - NX_RING_PREFIX - NX_FRAME_HDR_LEN) & 63u, len, NX_FRAME_HDR_LEN);
}

/* Sets r up over ctl and data; pos from the control block's current index
 * (producer: tail, consumer: head). */
void nx_ring_init(nx_ring *r, nx_ring_ctl *ctl, uint8_t *data, uint64_t cap, int producer);
/* Producer: publishes one record (hlen bytes of hdr, a multiple of 8 up
 * to NX_FRAME_HDR_LEN, then the payload of iov, len bytes) carrying ack
 * (the caller's consumer index of the paired ring). 0; 1 if there is no
 * room now; NEXAR_ERR_PROTOCOL if the consumer's head is impossible
 * (behind what it may have consumed, or ahead of tail). */
int nx_ring_put(nx_ring *r, uint64_t ack, const uint8_t *hdr, uint32_t hlen, const nexar_iovec *iov,
                size_t niov, uint64_t len);
/* Consumer: the next record. 0: its header copied to hdr (*hlen bytes),
 * its payload in v[0..*nv) (pointers into the ring, 2 pieces at most),
 * *plen bytes, *adv the bytes to pass to nx_ring_pop once it is used (the
 * rest of the lap before it included if it started over), *ack the
 * record's ack (for nx_ring_acked on the paired ring); 1 if none;
 * NEXAR_ERR_PROTOCOL if malformed. */
int nx_ring_peek(const nx_ring *r, uint8_t hdr[NX_FRAME_HDR_LEN], uint32_t *hlen, nexar_iovec v[2],
                 size_t *nv, uint64_t *plen, uint64_t *adv, uint64_t *ack);
void nx_ring_pop(nx_ring *r, uint64_t adv);
/* Producer: the consumer says (in a record of the paired ring) that it has
 * consumed up to ack. 0 (older news is ignored); NEXAR_ERR_PROTOCOL if ack
 * is beyond what was published. */
int nx_ring_acked(nx_ring *r, uint64_t ack);
/* Producer: bytes published and not consumed yet (reads the consumer's
 * head), or NEXAR_ERR_PROTOCOL (its head is impossible) as a negative. */
int64_t nx_ring_used(nx_ring *r);
/* Consumer: 1 if the producer has published something not consumed yet
 * (lock-free: reads only the control block). */
int nx_ring_ready(const nx_ring_ctl *ctl);
/* Consumer, without its lock: where its next record would start (a copy
 * of what a waiter knew at its last look, for prefetching) and its control
 * block. Such a waiter reads the control block only (nx_ring_ready), never
 * the ring's data: once another thread consumed, the writer may reuse the
 * spot it watched for a record's body, which it stores plainly, and
 * nothing orders that store after the waiter's read (ThreadSanitizer
 * reported it when the spin read the announcing word). */
typedef struct nx_ring_watch {
  const uint8_t *data;
  uint64_t mask; /* cap - 1 */
  uint64_t pos;  /* the consumer's index then */
  const nx_ring_ctl *ctl;
} nx_ring_watch;
void nx_ring_watch_of(const nx_ring *r, nx_ring_watch *w);

#endif
