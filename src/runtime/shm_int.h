/* What the two halves of the same-host shared-memory link share: the
 * state of one peer's segment. shm.c sets segments up, sends, polls and
 * tears them down; shm_rx.c takes records from a peer's ring. Internal to
 * runtime/; all under ep->mu (shm.c says what runs without it). */
#ifndef NX_RUNTIME_SHM_INT_H
#define NX_RUNTIME_SHM_INT_H

#include "core/ring.h"
#include "runtime/engine.h"

typedef struct shm_bl { /* a point-to-point record waiting for ring room */
  struct shm_bl *next;
  uint64_t len;
  uint32_t hlen; /* hdr's bytes: a short or a full frame header */
  uint8_t hdr[NX_FRAME_HDR_LEN];
  uint8_t data[];
} shm_bl;

struct nx_shm {
  nx_shm *next; /* ep->shm_all: push-front only, freed with the endpoint */
  nx_peer *peer;
  void *base;
  nx_ring tx, rx;
  int up;          /* both sides mapped: we may send */
  int p2p;         /* point-to-point to this peer goes by the ring from now on */
  atomic_int dead; /* peer gone: not polled, not used */
  int busy;        /* being drained (re-entry from delivery) */
  shm_bl *bl_head, *bl_tail;
  uint64_t bl_bytes;
  /* the reader's head + 1 when something of ours (a backlog, a stream
   * piece) last found no room, 0 if nothing waits: a sleeper wakes once
   * the head moves (nx_shm_sleep_begin) */
  _Atomic uint64_t room_at;
  /* bytes of the next record a waiting receive prefetches while it polls
   * (core/ring.h, NX_RING_PULL_MAX): as many as the last one it took if it
   * was small; 0: the prefix and a short header (nx_shm_rx_watch_locked), which
   * the producer leaves to it */
  uint32_t rx_pull;
};

/* The peer wrote something impossible: it is dropped with PROTOCOL and the
 * drop counted (shm.c). */
void nx_shm_protocol_locked(nx_ep *ep, nx_shm *s, const char *what);
/* Reader: records were consumed; a writer that waits for room is told
 * (shm.c). */
void nx_shm_room_bell_locked(nx_ep *ep, nx_shm *s);
/* Takes what s's peer published (shm_rx.c); 1 if it took something. */
int nx_shm_drain_locked(nx_ep *ep, nx_shm *s);

#endif
