/* Allocation failures in the receive order surface as NEXAR_ERR_NOMEM: a
 * stream cancelled before its header whose id cannot be recorded used to be
 * forgotten silently, so every later stream of that peer waited forever.
 * Also: with the record made, later messages are still delivered in order. */
#include <stdlib.h>
#include <string.h>

#include "core/frame.h"
#include "runtime/comm.h"

#include "../../fuzz/fuzz_ep.h"
#include "check.h"

static nx_rxstream *open_stream(nx_ep *ep, int64_t sid) {
  nx_rxstream *rs = NULL;
  nx_rx_stream_open(ep, &ep->peers[1], sid, &rs);
  CHECK(rs != NULL, "open stream %lld", (long long)sid);
  return rs;
}

/* a whole 0-byte P2P message with tag on stream sid */
static void message(nx_ep *ep, int64_t sid, uint64_t tag) {
  nx_rxstream *rs = open_stream(ep, sid);
  nx_frame f = {.kind = NX_KIND_P2P, .src = 1, .tag = tag};
  uint8_t hdr[NX_FRAME_HDR_LEN];
  nx_frame_encode(&f, hdr);
  uint64_t credit, held;
  CHECK(nx_rx_stream_data(ep, rs, hdr, sizeof hdr, 1, &credit, &held) == 0, "stream data");
  CHECK(nx_rx_stream_close(ep, rs) == 0, "close after FIN");
}

static int queued(nx_ep *ep, uint64_t tag) {
  for (nx_msg *m = ep->unexp_head; m; m = m->next)
    if (m->f.tag == tag) return 1;
  return 0;
}

int main(void) {
  nx_ep *ep = make_endpoint();
  CHECK(ep, "endpoint");
  ep->peers[1].rx_next_sid = 0;
  /* stream 4 is cancelled before its header while 0 is outstanding: its id
   * must be recorded; the record's allocation fails */
  nx_rxstream *rs = open_stream(ep, 4);
  nx_realloc_fail_at = 1;
  int rc = nx_rx_stream_close(ep, rs);
  nx_realloc_fail_at = 0;
  CHECK(rc == NEXAR_ERR_NOMEM, "failed record: got %d, want NEXAR_ERR_NOMEM", rc);
  drop_endpoint(ep);

  /* the same with memory: messages on 0 and 8 are delivered around 4 */
  ep = make_endpoint();
  CHECK(ep, "endpoint");
  rs = open_stream(ep, 4);
  CHECK(nx_rx_stream_close(ep, rs) == 0, "record cancelled stream");
  message(ep, 0, 10);
  message(ep, 8, 11);
  CHECK(queued(ep, 10) && queued(ep, 11), "messages after a cancelled stream were delivered");
  drop_endpoint(ep);
  printf("nomem_test: ok\n");
  return 0;
}
