/* The shared-memory ring codec (core/ring.h): records round-trip, wrap,
 * fill and drain in order; every way a peer can corrupt the ring is
 * PROTOCOL, never a crash or a read outside the ring. */
#include <string.h>

#include "check.h"
#include "core/ring.h"

#define CAP 4096u
static _Alignas(64) uint8_t data[CAP];
static nx_ring_ctl ctl;

static void hdr_of(uint8_t h[NX_FRAME_HDR_LEN], uint64_t len, uint32_t tag) {
  nx_frame f = {0};
  f.kind = 1;
  f.src = 1;
  f.tag = tag;
  f.length = len;
  nx_frame_encode(&f, h);
}

int main(void) {
  nx_ring tx, rx;
  uint8_t h[NX_FRAME_HDR_LEN], got[NX_FRAME_HDR_LEN], buf[CAP];
  nexar_iovec v[2];
  size_t nv;
  uint64_t plen, adv;
  /* many records of varying size, so they wrap at every offset */
  atomic_store(&ctl.head, 0);
  atomic_store(&ctl.tail, 0);
  nx_ring_init(&tx, &ctl, data, CAP, 1);
  nx_ring_init(&rx, &ctl, data, CAP, 0);
  CHECK(nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == 1, "empty ring");
  /* nx_ring_record bounds a record wherever it starts (room and window
   * checks rely on it) */
  for (uint64_t len = 0; len < 2 * NX_RING_ALIGN_MIN; len += 7)
    for (uint64_t at = 0; at < 128; at += 8)
      CHECK(nx_ring_record_at(at, len) <= nx_ring_record(len), "record of %llu at %llu",
            (unsigned long long)len, (unsigned long long)at);
  uint32_t sent = 0, recvd = 0;
  for (int round = 0; round < 2000; round++) {
    uint64_t len = (uint64_t)(round * 37) % 1500;
    for (uint64_t i = 0; i < len; i++)
      buf[i] = (uint8_t)(i + sent);
    hdr_of(h, len, sent);
    nexar_iovec in[2] = {{buf, (size_t)(len / 2)}, {buf + len / 2, (size_t)(len - len / 2)}};
    int rc = nx_ring_put(&tx, h, in, 2, len);
    CHECK(rc == 0 || rc == 1, "put: %d", rc);
    if (rc == 0) sent++;
    if (rc == 1 || round % 3 == 0) {
      while (nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == 0) {
        nx_frame f;
        CHECK(!nx_frame_decode(got, NX_FRAME_HDR_LEN, &f), "decode");
        CHECK(f.tag == recvd && f.length == plen, "order: tag %llu want %u",
              (unsigned long long)f.tag, recvd);
        /* from NX_RING_ALIGN_MIN bytes the payload starts on a line */
        CHECK(plen < NX_RING_ALIGN_MIN || ((uint8_t *)v[0].base - data) % 64 == 0,
              "payload of %llu bytes at %lld", (unsigned long long)plen,
              (long long)((uint8_t *)v[0].base - data));
        uint64_t k = 0;
        for (size_t j = 0; j < nv; j++)
          for (size_t i = 0; i < v[j].len; i++, k++)
            CHECK(((uint8_t *)v[j].base)[i] == (uint8_t)(k + recvd), "payload byte %llu",
                  (unsigned long long)k);
        nx_ring_pop(&rx, adv);
        recvd++;
      }
    }
  }
  CHECK(sent > 1000, "the ring moved (%u)", sent);
  /* a ring the consumer keeps empty: the producer starts over at the first
   * byte once past the hot window, so records stay within it (plus one) */
  while (nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == 0)
    nx_ring_pop(&rx, adv), recvd++;
  CHECK(recvd == sent, "drained (%u of %u)", recvd, sent);
  uint64_t hot = nx_ring_hot(CAP, nx_ring_record(8)), lap0 = tx.pos / CAP;
  int restarted = 0;
  for (int i = 0; i < 500; i++) {
    hdr_of(h, 8, sent);
    nexar_iovec in = {buf, 8};
    CHECK(nx_ring_put(&tx, h, &in, 1, 8) == 0, "put %d", i);
    uint64_t off = (tx.pos - nx_ring_record(8)) & (CAP - 1);
    /* (the window the larger records before left is used up first) */
    restarted |= off == 0;
    CHECK(!restarted || off < hot + nx_ring_record(8), "record at %llu, hot window %llu",
          (unsigned long long)off, (unsigned long long)hot);
    CHECK(nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == 0 && plen == 8, "peek %d", i);
    nx_frame f;
    CHECK(!nx_frame_decode(got, NX_FRAME_HDR_LEN, &f) && f.tag == sent, "skip order %d", i);
    nx_ring_pop(&rx, adv);
    sent++;
  }
  CHECK(restarted, "the producer started over at the first byte");
  CHECK(tx.pos / CAP > lap0 + 10, "the producer skipped to the first byte (%llu laps)",
        (unsigned long long)(tx.pos / CAP - lap0));
  /* larger records: the window holds NX_RING_HOT_RECORDS of them, so the
   * producer does not start over after every one */
  {
    uint64_t big = 500, rec = nx_ring_record(big), laps = tx.pos / CAP;
    CHECK(nx_ring_hot(CAP, rec) == NX_RING_HOT_RECORDS * rec, "window of big records");
    int records = 0;
    for (int i = 0; i < 100; i++) {
      hdr_of(h, big, sent);
      nexar_iovec in = {buf, big};
      CHECK(nx_ring_put(&tx, h, &in, 1, big) == 0, "big put %d", i);
      CHECK(nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == 0 && plen == big, "big peek %d", i);
      nx_ring_pop(&rx, adv);
      sent++, records++;
    }
    uint64_t per_lap = (uint64_t)records / (tx.pos / CAP - laps);
    CHECK(per_lap >= NX_RING_HOT_RECORDS, "%llu big records a lap", (unsigned long long)per_lap);
  }
  /* a skip with no record published after it */
  {
    uint64_t p0 = rx.pos;
    uint32_t skip[2] = {0, ~0u};
    memcpy(data + (p0 & (CAP - 1)), skip, 8);
    atomic_store(&ctl.tail, p0 + (CAP - (p0 & (CAP - 1))));
    CHECK(nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == NEXAR_ERR_PROTOCOL, "bare skip");
    atomic_store(&ctl.tail, p0);
  }
  /* corruption: a tail beyond what the ring holds */
  uint64_t pos = rx.pos;
  atomic_store(&ctl.tail, pos + CAP + 8);
  CHECK(nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == NEXAR_ERR_PROTOCOL, "tail too far");
  /* a prefix whose words disagree */
  atomic_store(&ctl.tail, pos + 256);
  memset(data, 0x41, sizeof data);
  CHECK(nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == NEXAR_ERR_PROTOCOL, "bad prefix");
  /* a consistent prefix claiming more than is published */
  uint32_t pre[2] = {NX_FRAME_HDR_LEN + 1000, ~(uint32_t)(NX_FRAME_HDR_LEN + 1000)};
  for (int i = 0; i < 8; i++)
    data[(pos + (uint64_t)i) & (CAP - 1)] = ((uint8_t *)pre)[i];
  CHECK(nx_ring_peek(&rx, got, v, &nv, &plen, &adv) == NEXAR_ERR_PROTOCOL, "record too long");
  /* a producer that sees an impossible head: it reads head again once the
   * head it last saw leaves no room, and must find it then, within one
   * ring's worth of records */
  atomic_store(&ctl.head, tx.pos + 64ull * CAP);
  int prc = 0;
  for (unsigned i = 0; i <= CAP / 8 && prc == 0; i++)
    prc = nx_ring_put(&tx, h, NULL, 0, 0);
  CHECK(prc == NEXAR_ERR_PROTOCOL, "head ahead of tail (%d)", prc);
  printf("ring_test: ok (%u records)\n", sent);
  return 0;
}
