/* libFuzzer target for the agreement messages (proto/agree.h): the decoder
 * (every decoded message must re-encode to the same bytes) and the state
 * machine behind it. Input: byte 0 picks n (1 + b % 9), byte 1 my index
 * (mod n), byte 2 the quorum mode and whether the instance starts first;
 * then records [from u8][time step u8][length u16 LE][that many bytes],
 * each delivered as a message from `from` (mod n), with a timer run after
 * each.
 * Smoke run without libFuzzer: -DNX_FUZZ_STANDALONE, corpus files as args. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_ep.h"
#include "proto/agree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 3) return 0;
  uint32_t n = 1u + data[0] % 9u, me = data[1] % n;
  uint64_t ids[9];
  for (uint32_t i = 0; i < n; i++)
    ids[i] = 100 + 3 * i;
  nx_agree a;
  if (nx_agree_init(&a, 5, n, ids, me, data[2] & 1, 100, 1000) != 0) return 0;
  uint64_t now = 0;
  if (data[2] & 2) (void)nx_agree_start(&a, now, 0xffffffffu, NULL);
  const uint8_t *p = data + 3;
  size_t left = size - 3;
  int started = (data[2] & 2) != 0;
  while (left >= 4) {
    uint32_t from = p[0] % n;
    now += p[1];
    size_t len = (size_t)p[2] | (size_t)p[3] << 8;
    p += 4;
    left -= 4;
    if (len > left) len = left;
    nx_agree_msg m;
    if (nx_agree_decode(p, len, &m) == 0) {
      uint8_t *re = malloc(len);
      if (!re || nx_agree_encode(&m, re, len) != len || memcmp(re, p, len) != 0) abort();
      free(re);
    }
    (void)nx_agree_on_msg(&a, now, from, p, len);
    if (!started && len && p[0] & 1) {
      (void)nx_agree_start(&a, now, 0x0f0f0f0fu, NULL);
      started = 1;
    }
    (void)nx_agree_on_timer(&a, now);
    nx_agree_action act;
    while (nx_agree_pop(&a, &act)) {
      nx_agree_msg back;
      if (act.kind == NX_AGREE_SEND && nx_agree_decode(act.buf, act.len, &back) != 0) abort();
    }
    p += len;
    left -= len;
  }
  (void)nx_agree_next_deadline(&a);
  nx_agree_free(&a);
  return 0;
}

NX_FUZZ_MAIN("fuzz_agree")
