/* libFuzzer target for the bytes a peer puts on a stream: the frame header
 * decoder, and the whole receive path behind it (header validation, ordering,
 * matching, payload buffering, FIN handling) on an endpoint without sockets.
 * Input: byte 0 = number of chunks - 1 (mod 8), then the stream bytes, split
 * into that many pieces; the last piece carries FIN.
 * Smoke run without libFuzzer: -DNX_FUZZ_STANDALONE, corpus files as args. */
#include <stdlib.h>
#include <string.h>

#include "core/frame.h"
#include "runtime/comm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void drop_endpoint(nx_ep *ep) {
  while (ep->unexp_head) {
    nx_msg *m = ep->unexp_head;
    ep->unexp_head = m->next;
    nx_msg_free(ep, m);
  }
  while (ep->tx_all) nx_tx_free(ep->tx_all);
  while (ep->rx_all) nx_rx_stream_close(ep, ep->rx_all);
  for (uint32_t j = 0; j < ep->world; j++) {
    while (ep->peers[j].rx_pending) {
      nx_msg *m = ep->peers[j].rx_pending;
      ep->peers[j].rx_pending = m->next_pending;
      nx_msg_free(ep, m);
    }
    free(ep->peers[j].rx_skip);
  }
  free(ep->peers);
  pthread_mutex_destroy(&ep->mu);
  pthread_cond_destroy(&ep->cv);
  free(ep);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nx_frame f;
  (void)nx_frame_decode(data, size, &f);
  if (size < 1) return 0;
  nx_ep *ep = calloc(1, sizeof *ep);
  if (!ep) return 0;
  pthread_mutex_init(&ep->mu, NULL);
  pthread_cond_init(&ep->cv, NULL);
  ep->world = 2;
  ep->rank = 0;
  ep->in_progress = 1; /* no sockets: replies stay queued */
  ep->peers = calloc(2, sizeof *ep->peers);
  if (!ep->peers) {
    free(ep);
    return 0;
  }
  ep->peers[1].rank = 1;
  ep->peers[1].state = NX_PEER_UP;
  ep->peers[1].rx_next_sid = 0;
  size_t chunks = (size_t)(data[0] % 8) + 1;
  const uint8_t *p = data + 1;
  size_t left = size - 1;
  nx_rxstream *rs = NULL;
  nx_rx_stream_open(ep, &ep->peers[1], 0, &rs);
  int failed = 0;
  for (size_t i = 0; rs && i < chunks && !failed; i++) {
    size_t n = i + 1 == chunks ? left : left / (chunks - i);
    uint64_t credit;
    failed = nx_rx_stream_data(ep, rs, p, n, i + 1 == chunks, &credit) != 0;
    p += n;
    left -= n;
  }
  drop_endpoint(ep);
  return 0;
}

#ifdef NX_FUZZ_STANDALONE
#include <stdio.h>
int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    FILE *fp = fopen(argv[i], "rb");
    if (!fp) return 1;
    static uint8_t buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    LLVMFuzzerTestOneInput(buf, n);
  }
  printf("fuzz_frame: %d inputs ok\n", argc - 1);
  return 0;
}
#endif
