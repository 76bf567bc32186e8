/* What a communicator segment's words may say (runtime/cseg.h): an arrival
 * word and a message-path mark, both written by the peer, judged for one
 * sequence; every value no rank that follows the protocol can write is
 * PROTOCOL. Also the buffer size every rank derives from the rank count. */
#include "check.h"
#include "runtime/cseg.h"

int main(void) {
  /* stored values are sequence + 1; 0 is "never" */
  /* arrival (arrive, msg, entered before, entered after, seq) */
  CHECK(nx_cseg_arrival(0, 0, 1, 1, 0) == 0, "nothing yet");
  CHECK(nx_cseg_arrival(1, 0, 1, 1, 0) == 1, "arrived at 0");
  CHECK(nx_cseg_arrival(6, 0, 8, 8, 7) == 0, "its arrival at 5 (same parity): stale");
  CHECK(nx_cseg_arrival(8, 0, 8, 8, 7) == 1, "arrived at 7");
  CHECK(nx_cseg_arrival(8, 9, 9, 9, 7) == 1, "arrived, then took messages at 8");
  CHECK(nx_cseg_arrival(6, 8, 8, 8, 7) == 2, "took messages at 7: a mismatch");
  CHECK(nx_cseg_arrival(6, 12, 12, 12, 7) == 2, "went past 7 by messages");
  CHECK(nx_cseg_arrival(6, 7, 8, 8, 7) == 0, "messages at 6 only: it may still arrive");
  CHECK(nx_cseg_arrival(4, 0, 9, 9, 7) == 2, "began 8 without arriving at 7 (a ring broadcast)");
  CHECK(nx_cseg_arrival(12, 0, 8, 12, 7) == 2, "arrived at 11 having begun it: ran past 7");
  CHECK(nx_cseg_arrival(10, 0, 8, 8, 7) == NEXAR_ERR_PROTOCOL, "at 9 before it began 9");
  CHECK(nx_cseg_arrival(UINT64_MAX, UINT64_MAX, 8, 8, 7) == NEXAR_ERR_PROTOCOL,
        "nx_cseg_arrival(UINT64_MAX, UINT64_MAX, 8, 8, 7) == NEXAR_ERR_PROTOCOL");
  CHECK(nx_cseg_arrival(1ull << 40, 0, 4, 4, 3) == NEXAR_ERR_PROTOCOL,
        "nx_cseg_arrival(1ull << 40, 0, 4, 4, 3) == NEXAR_ERR_PROTOCOL");
  /* a broadcast entry (held, arrive, msg, entered before, entered after, seq) */
  CHECK(nx_cseg_bentry_state(0, 0, 0, 1, 1, 0) == 0, "root not there yet");
  CHECK(nx_cseg_bentry_state(8, 0, 0, 8, 8, 7) == 1, "holds 7");
  CHECK(nx_cseg_bentry_state(201 - NX_CSEG_BDEPTH, 0, 0, 201, 201, 200) == 0,
        "an older one: not yet");
  CHECK(nx_cseg_bentry_state(1, 0, 0, 9, 9, 7) == 2, "root began 8 without writing 7");
  CHECK(nx_cseg_bentry_state(1, 8, 0, 8, 8, 7) == 2, "root arrived at 7 on the buffers");
  CHECK(nx_cseg_bentry_state(1, 0, 8, 8, 8, 7) == 2, "root took 7 by messages");
  CHECK(nx_cseg_bentry_state(8 + NX_CSEG_BDEPTH, 0, 0, 8, 8 + NX_CSEG_BDEPTH, 7) == 2,
        "a later broadcast in 7's entry, begun: the root ran past 7");
  CHECK(nx_cseg_bentry_state(8 + NX_CSEG_BDEPTH, 0, 0, 8, 8, 7) == NEXAR_ERR_PROTOCOL,
        "a broadcast the root has not begun");
  CHECK(nx_cseg_bentry_state(UINT64_MAX, 0, 0, 8, 8, 7) == NEXAR_ERR_PROTOCOL,
        "nx_cseg_bentry_state(UINT64_MAX, ...) == NEXAR_ERR_PROTOCOL");
  CHECK(nx_cseg_bentry_state(1, 1ull << 40, 0, 8, 8, 7) == NEXAR_ERR_PROTOCOL,
        "an arrival far ahead of what it began");
  /* buffer size: a pure function of n, page aligned, 64 KiB .. 1 MiB */
  for (uint32_t n = 1; n <= 4096; n++) {
    size_t s = nx_cseg_slot(n);
    CHECK(s >= (64u << 10) && s <= (1u << 20) && s % 4096 == 0,
          "slot within 64 KiB .. 1 MiB, page aligned");
    CHECK(n > 16 || s == (1u << 20), "n > 16 || s == (1u << 20)");
    CHECK(n < 256 || s == (64u << 10), "n < 256 || s == (64u << 10)");
  }
  printf("cseg_test: ok\n");
  return 0;
}
