/* libFuzzer target for same-host lane datagrams: nx_lane_deliver_locked
 * (header decode, the kernel-stamped sender pid against the proven peer,
 * wire length of data and rendezvous descriptors, kinds) and matching behind
 * it, on an endpoint without sockets. Input: byte 0 picks the claimed pid
 * (even: the proven one), the rest is one datagram; a second datagram follows
 * when the input holds a 0xff 0xfe separator.
 * Smoke run without libFuzzer: -DNX_FUZZ_STANDALONE, corpus files as args. */
#include <string.h>

#include "fuzz_ep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  nx_ep *ep = make_endpoint();
  if (!ep) return 0;
  nx_peer *p = ep->peers[1];
  p->lane_known = p->same_host = 1;
  p->shm_pid = 4242;
  pid_t pid = data[0] % 2 ? 4343 : 4242;
  const uint8_t *d = data + 1;
  size_t n = size - 1;
  const uint8_t *sep = n >= 2 ? memmem(d, n, "\xff\xfe", 2) : NULL;
  pthread_mutex_lock(&ep->mu);
  if (sep) {
    nx_lane_deliver_locked(ep, d, (size_t)(sep - d), pid);
    n -= (size_t)(sep - d) + 2;
    d = sep + 2;
  }
  nx_lane_deliver_locked(ep, d, n, pid);
  pthread_mutex_unlock(&ep->mu);
  drop_endpoint(ep);
  return 0;
}

NX_FUZZ_MAIN("fuzz_lane")
