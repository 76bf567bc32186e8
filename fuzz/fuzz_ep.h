/* Shared by the fuzz targets that feed a socket-less endpoint of world 2
 * (rank 0; rank 1 is the sender): its making, and its teardown, which frees
 * every message, stream and queued reply the input left behind. */
#ifndef NX_FUZZ_EP_H
#define NX_FUZZ_EP_H
#include <stdlib.h>

#include "runtime/comm.h"

static inline void drop_endpoint(nx_ep *ep) {
  while (ep->unexp_head) {
    nx_msg *m = ep->unexp_head;
    ep->unexp_head = m->next;
    nx_msg_free(ep, m);
  }
  while (ep->tx_all)
    nx_tx_free(ep->tx_all);
  while (ep->rx_all)
    nx_rx_stream_close(ep, ep->rx_all);
  for (uint32_t j = 0; j < ep->world; j++) {
    while (ep->peers[j]->rx_pending) {
      nx_msg *m = ep->peers[j]->rx_pending;
      ep->peers[j]->rx_pending = m->next_pending;
      nx_msg_free(ep, m);
    }
    free(ep->peers[j]->rx_skip);
  }
  nx_ep_peers_free(ep);
  pthread_mutex_destroy(&ep->mu);
  pthread_cond_destroy(&ep->cv);
  free(ep);
}

static inline nx_ep *make_endpoint(void) {
  nx_ep *ep = calloc(1, sizeof *ep);
  if (!ep) return NULL;
  pthread_mutex_init(&ep->mu, NULL);
  pthread_cond_init(&ep->cv, NULL);
  ep->rank = 0;
  ep->route = (nx_route){.world = 2, .me = 0};
  ep->lane_fd = ep->bulk_lfd = -1;
  ep->in_progress = 1; /* no sockets: replies stay queued */
  ep->unexp_budget = NX_UNEXP_BUDGET;
  if (nx_ep_peers_alloc(ep, 2)) {
    pthread_mutex_destroy(&ep->mu);
    pthread_cond_destroy(&ep->cv);
    free(ep);
    return NULL;
  }
  ep->peers[1]->rank = 1;
  ep->peers[1]->state = NX_PEER_UP;
  return ep;
}

/* Standalone smoke runner (-DNX_FUZZ_STANDALONE): corpus files as arguments. */
#ifdef NX_FUZZ_STANDALONE
#include <stdio.h>
#define NX_FUZZ_MAIN(name)                                                                         \
  int main(int argc, char **argv) {                                                                \
    for (int i = 1; i < argc; i++) {                                                               \
      FILE *fp = fopen(argv[i], "rb");                                                             \
      if (!fp) return 1;                                                                           \
      static uint8_t buf[1 << 20];                                                                 \
      size_t n = fread(buf, 1, sizeof buf, fp);                                                    \
      fclose(fp);                                                                                  \
      LLVMFuzzerTestOneInput(buf, n);                                                              \
    }                                                                                              \
    printf(name ": %d inputs ok\n", argc - 1);                                                     \
    return 0;                                                                                      \
  }
#else
#define NX_FUZZ_MAIN(name)
#endif

#endif
