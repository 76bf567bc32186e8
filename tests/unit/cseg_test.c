/* What a communicator segment's words may say (runtime/cseg.h): an arrival
 * word and a message-path mark, both written by the peer, judged for one
 * sequence; every value no rank that follows the protocol can write is
 * PROTOCOL. Also the buffer size every rank derives from the rank count. */
#include "check.h"
#include "runtime/cseg.h"

int main(void) {
  /* stored values are sequence + 1; 0 is "never" */
  CHECK(nx_cseg_arrival(0, 0, 0) == 0, "nothing yet");
  CHECK(nx_cseg_arrival(1, 0, 0) == 1, "arrived at 0");
  CHECK(nx_cseg_arrival(6, 0, 7) == 0, "its arrival at 5 (same parity): stale");
  CHECK(nx_cseg_arrival(8, 0, 7) == 1, "arrived at 7");
  CHECK(nx_cseg_arrival(8, 9, 7) == 1, "arrived, then took messages at 8");
  CHECK(nx_cseg_arrival(6, 8, 7) == 2, "took messages at 7: a mismatch");
  CHECK(nx_cseg_arrival(6, 12, 7) == 2, "went past 7 by messages");
  CHECK(nx_cseg_arrival(6, 7, 7) == 0, "messages at 6 only: it may still arrive");
  CHECK(nx_cseg_arrival(10, 0, 7) == NEXAR_ERR_PROTOCOL, "at 9 before we left 7");
  CHECK(nx_cseg_arrival(UINT64_MAX, UINT64_MAX, 7) == NEXAR_ERR_PROTOCOL,
        "nx_cseg_arrival(UINT64_MAX, UINT64_MAX, 7) == NEXAR_ERR_PROTOCOL");
  CHECK(nx_cseg_arrival(1ull << 40, 0, 3) == NEXAR_ERR_PROTOCOL,
        "nx_cseg_arrival(1ull << 40, 0, 3) == NEXAR_ERR_PROTOCOL");
  /* an earlier sequence we did not wait for (k = 5): entered is seq + 1 */
  CHECK(nx_cseg_past(6, 0, 6, 5) == 0, "still in 5: not final");
  CHECK(nx_cseg_past(0, 0, 5, 5) == 0, "not begun 5 yet");
  CHECK(nx_cseg_past(6, 0, 7, 5) == 1, "arrived at 5, began 6");
  CHECK(nx_cseg_past(6, 9, 9, 5) == 1, "arrived at 5, then messages");
  CHECK(nx_cseg_past(2, 6, 7, 5) == 2, "took 5 by messages");
  CHECK(nx_cseg_past(2, 0, 7, 5) == 3, "left 5 without either: failed or refused it");
  CHECK(nx_cseg_past(10, 0, 10, 5) == 4, "arrived at 9 on 5's slot: past it");
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
