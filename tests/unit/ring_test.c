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

/* A record's header, full or short (the ring carries either). */
static int decode(const uint8_t *h, uint32_t hl, uint64_t plen, nx_frame *f) {
  return hl == NX_FRAME_SHORT_LEN ? nx_frame_decode_short(h, 1, plen, f)
                                  : nx_frame_decode(h, hl, f);
}

int main(void) {
  nx_ring tx, rx;
  uint8_t h[NX_FRAME_HDR_LEN], got[NX_FRAME_HDR_LEN], buf[CAP];
  nexar_iovec v[2];
  size_t nv;
  uint32_t hl;
  uint64_t plen, adv, ack;
  /* many records of varying size, so they wrap at every offset */
  atomic_store(&ctl.head, 0);
  atomic_store(&ctl.tail, 0);
  nx_ring_init(&tx, &ctl, data, CAP, 1);
  nx_ring_init(&rx, &ctl, data, CAP, 0);
  CHECK(nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == 1, "empty ring");
  /* nx_ring_record bounds a record wherever it starts (room and window
   * checks rely on it) */
  for (uint64_t len = 0; len < 2 * NX_RING_ALIGN_MIN; len += 7)
    for (uint64_t at = 0; at < 128; at += 8)
      CHECK(nx_ring_record_at(at, len, NX_FRAME_HDR_LEN) <= nx_ring_record(len) &&
                nx_ring_record_at(at, len, NX_FRAME_SHORT_LEN) <= nx_ring_record(len),
            "record of %llu at %llu", (unsigned long long)len, (unsigned long long)at);
  uint32_t sent = 0, recvd = 0;
  for (int round = 0; round < 2000; round++) {
    uint64_t len = (uint64_t)(round * 37) % 1500;
    for (uint64_t i = 0; i < len; i++)
      buf[i] = (uint8_t)(i + sent);
    hdr_of(h, len, sent);
    uint32_t hlen = NX_FRAME_HDR_LEN;
    if (round % 2) { /* every other one with a short header */
      nx_frame f = {.kind = 1, .src = 1, .tag = sent, .length = len};
      CHECK(nx_frame_encode_short(&f, h), "short header");
      hlen = NX_FRAME_SHORT_LEN;
    }
    nexar_iovec in[2] = {{buf, (size_t)(len / 2)}, {buf + len / 2, (size_t)(len - len / 2)}};
    int rc = nx_ring_put(&tx, 0, h, hlen, in, 2, len);
    CHECK(rc == 0 || rc == 1, "put: %d", rc);
    if (rc == 0) sent++;
    if (rc == 1 || round % 3 == 0) {
      while (nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == 0) {
        nx_frame f;
        CHECK(!decode(got, hl, plen, &f), "decode");
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
  while (nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == 0)
    nx_ring_pop(&rx, adv), recvd++;
  CHECK(recvd == sent, "drained (%u of %u)", recvd, sent);
  uint64_t hot = nx_ring_hot(CAP, nx_ring_record(8)), lap0 = tx.pos / CAP;
  int restarted = 0;
  for (int i = 0; i < 500; i++) {
    hdr_of(h, 8, sent);
    nexar_iovec in = {buf, 8};
    CHECK(nx_ring_put(&tx, 0, h, NX_FRAME_HDR_LEN, &in, 1, 8) == 0, "put %d", i);
    uint64_t off = (tx.pos - nx_ring_record(8)) & (CAP - 1);
    /* (the window the larger records before left is used up first) */
    restarted |= off == 0;
    CHECK(!restarted || off < hot + nx_ring_record(8), "record at %llu, hot window %llu",
          (unsigned long long)off, (unsigned long long)hot);
    CHECK(nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == 0 && plen == 8, "peek %d", i);
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
      CHECK(nx_ring_put(&tx, 0, h, NX_FRAME_HDR_LEN, &in, 1, big) == 0, "big put %d", i);
      CHECK(nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == 0 && plen == big,
            "big peek %d", i);
      nx_ring_pop(&rx, adv);
      sent++, records++;
    }
    uint64_t per_lap = (uint64_t)records / (tx.pos / CAP - laps);
    CHECK(per_lap >= NX_RING_HOT_RECORDS, "%llu big records a lap", (unsigned long long)per_lap);
  }
  /* acks: a request and reply through a pair of rings. Each side learns
   * from the other's records that its ring is empty, so every small record
   * (after the first) starts over at the first byte without reading the
   * other's head; and an ack of more than was published is PROTOCOL */
  {
    static _Alignas(64) uint8_t d2[2][CAP];
    static nx_ring_ctl c2[2];
    nx_ring a2b, b2a, brx, arx; /* a writes a2b, b reads it as brx */
    nx_ring_init(&a2b, &c2[0], d2[0], CAP, 1);
    nx_ring_init(&brx, &c2[0], d2[0], CAP, 0);
    nx_ring_init(&b2a, &c2[1], d2[1], CAP, 1);
    nx_ring_init(&arx, &c2[1], d2[1], CAP, 0);
    int at0 = 0;
    for (int i = 0; i < 300; i++) {
      uint64_t check = a2b.check;
      hdr_of(h, 8, (uint32_t)i);
      nexar_iovec in = {buf, 8};
      CHECK(nx_ring_put(&a2b, arx.pos, h, NX_FRAME_HDR_LEN, &in, 1, 8) == 0, "request %d", i);
      at0 += i > 1 && ((a2b.pos - nx_ring_record(8)) & (CAP - 1)) == 0;
      CHECK(nx_ring_peek(&brx, got, &hl, v, &nv, &plen, &adv, &ack) == 0 && plen == 8, "req %d", i);
      CHECK(nx_ring_acked(&b2a, ack) == 0, "ack %d", i);
      nx_ring_pop(&brx, adv);
      CHECK(nx_ring_put(&b2a, brx.pos, h, NX_FRAME_HDR_LEN, &in, 1, 8) == 0, "reply %d", i);
      CHECK(nx_ring_peek(&arx, got, &hl, v, &nv, &plen, &adv, &ack) == 0 && plen == 8, "rep %d", i);
      CHECK(nx_ring_acked(&a2b, ack) == 0 && a2b.seen == a2b.pos, "reply's ack %d", i);
      CHECK(a2b.check == check, "no read of the consumer's head %d", i);
      nx_ring_pop(&arx, adv);
    }
    CHECK(at0 == 298, "requests at the first byte: %d of 298", at0);
    /* an exchange: both write, then both read, so each ack is a record
     * late; small records still keep to the window */
    uint64_t win = nx_ring_window(nx_ring_record(8)), far = 0, check = a2b.check;
    for (int i = 0; i < 300; i++) {
      hdr_of(h, 8, (uint32_t)i);
      nexar_iovec in = {buf, 8};
      CHECK(nx_ring_put(&a2b, arx.pos, h, NX_FRAME_HDR_LEN, &in, 1, 8) == 0, "a's %d", i);
      uint64_t off = (a2b.pos - nx_ring_record(8)) & (CAP - 1);
      far = off > far ? off : far;
      CHECK(nx_ring_put(&b2a, brx.pos, h, NX_FRAME_HDR_LEN, &in, 1, 8) == 0, "b's %d", i);
      CHECK(nx_ring_peek(&brx, got, &hl, v, &nv, &plen, &adv, &ack) == 0, "b reads %d", i);
      CHECK(nx_ring_acked(&b2a, ack) == 0, "b's ack %d", i);
      nx_ring_pop(&brx, adv);
      CHECK(nx_ring_peek(&arx, got, &hl, v, &nv, &plen, &adv, &ack) == 0, "a reads %d", i);
      CHECK(nx_ring_acked(&a2b, ack) == 0, "a's ack %d", i);
      nx_ring_pop(&arx, adv);
    }
    CHECK(far < win, "exchange records within the window (%llu, window %llu)",
          (unsigned long long)far, (unsigned long long)win);
    CHECK(a2b.check == check, "the acks sufficed: no read of the consumer's head");
    /* larger records wait for an empty ring: with the consumer a record
     * behind, the producer goes on through the ring (rewriting lines the
     * consumer still reads made a stream several times slower) */
    uint64_t big = 600, lap = a2b.pos / CAP;
    for (int i = 0; i < 4; i++) {
      hdr_of(h, big, (uint32_t)i);
      nexar_iovec in = {buf, big};
      CHECK(nx_ring_put(&a2b, arx.pos, h, NX_FRAME_HDR_LEN, &in, 1, big) == 0, "big %d", i);
      if (i) {
        CHECK(nx_ring_peek(&brx, got, &hl, v, &nv, &plen, &adv, &ack) == 0, "big read %d", i);
        nx_ring_pop(&brx, adv);
        CHECK(nx_ring_acked(&a2b, brx.pos) == 0, "big ack %d", i);
      }
    }
    CHECK(a2b.pos / CAP == lap && (a2b.pos & (CAP - 1)) > 3 * nx_ring_record(big),
          "a stream a record behind did not start over");
    while (nx_ring_peek(&brx, got, &hl, v, &nv, &plen, &adv, &ack) == 0)
      nx_ring_pop(&brx, adv);
    CHECK(nx_ring_acked(&a2b, brx.pos) == 0 && a2b.seen == a2b.pos, "all acknowledged");
    CHECK(nx_ring_acked(&a2b, a2b.pos - 8) == 0 && a2b.seen == a2b.pos, "old ack ignored");
    CHECK(nx_ring_acked(&a2b, a2b.pos + 8) == NEXAR_ERR_PROTOCOL, "ack of the unpublished");
  }
  /* a waiter without the lock watches the control block (nx_ring_ready):
   * ready once a record is published in place or started over, not once it
   * is taken, and not while a consumer that found a record in place is
   * ahead of a tail not yet stored */
  {
    CHECK(!nx_ring_ready(&ctl), "nothing published");
    uint64_t lap = tx.pos / CAP;
    for (int i = 0; i < 3; i++) { /* (acked empty: each starts over) */
      CHECK(nx_ring_acked(&tx, rx.pos) == 0, "ack %d", i);
      hdr_of(h, 8, sent);
      nexar_iovec in = {buf, 8};
      CHECK(nx_ring_put(&tx, rx.pos, h, NX_FRAME_HDR_LEN, &in, 1, 8) == 0, "watched put %d", i);
      CHECK(nx_ring_ready(&ctl), "ready %d", i);
      CHECK(nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == 0, "watched peek %d", i);
      uint64_t tail = atomic_load(&ctl.tail);
      atomic_store(&ctl.tail, rx.pos); /* (as if its store were not seen yet) */
      nx_ring_pop(&rx, adv), sent++;
      CHECK(!nx_ring_ready(&ctl), "head ahead of the tail %d", i);
      atomic_store(&ctl.tail, tail);
      CHECK(!nx_ring_ready(&ctl), "taken %d", i);
    }
    CHECK(tx.pos / CAP > lap, "a watched record started over");
  }
  /* the tail means nothing to the consumer: only records in place do */
  uint64_t pos = rx.pos, off = pos & (CAP - 1);
  atomic_store(&ctl.tail, pos + CAP + 8);
  CHECK(nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == 1, "a tail alone");
  CHECK(off != 0, "(the consumer is past the first byte)");
  /* a mark that it started over with no record at the first byte, or with
   * one that announces another index */
  uint64_t mark = ~pos ^ NX_RING_SKIPPED, stale = ~(pos - 8);
  memcpy(data + off, &mark, 8);
  CHECK(nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == NEXAR_ERR_PROTOCOL, "bare mark");
  memcpy(data, &stale, 8);
  CHECK(nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == NEXAR_ERR_PROTOCOL,
        "mark of another record");
  /* a record announced in place whose lengths are impossible: header
   * lengths that no header has, a payload longer than the ring, a record
   * that would run past what the ring holds */
  uint64_t here = ~pos;
  uint32_t bad[][2] = {{8, 0}, {8, 12}, {8, 72}, {CAP + 1, 64}, {CAP - 64, 64}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memcpy(data + off, &here, 8);
    memcpy(data + ((off + 8) & (CAP - 1)), bad[i], 8);
    CHECK(nx_ring_peek(&rx, got, &hl, v, &nv, &plen, &adv, &ack) == NEXAR_ERR_PROTOCOL,
          "lengths %u/%u", bad[i][0], bad[i][1]);
  }
  /* a producer that sees an impossible head: it reads head again once the
   * head it last saw leaves no room, and must find it then, within one
   * ring's worth of records */
  atomic_store(&ctl.head, tx.pos + 64ull * CAP);
  int prc = 0;
  for (unsigned i = 0; i <= CAP / 8 && prc == 0; i++)
    prc = nx_ring_put(&tx, 0, h, NX_FRAME_HDR_LEN, NULL, 0, 0);
  CHECK(prc == NEXAR_ERR_PROTOCOL, "head ahead of tail (%d)", prc);
  printf("ring_test: ok (%u records)\n", sent);
  return 0;
}
