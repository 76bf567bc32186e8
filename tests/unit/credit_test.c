/* A stream whose credit waits on the endpoint's credit list (a receiver
 * released bytes; the progress thread returns them on its next pass) must
 * leave that list when its peer dies and the stream is freed: the next
 * credit pass otherwise reads freed memory (found by ASan in
 * integration.fault_processes; this test crashes under ASan without the
 * fix). White-box, on a socket-less endpoint like the fuzz targets'. */
#include "../../fuzz/fuzz_ep.h"
#include "check.h"

int main(void) {
  nx_ep *ep = make_endpoint();
  CHECK(ep, "endpoint");
  pthread_mutex_lock(&ep->mu);
  nx_rxstream *rs = NULL;
  nx_rx_stream_open(ep, ep->peers[1], 0, &rs);
  CHECK(rs, "stream");
  /* what msg.c's queue_credit does when a receiver consumed bytes */
  rs->held = 4096;
  rs->credit_queued = 1;
  rs->next_credit = ep->credit_list;
  ep->credit_list = rs;
  nx_peer_dead_locked(ep, ep->peers[1], NEXAR_ERR_PEER_LOST, "test: killed");
  CHECK(ep->rx_all == NULL, "the dead peer's stream is freed");
  CHECK(ep->credit_list == NULL, "a freed stream left on the credit list");
  nx_ep_credit_flush(ep); /* must not touch the freed stream */
  pthread_mutex_unlock(&ep->mu);
  drop_endpoint(ep);
  return 0;
}
