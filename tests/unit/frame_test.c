/* Frame header codec: round trip of every field, and refusal of anything
 * malformed (magic, version, kind, flags, reserved bytes, length bound). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/frame.h"
#include "core/common.h"

#include "check.h"

static nx_frame sample(void) {
  nx_frame f = {.kind = NX_KIND_COLL,
                .flags = NX_FLAG_LAST,
                .coll_op = 3,
                .dtype = 9,
                .redop = 2,
                .comm_id = 0x1122334455667788ull,
                .src = 0xdeadbeef,
                .tag = 0x0102030405060708ull,
                .round = 77,
                .segment = 0xfffffffe,
                .root = 12345,
                .status = -13,
                .count = 1ull << 40,
                .length = NX_FRAME_MAX_PAYLOAD};
  return f;
}

int main(void) {
  uint8_t b[NX_FRAME_HDR_LEN];
  nx_frame f = sample(), g;
  nx_frame_encode(&f, b);
  CHECK(b[0] == 0x4e && b[1] == 0x58 && b[2] == NX_FRAME_VERSION, "magic/version bytes");
  CHECK(nx_frame_decode(b, sizeof b, &g) == 0, "decode");
  CHECK(memcmp(&f, &g, sizeof f) == 0 ||
            (f.kind == g.kind && f.flags == g.flags && f.coll_op == g.coll_op &&
             f.dtype == g.dtype && f.redop == g.redop && f.comm_id == g.comm_id && f.src == g.src &&
             f.tag == g.tag && f.round == g.round && f.segment == g.segment && f.root == g.root &&
             f.status == g.status && f.count == g.count && f.length == g.length),
        "round trip");
  /* little-endian fixed offsets: the comm id starts at byte 8 */
  CHECK(b[8] == 0x88 && b[15] == 0x11, "comm id layout");
  /* every truncation is refused */
  for (size_t n = 0; n < sizeof b; n++)
    CHECK(nx_frame_decode(b, n, &g) != 0, "truncated %zu", n);
  struct {
    size_t off;
    uint8_t val;
    const char *what;
  } bad[] = {{0, 0, "magic"},           {2, 2, "version"},
             {3, 0, "kind 0"},          {3, NX_KIND_MAX + 1, "kind"},
             {4, 0x80, "unknown flag"}, {60, 1, "reserved"},
             {55, 0x01, "length > max"}};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    uint8_t c[NX_FRAME_HDR_LEN];
    memcpy(c, b, sizeof c);
    if (bad[i].off == 55)
      memset(c + 48, 0xff, 8);
    else
      c[bad[i].off] = bad[i].val;
    CHECK(nx_frame_decode(c, sizeof c, &g) == NEXAR_ERR_PROTOCOL, "%s accepted", bad[i].what);
  }
  /* every single-bit flip of a valid header either decodes or is refused: never crashes */
  int refused = 0;
  for (size_t i = 0; i < sizeof b * 8; i++) {
    uint8_t c[NX_FRAME_HDR_LEN];
    memcpy(c, b, sizeof c);
    c[i / 8] ^= (uint8_t)(1u << (i % 8));
    refused += nx_frame_decode(c, sizeof c, &g) != 0;
  }
  CHECK(refused > 0, "no bit flip refused");
  /* the short header (a same-host ring's): only frames with nothing but a
   * kind, a communicator, a 32-bit tag, a sender and a length have one */
  {
    nx_frame s = {.kind = NX_KIND_P2P,
                  .comm_id = 0x1122334455667788ull,
                  .src = 3,
                  .tag = 0xfffffffeu,
                  .length = 8};
    uint8_t h[NX_FRAME_SHORT_LEN];
    CHECK(nx_frame_encode_short(&s, h) == 1 && h[0] == NX_FRAME_SHORT_MAGIC, "short header");
    CHECK(nx_frame_decode_short(h, 3, 8, &g) == 0 && memcmp(&s, &g, sizeof s) == 0,
          "short header round trip");
    nx_frame no[] = {s, s, s, s};
    no[0].tag = 1ull << 32;
    no[1].flags = NX_FLAG_LAST;
    no[2].count = 1;
    no[3].status = -1;
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
      CHECK(nx_frame_encode_short(&no[i], h) == 0, "short header for frame %zu", i);
    nx_frame_encode_short(&s, h);
    uint8_t c[NX_FRAME_SHORT_LEN];
    for (int i = 0; i < 4; i++) { /* magic, kind 0, kind too high, reserved */
      memcpy(c, h, sizeof c);
      c[i == 0 ? 0 : i == 3 ? 2 : 1] = (uint8_t)(i == 0 ? 0x4e : i == 1 ? 0 : i == 2 ? 200 : 1);
      CHECK(nx_frame_decode_short(c, 3, 8, &g) == NEXAR_ERR_PROTOCOL, "short case %d accepted", i);
    }
    CHECK(nx_frame_decode_short(h, 3, NX_FRAME_MAX_PAYLOAD + 1, &g) == NEXAR_ERR_PROTOCOL,
          "short header with too long a payload");
  }
  printf("frame_test: all passed (%d of %zu bit flips refused)\n", refused, sizeof b * 8);
  return 0;
}
