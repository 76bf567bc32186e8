/* libFuzzer target for relay payloads (NX_KIND_RELAY, runtime/relay.c) as a
 * neighbour hands them over: the relay header decoder and what follows it on
 * an endpoint of a hypercube of 4 without sockets (rank 0; 1 and 2 are
 * neighbours, 3 is relayed): forwarding (TTL, route), acknowledgements,
 * and data for this rank, which without a signer is always dropped.
 * Smoke run without libFuzzer: -DNX_FUZZ_STANDALONE, corpus files as args. */
#include <string.h>

#include "core/frame.h"
#include "fuzz_ep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nx_relay_hdr h;
  (void)nx_relay_hdr_decode(data, size, &h);
  nx_ep *ep = make_endpoint();
  if (!ep) return 0;
  nx_ep_peers_free(ep);
  if (nx_ep_peers_alloc(ep, 4) ||
      nx_route_build(&ep->route, NEXAR_TOPO_HYPERCUBE, 0, 4, 0, NULL) != 0) {
    drop_endpoint(ep);
    return 0;
  }
  for (uint32_t j = 1; j < 4; j++) {
    ep->peers[j]->rank = j;
    ep->peers[j]->state = NX_PEER_UP;
  }
  ep->peers[3]->relayed = 1;
  (void)nx_relay_deliver_locked(ep, ep->peers[2], data, size); /* forwards via 1 */
  nx_route_free(&ep->route);
  drop_endpoint(ep);
  return 0;
}

NX_FUZZ_MAIN("fuzz_relay")
