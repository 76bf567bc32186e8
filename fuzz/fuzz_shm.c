/* libFuzzer target for the shared-memory ring a same-host peer writes
 * (core/ring.h, runtime/shm.c): the record decoder (the word a record
 * announces itself by, a start-over mark, lengths, wrap, the ack applied to
 * the paired ring) and, for each record it accepts, the frame validation
 * (full or short header) and matching behind it (nx_shm_deliver_locked), on
 * an endpoint without sockets. Input: u16 published bytes (a tail, which
 * the consumer must not need), u16 consumer index (both little-endian),
 * then the ring's 4096 data bytes (the rest zero). Smoke run without
 * libFuzzer: -DNX_FUZZ_STANDALONE, corpus files as args. */
#include <string.h>

#include "core/ring.h"
#include "fuzz_ep.h"

#define CAP 4096u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4) return 0;
  static uint8_t ring[CAP];
  static nx_ring_ctl ctl;
  uint64_t pub = (uint64_t)data[0] | (uint64_t)data[1] << 8;
  uint64_t head = (uint64_t)data[2] | (uint64_t)data[3] << 8;
  memset(ring, 0, sizeof ring);
  memcpy(ring, data + 4, size - 4 < CAP ? size - 4 : CAP);
  atomic_store(&ctl.head, head);
  atomic_store(&ctl.tail, head + pub);
  nx_ring r, w; /* w: the paired ring's producer, which acks move on */
  nx_ring_init(&r, &ctl, ring, CAP, 0);
  static uint8_t wring[CAP];
  static nx_ring_ctl wctl;
  atomic_store(&wctl.tail, head);
  atomic_store(&wctl.head, head / 2);
  nx_ring_init(&w, &wctl, wring, CAP, 1);
  nx_ep *ep = make_endpoint();
  if (!ep) return 0;
  pthread_mutex_lock(&ep->mu);
  for (int i = 0; i < 64; i++) {
    uint8_t hdr[NX_FRAME_HDR_LEN];
    uint32_t hlen = 0;
    nexar_iovec v[2];
    size_t nv = 0;
    uint64_t plen = 0, adv = 0, ack = 0;
    if (nx_ring_peek(&r, hdr, &hlen, v, &nv, &plen, &adv, &ack)) break;
    if (nx_ring_acked(&w, ack)) break;
    if (nx_shm_deliver_locked(ep, ep->peers[1], hdr, hlen, v, nv, plen)) break;
    nx_ring_pop(&r, adv);
  }
  pthread_mutex_unlock(&ep->mu);
  drop_endpoint(ep);
  return 0;
}

NX_FUZZ_MAIN("fuzz_shm")
