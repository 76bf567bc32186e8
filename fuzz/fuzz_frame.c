/* libFuzzer target for the bytes a peer puts on a stream: the frame header
 * decoders (full, and short as same-host rings carry it), and the whole receive path behind it
 * (header validation, ordering, matching, payload buffering, FIN handling) on an endpoint without
 * sockets. Input: byte 0 = number of chunks - 1 (mod 8), then the stream bytes, split into that
 * many pieces; the last piece carries FIN. Smoke run without libFuzzer: -DNX_FUZZ_STANDALONE,
 * corpus files as args. */
#include <string.h>

#include "core/frame.h"
#include "fuzz_ep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  nx_frame f;
  (void)nx_frame_decode(data, size, &f);
  if (size >= NX_FRAME_SHORT_LEN) (void)nx_frame_decode_short(data, 1, size, &f);
  if (size < 1) return 0;
  nx_ep *ep = make_endpoint();
  if (!ep) return 0;
  size_t chunks = (size_t)(data[0] % 8) + 1;
  const uint8_t *p = data + 1;
  size_t left = size - 1;
  nx_rxstream *rs = NULL;
  nx_rx_stream_open(ep, ep->peers[1], 0, &rs);
  int failed = 0;
  for (size_t i = 0; rs && i < chunks && !failed; i++) {
    size_t n = i + 1 == chunks ? left : left / (chunks - i);
    uint64_t credit, held;
    failed = nx_rx_stream_data(ep, rs, p, n, i + 1 == chunks, &credit, &held) != 0;
    p += n;
    left -= n;
  }
  drop_endpoint(ep);
  return 0;
}

NX_FUZZ_MAIN("fuzz_frame")
