/* The agreement state machine (proto/agree.h) over a simulated network on one
 * thread: deterministic cases (no failure, dead members and coordinators,
 * crashes at the hook points, partitions, false and asymmetric suspicion)
 * and >= 10,000 seeded random schedules with crashes (also at the hook
 * points), delays, reordering, duplicates and drops per link. Checked:
 * agreement (one committed value per epoch among all members, crashed or
 * not), validity (the dead set holds only crashed, suspected or unresponsive
 * members), integrity (the flag is the AND of exactly the survivors' flags),
 * termination (with a strict majority alive and connected, every live member
 * decides within a bound), and the decoder's rejection of malformed bytes. */
#include "proto/agree.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define MAXN 9
#define T 100 /* the agreement's timeout, in simulated time units */

static uint64_t rng;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static uint32_t rndn(uint32_t n) {
  return (uint32_t)(rnd() % n);
}
static int chance(uint32_t permille) {
  return rndn(1000) < permille;
}

typedef struct ev {
  uint64_t t, seq;
  int kind; /* 0 message, 1 suspicion (from suspects to), 2 crash of to, 3 cut, 4 heal */
  uint32_t from, to;
  uint8_t *buf;
  size_t len;
} ev;

typedef struct sim {
  uint32_t n;
  int quorum;
  nx_agree m[MAXN];
  uint32_t flag[MAXN];
  int crashed[MAXN];
  int ever_susp[MAXN]; /* suspected by some member at some time */
  int decided[MAXN];
  int outcome[MAXN];
  uint32_t dflag[MAXN];
  uint8_t ddead[MAXN][2];
  uint64_t dtime[MAXN];
  /* network */
  uint32_t drop[MAXN][MAXN]; /* permille per link */
  int cut[MAXN][MAXN];
  uint32_t extra[MAXN][MAXN]; /* added delay per link */
  uint32_t dmin, dmax, dup;
  uint32_t late;        /* permille of messages held back up to 20 T more */
  uint32_t slow_commit; /* COMMITs take up to this much longer: decisions race */
  int randomize;        /* 0: FIFO, fixed delay dmin */
  /* crash hooks: member crashes after sending the k-th copy of mtype */
  uint8_t hook_type[MAXN];
  uint32_t hook_k[MAXN];
  ev *q;
  size_t nq, cap;
  uint64_t seq, now;
  uint64_t msgs, garbage;
} sim;

static void heap_push(sim *s, ev e) {
  if (s->nq == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 256;
    s->q = realloc(s->q, s->cap * sizeof *s->q);
    CHECK(s->q, "oom");
  }
  e.seq = s->seq++;
  size_t i = s->nq++;
  while (i) {
    size_t p = (i - 1) / 2;
    ev *pe = &s->q[p];
    if (pe->t < e.t || (pe->t == e.t && pe->seq < e.seq)) break;
    s->q[i] = *pe;
    i = p;
  }
  s->q[i] = e;
}

static ev heap_pop(sim *s) {
  ev top = s->q[0], last = s->q[--s->nq];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= s->nq) break;
    if (c + 1 < s->nq && (s->q[c + 1].t < s->q[c].t ||
                          (s->q[c + 1].t == s->q[c].t && s->q[c + 1].seq < s->q[c].seq)))
      c++;
    if (last.t < s->q[c].t || (last.t == s->q[c].t && last.seq < s->q[c].seq)) break;
    s->q[i] = s->q[c];
    i = c;
  }
  if (s->nq) s->q[i] = last;
  return top;
}

static void net_send(sim *s, uint32_t from, uint32_t to, uint8_t mtype, const uint8_t *buf,
                     size_t len) {
  s->msgs++;
  if (s->cut[from][to]) return;
  int copies = 1;
  if (s->randomize) {
    if (chance(s->drop[from][to])) return;
    if (chance(s->dup)) copies = 2;
  }
  for (int c = 0; c < copies; c++) {
    uint8_t *b = malloc(len);
    CHECK(b, "oom");
    memcpy(b, buf, len);
    uint64_t d = s->randomize ? s->dmin + rndn(s->dmax - s->dmin + 1) : s->dmin;
    d += s->extra[from][to];
    if (s->randomize && chance(s->late)) d += rndn(20 * T);
    if (s->randomize && mtype == NX_AM_COMMIT && s->slow_commit) d += rndn(s->slow_commit);
    heap_push(s, (ev){.t = s->now + d, .kind = 0, .from = from, .to = to, .buf = b, .len = len});
  }
}

static void crash(sim *s, uint32_t i) {
  s->crashed[i] = 1;
}

/* Drains member i's actions: sends (fanned out, counting copies for the hook
 * points) and its decision. */
static void drain(sim *s, uint32_t i) {
  nx_agree_action a;
  uint32_t sent[8] = {0};
  while (nx_agree_pop(&s->m[i], &a)) {
    if (s->crashed[i]) continue;
    if (a.kind == NX_AGREE_DECIDE) {
      const nx_agree_decision *d = nx_agree_result(&s->m[i]);
      CHECK(!s->decided[i], "member %u decided twice", i);
      s->decided[i] = 1;
      s->outcome[i] = d->outcome;
      s->dflag[i] = d->flag;
      memcpy(s->ddead[i], d->dead, s->m[i].nb);
      s->dtime[i] = s->now;
      continue;
    }
    uint32_t off = s->randomize ? rndn(s->n) : 0;
    for (uint32_t k = 0; k < s->n; k++) {
      uint32_t to = (k + off) % s->n;
      if (to == i || (a.to != NX_AGREE_ALL && a.to != to)) continue;
      if (s->crashed[i]) break;
      net_send(s, i, to, a.mtype, a.buf, a.len);
      sent[a.mtype & 7]++;
      if (s->hook_type[i] == a.mtype && sent[a.mtype & 7] == s->hook_k[i]) crash(s, i);
    }
    /* "after sending COLLECT": k = 0 means once the whole broadcast left */
    if (s->hook_type[i] == a.mtype && s->hook_k[i] == 0 && a.to == NX_AGREE_ALL) crash(s, i);
  }
}

static void sim_init(sim *s, uint32_t n, int quorum, uint64_t give_up) {
  memset(s, 0, sizeof *s);
  s->n = n;
  s->quorum = quorum;
  s->dmin = 1;
  uint64_t ids[MAXN];
  for (uint32_t i = 0; i < n; i++)
    ids[i] = 1000 + 7 * i; /* ids in rank order */
  for (uint32_t i = 0; i < n; i++) {
    CHECK(nx_agree_init(&s->m[i], 5, n, ids, i, quorum, T, give_up) == 0, "init");
    s->flag[i] = ~(1u << i);
    memset(s->hook_type, 0, sizeof s->hook_type);
  }
}

static void sim_free(sim *s) {
  for (size_t i = 0; i < s->nq; i++)
    free(s->q[i].buf);
  free(s->q);
  for (uint32_t i = 0; i < s->n; i++)
    nx_agree_free(&s->m[i]);
}

static void suspect_later(sim *s, uint32_t who, uint32_t whom, uint64_t at) {
  heap_push(s, (ev){.t = at, .kind = 1, .from = who, .to = whom});
}

static void crash_later(sim *s, uint32_t who, uint64_t at) {
  heap_push(s, (ev){.t = at, .kind = 2, .to = who});
}

/* Delivers one message, sometimes after a malformed variant of it. */
static void deliver(sim *s, ev *e) {
  nx_agree *a = &s->m[e->to];
  if (s->randomize && chance(20)) {
    size_t cut = e->len ? rndn((uint32_t)e->len) : 0;
    CHECK(nx_agree_on_msg(a, s->now, e->from, e->buf, cut) == NEXAR_ERR_PROTOCOL,
          "a truncated message (%zu of %zu) was not refused", cut, e->len);
    uint8_t bad[NX_AGREE_HDR];
    memcpy(bad, e->buf, NX_AGREE_HDR);
    bad[0] = 9;
    CHECK(nx_agree_on_msg(a, s->now, e->from, bad, sizeof bad) == NEXAR_ERR_PROTOCOL, "version");
    s->garbage++;
  }
  int rc = nx_agree_on_msg(a, s->now, e->from, e->buf, e->len);
  CHECK(rc == 0, "on_msg rc %d", rc);
}

/* Runs until `until` or until nothing is left to happen. */
static void run(sim *s, uint64_t until) {
  for (;;) {
    uint64_t tn = s->nq ? s->q[0].t : UINT64_MAX;
    uint32_t who = UINT32_MAX;
    for (uint32_t i = 0; i < s->n; i++) {
      if (s->crashed[i]) continue;
      uint64_t d = nx_agree_next_deadline(&s->m[i]);
      if (d < tn) tn = d, who = i;
    }
    if (tn == UINT64_MAX || tn > until) break;
    if (tn > s->now) s->now = tn;
    if (who != UINT32_MAX) {
      CHECK(nx_agree_on_timer(&s->m[who], s->now) == 0, "timer");
      drain(s, who);
      continue;
    }
    ev e = heap_pop(s);
    if (e.kind == 2) {
      crash(s, e.to);
    } else if (e.kind == 3 || e.kind == 4) {
      s->cut[e.from][e.to] = e.kind == 3;
    } else if (e.kind == 1) {
      if (!s->crashed[e.from]) {
        s->ever_susp[e.to] = 1;
        CHECK(nx_agree_suspect(&s->m[e.from], s->now, e.to) == 0, "suspect");
        drain(s, e.from);
      }
    } else if (!s->crashed[e.to]) {
      deliver(s, &e);
      drain(s, e.to);
    }
    free(e.buf);
  }
}

static void start_all(sim *s, const uint8_t susp[MAXN][2]) {
  for (uint32_t i = 0; i < s->n; i++) {
    if (s->crashed[i]) continue;
    if (susp)
      for (uint32_t j = 0; j < s->n; j++)
        if (nx_agree_bit(susp[i], j)) s->ever_susp[j] = 1;
    CHECK(nx_agree_start(&s->m[i], s->now, s->flag[i], susp ? susp[i] : NULL) == 0, "start");
    drain(s, i);
  }
}

/* Agreement, validity, integrity over every member that committed. Returns
 * the index of one committed member, or -1. */
static int check_safety(sim *s, uint64_t seed) {
  int ref = -1;
  for (uint32_t i = 0; i < s->n; i++) {
    /* the state machine's own record: members that crashed after deciding count */
    const nx_agree_decision *d = nx_agree_result(&s->m[i]);
    if (d->outcome != NX_AGREE_COMMITTED && d->outcome != NX_AGREE_EVICTED) continue;
    s->outcome[i] = d->outcome;
    s->dflag[i] = d->flag;
    memcpy(s->ddead[i], d->dead, s->m[i].nb);
    /* SURVIVORS promises no agreement (split brain): each member's own
     * value is checked for validity and integrity only */
    if (ref < 0 || s->quorum == NX_AGREE_SURVIVORS) {
      ref = (int)i;
      uint32_t and = UINT32_MAX;
      for (uint32_t j = 0; j < s->n; j++) {
        int dead = nx_agree_bit(s->ddead[i], j);
        if (!dead) {
          and &= s->flag[j];
          continue;
        }
        int timed_out = 0;
        for (uint32_t k = 0; k < s->n; k++)
          timed_out |= nx_agree_bit(s->m[k].timed_out, j);
        CHECK(s->crashed[j] || s->ever_susp[j] || timed_out,
              "seed %llu: member %u is in the dead set but was never crashed, suspected "
              "or unresponsive",
              (unsigned long long)seed, j);
      }
      CHECK(s->dflag[i] == and, "seed %llu: flag %08x is not the survivors' AND %08x",
            (unsigned long long)seed, s->dflag[i], and);
    }
    CHECK(s->dflag[i] == s->dflag[ref] && memcmp(s->ddead[i], s->ddead[ref], 2) == 0,
          "seed %llu: members %d and %u committed different views (dead %02x%02x vs %02x%02x)",
          (unsigned long long)seed, ref, i, s->ddead[ref][1], s->ddead[ref][0], s->ddead[i][1],
          s->ddead[i][0]);
    CHECK(s->outcome[i] == (nx_agree_bit(s->ddead[i], i) ? NX_AGREE_EVICTED : NX_AGREE_COMMITTED),
          "outcome");
  }
  return ref;
}

/* ---------------------------------------------------------- deterministic */

static uint8_t dead_bits(const sim *s, int i) {
  return s->ddead[i][0];
}

static void test_no_failure(void) {
  for (uint32_t n = 1; n <= MAXN; n++) {
    sim s;
    sim_init(&s, n, NX_AGREE_MAJORITY, 50 * T);
    start_all(&s, NULL);
    run(&s, 100 * T);
    check_safety(&s, 0);
    uint32_t and = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++)
      and &= s.flag[i];
    for (uint32_t i = 0; i < n; i++) {
      CHECK(s.decided[i] && s.outcome[i] == NX_AGREE_COMMITTED, "n=%u member %u", n, i);
      CHECK(s.ddead[i][0] == 0 && s.ddead[i][1] == 0 && s.dflag[i] == and, "value");
      CHECK(s.dtime[i] <= 5, "n=%u: one round (decided at %llu)", n,
            (unsigned long long)s.dtime[i]);
    }
    CHECK(s.m[0].rounds == 1 && (n == 1 || s.m[1].rounds == 0), "one ballot");
    sim_free(&s);
  }
}

/* Member `dead` crashed before start; the others suspect it at `susp_at`
 * (0: at start). Everyone else commits {dead}. */
static void test_dead_before(uint32_t n, uint32_t dead, uint64_t susp_at) {
  sim s;
  sim_init(&s, n, NX_AGREE_MAJORITY, 50 * T);
  crash(&s, dead);
  uint8_t susp[MAXN][2] = {{0}};
  for (uint32_t i = 0; i < n; i++)
    if (susp_at == 0)
      susp[i][dead / 8] |= (uint8_t)(1u << (dead % 8));
    else
      suspect_later(&s, i, dead, susp_at);
  s.ever_susp[dead] = 1;
  start_all(&s, susp);
  run(&s, 100 * T);
  check_safety(&s, 0);
  for (uint32_t i = 0; i < n; i++) {
    if (i == dead) continue;
    CHECK(s.decided[i] && s.outcome[i] == NX_AGREE_COMMITTED, "n=%u dead=%u: member %u", n, dead,
          i);
    CHECK(dead_bits(&s, (int)i) == (1u << dead), "dead set %02x", dead_bits(&s, (int)i));
  }
  sim_free(&s);
}

/* The coordinator (member 0) crashes after sending COLLECT (k = 0), or after
 * ACCEPT / COMMIT to k members; the others suspect it a little later. */
static void test_coord_crash(uint8_t mtype, uint32_t k, int expect_committed_by_0) {
  const uint32_t n = 5;
  sim s;
  sim_init(&s, n, NX_AGREE_MAJORITY, 50 * T);
  s.dmin = 3;
  s.hook_type[0] = mtype;
  s.hook_k[0] = k;
  for (uint32_t i = 1; i < n; i++)
    suspect_later(&s, i, 0, 2 * T);
  start_all(&s, NULL);
  run(&s, 100 * T);
  CHECK(s.crashed[0], "the hook fired");
  int ref = check_safety(&s, 0);
  CHECK(ref >= 0, "someone committed");
  for (uint32_t i = 1; i < n; i++)
    CHECK(s.decided[i] && s.outcome[i] == NX_AGREE_COMMITTED, "member %u decided", i);
  if (expect_committed_by_0)
    CHECK(dead_bits(&s, 1) == 0, "converged on the value the coordinator committed");
  else
    CHECK(dead_bits(&s, 1) == 1, "the coordinator is dead (%02x)", dead_bits(&s, 1));
  sim_free(&s);
}

static void test_partition(int quorum) {
  const uint32_t n = 4;
  sim s;
  sim_init(&s, n, quorum, 30 * T);
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < n; j++)
      s.cut[i][j] = (i < 2) != (j < 2);
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < n; j++)
      if ((i < 2) != (j < 2)) suspect_later(&s, i, j, T / 2);
  start_all(&s, NULL);
  run(&s, 100 * T);
  for (uint32_t i = 0; i < n; i++) {
    CHECK(s.decided[i], "member %u decided", i);
    if (quorum == NX_AGREE_MAJORITY) {
      CHECK(s.outcome[i] == NX_AGREE_ABORTED, "majority: member %u aborted", i);
      CHECK(strcmp(s.m[i].dec.reason, "no majority: 2 of 4 reachable") == 0, "reason '%s'",
            s.m[i].dec.reason);
    } else {
      CHECK(s.outcome[i] == NX_AGREE_COMMITTED, "survivors: member %u committed", i);
      CHECK(dead_bits(&s, (int)i) == (i < 2 ? 0xc : 0x3), "its side");
    }
  }
  sim_free(&s);
}

/* Member 1 suspects member 2 only (2 hears everyone): the views agree and
 * exactly 2 is evicted; it learns so. */
static void test_asymmetric(void) {
  const uint32_t n = 5;
  for (int both = 0; both < 2; both++) {
    sim s;
    sim_init(&s, n, NX_AGREE_MAJORITY, 50 * T);
    uint8_t susp[MAXN][2] = {{0}};
    susp[1][0] = 1u << 2;
    if (both) susp[2][0] = 1u << 1; /* a symmetric cut: 2 suspects 1 as well */
    start_all(&s, susp);
    run(&s, 100 * T);
    check_safety(&s, 0);
    for (uint32_t i = 0; i < n; i++) {
      CHECK(s.decided[i], "member %u decided", i);
      CHECK(dead_bits(&s, (int)i) == 1u << 2, "dead %02x", dead_bits(&s, (int)i));
    }
    CHECK(s.outcome[2] == NX_AGREE_EVICTED, "2 learns it is evicted");
    CHECK(strstr(s.m[2].dec.reason, "declared failed"), "reason '%s'", s.m[2].dec.reason);
    sim_free(&s);
  }
}

/* The coordinator falsely suspects live member 3 (started later, so it does
 * not answer the collect in time): it is evicted and learns it. */
static void test_false_suspicion(void) {
  const uint32_t n = 4;
  sim s;
  sim_init(&s, n, NX_AGREE_MAJORITY, 50 * T);
  uint8_t susp[MAXN][2] = {{0}};
  susp[0][0] = 1u << 3;
  start_all(&s, susp);
  run(&s, 100 * T);
  check_safety(&s, 0);
  for (uint32_t i = 0; i < n; i++)
    CHECK(s.decided[i] && dead_bits(&s, (int)i) == 1u << 3, "member %u", i);
  CHECK(s.outcome[3] == NX_AGREE_EVICTED && s.outcome[0] == NX_AGREE_COMMITTED, "3 evicted");
  sim_free(&s);
}

/* The classic Paxos race, n = 3, members 0 1 2. 0 coordinates ballot 1; its
 * messages to 2 take 60 more, 1's answers to 0 are cut (and 0's messages to
 * 1 after the collect), so 0 proposes V1 = {1} and only it accepts it. At 112
 * member 1 suspects 0, runs ballot 2 with 2, decides V2 = {0} and crashes
 * before its COMMIT reaches anyone. 0's stale ACCEPT(1, {1}) reaches 2 after
 * 2 promised ballot 2: it must be refused (else 0 decides {1}), and 0's next
 * ballot must adopt the accepted value of the highest ballot, V2 (its own V1
 * is lower; a fresh value would be {1}). */
static void test_classic_race(void) {
  sim s;
  sim_init(&s, 3, NX_AGREE_MAJORITY, 50 * T);
  s.extra[0][2] = 60;
  s.cut[1][0] = 1;
  heap_push(&s, (ev){.t = 3, .kind = 3, .from = 0, .to = 1});
  suspect_later(&s, 1, 0, 112);
  s.hook_type[1] = NX_AM_COMMIT; /* crash after the copy to 0, which is cut */
  s.hook_k[1] = 1;
  start_all(&s, NULL);
  run(&s, 100 * T);
  CHECK(s.crashed[1] && s.m[1].dec.outcome == NX_AGREE_COMMITTED, "1 decided, then crashed");
  CHECK(s.m[1].dec.dead[0] == 1, "1 decided {0}");
  check_safety(&s, 0);
  CHECK(s.decided[0] && s.decided[2], "0 and 2 decided");
  CHECK(dead_bits(&s, 0) == 1 && dead_bits(&s, 2) == 1 && s.outcome[0] == NX_AGREE_EVICTED,
        "0 and 2 converged on V2");
  sim_free(&s);
}

static void test_wire(void) {
  uint8_t dead[2] = {0x05, 0x01}, susp[2] = {0x02, 0};
  nx_agree_msg m = {.type = NX_AM_PROMISE,
                    .epoch = 77,
                    .n = 9,
                    .b = {3, 4},
                    .flag = 0xabcd,
                    .bits = susp,
                    .has_acc = 1,
                    .acc_b = {2, 1},
                    .acc_flag = 7,
                    .acc_dead = dead};
  uint8_t buf[64];
  size_t len = nx_agree_encode(&m, buf, sizeof buf);
  CHECK(len == nx_agree_msg_size(NX_AM_PROMISE, 1, 9) && len == 24 + 4 + 2 + 1 + 12 + 2, "len");
  nx_agree_msg d;
  CHECK(nx_agree_decode(buf, len, &d) == 0, "decode");
  CHECK(d.epoch == 77 && d.n == 9 && d.b.round == 3 && d.b.coord == 4 && d.flag == 0xabcd &&
            d.has_acc && d.acc_b.round == 2 && d.acc_flag == 7 && d.acc_dead[0] == 5 &&
            d.acc_dead[1] == 1 && d.bits[0] == 2,
        "round trip");
  for (size_t l = 0; l < len; l++)
    CHECK(nx_agree_decode(buf, l, &d) == NEXAR_ERR_PROTOCOL, "truncated at %zu", l);
  uint8_t big[80];
  memcpy(big, buf, len);
  CHECK(nx_agree_decode(big, len + 1, &d) == NEXAR_ERR_PROTOCOL, "trailing byte");
  buf[len - 1] = 0x02; /* a bit past n = 9 */
  CHECK(nx_agree_decode(buf, len, &d) == NEXAR_ERR_PROTOCOL, "stray bit");
  buf[len - 1] = 1;
  buf[20] = 9; /* coordinator index == n */
  CHECK(nx_agree_decode(buf, len, &d) == NEXAR_ERR_PROTOCOL, "coordinator out of range");
  buf[20] = 4;
  buf[30] = 2; /* has_accepted not 0 / 1 */
  CHECK(nx_agree_decode(buf, len, &d) == NEXAR_ERR_PROTOCOL, "has_accepted byte");
  buf[30] = 1;
  buf[12] = 0; /* n = 0 */
  CHECK(nx_agree_decode(buf, len, &d) == NEXAR_ERR_PROTOCOL, "n = 0");
  /* another epoch is ignored, another n refused */
  uint64_t ids[3] = {1, 2, 3};
  nx_agree a;
  CHECK(nx_agree_init(&a, 5, 3, ids, 1, NX_AGREE_MAJORITY, T, 10 * T) == 0, "init");
  nx_agree_msg c = {.type = NX_AM_COLLECT, .epoch = 4, .n = 3, .b = {1, 0}};
  len = nx_agree_encode(&c, buf, sizeof buf);
  nx_agree_action act;
  CHECK(nx_agree_on_msg(&a, 0, 0, buf, len) == 0 && !nx_agree_pop(&a, &act), "other epoch");
  c.epoch = 5;
  c.n = 4;
  len = nx_agree_encode(&c, buf, sizeof buf);
  CHECK(nx_agree_on_msg(&a, 0, 0, buf, len) == NEXAR_ERR_PROTOCOL, "other n");
  c.n = 3;
  len = nx_agree_encode(&c, buf, sizeof buf);
  CHECK(nx_agree_on_msg(&a, 0, 2, buf, len) == NEXAR_ERR_PROTOCOL, "COLLECT not from its coord");
  CHECK(nx_agree_on_msg(&a, 0, 3, buf, len) == NEXAR_ERR_INVALID_ARGUMENT, "from out of range");
  nx_agree_free(&a);
}

/* ------------------------------------------------------------- randomized */

static uint64_t max_decide, aborts_majority, evictions, commits_total, hook_crashes;

static void random_schedule(uint64_t seed, int quorum) {
  rng = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < 4; i++)
    rnd();
  uint32_t n = 3 + rndn(MAXN - 2);
  const uint64_t give_up = 150 * T, bound = 100 * T;
  sim s;
  sim_init(&s, n, quorum, give_up);
  s.randomize = 1;
  s.dmin = 1;
  /* hostile: delays beyond the timeout, heavy loss, temporary cuts, false
   * suspicions of anyone (the coordinator included): safety only */
  int hostile = rndn(3) == 0;
  s.dmax = 1 + rndn(hostile ? 2 * T : T / 3);
  s.dup = rndn(100);
  uint32_t pdrop = rndn(4) == 0 ? 0 : rndn(hostile ? 500 : 150);
  for (uint32_t i = 0; i < n; i++) {
    s.flag[i] = (uint32_t)rnd() | (uint32_t)rnd();
    for (uint32_t j = 0; j < n; j++)
      s.drop[i][j] = chance(300) ? rndn(pdrop + 1) : 0;
  }
  /* crashes: usually a minority, sometimes a majority (safety only) */
  int majority_case = !hostile && rndn(5) != 0;
  uint32_t maxc = majority_case ? (n - 1) / 2 : n;
  uint32_t ncrash = rndn(maxc + 1);
  uint32_t nfalse = 0;
  if (majority_case && ncrash < (n - 1) / 2 && chance(300)) nfalse = 1;
  int victim[MAXN] = {0};
  for (uint32_t c = 0; c < ncrash + nfalse; c++) {
    uint32_t v;
    do
      v = rndn(n);
    while (victim[v]);
    victim[v] = c < ncrash ? 1 : 2;
  }
  for (uint32_t v = 0; v < n; v++) {
    if (victim[v] == 1) {
      uint32_t how = rndn(4);
      uint64_t at = 0;
      if (hostile) how = 1 + rndn(3);
      if (how == 0) {
        crash(&s, v); /* before start */
      } else if (how == 1) {
        at = rndn((hostile ? 20 : 8) * T);
        crash_later(&s, v, at);
      } else {
        static const uint8_t types[] = {NX_AM_COLLECT, NX_AM_ACCEPT, NX_AM_COMMIT, NX_AM_PROMISE};
        s.hook_type[v] = types[rndn(4)];
        s.hook_k[v] = s.hook_type[v] == NX_AM_COLLECT ? 0 : rndn(n);
        hook_crashes++;
      }
      /* every live member's detector notices within 5 T (after the crash if
       * it has a time, else at some point) */
      for (uint32_t i = 0; i < n; i++)
        if (i != v) suspect_later(&s, i, v, at + 1 + rndn(5 * T));
    } else if (victim[v] == 2) {
      uint32_t who;
      do
        who = rndn(n);
      while (who == v || victim[who]);
      suspect_later(&s, who, v, rndn(3 * T));
    }
  }
  if (hostile) {
    uint32_t nf = rndn(2 * n);
    for (uint32_t f = 0; f < nf; f++) {
      uint32_t who = rndn(n), whom = rndn(n);
      if (who != whom) suspect_later(&s, who, whom, rndn(10 * T));
    }
    s.late = rndn(30);
    if (chance(500)) {
      /* coordinator churn: the lowest members get suspected by some of the
       * others at staggered times, so several coordinators run at once */
      uint32_t k = 1 + rndn(n / 2 + 1);
      for (uint32_t c = 0; c < k && c < n; c++)
        for (uint32_t i = 0; i < n; i++)
          if (i != c && chance(600)) suspect_later(&s, i, c, rndn(3 * T) + c * rndn(2 * T));
      s.late = 50 + rndn(150);
    }
    if (chance(500)) s.slow_commit = rndn(20 * T);
    if (chance(500)) {
      /* a partition into two random sides for a while; each side's detector
       * suspects the other side */
      uint64_t t1 = rndn(10 * T), t2 = t1 + 1 + rndn(30 * T);
      int side[MAXN];
      for (uint32_t i = 0; i < n; i++)
        side[i] = (int)rndn(2);
      for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++)
          if (side[i] != side[j]) {
            heap_push(&s, (ev){.t = t1, .kind = 3, .from = i, .to = j});
            heap_push(&s, (ev){.t = t2, .kind = 4, .from = i, .to = j});
            if (chance(700)) suspect_later(&s, i, j, t1 + rndn(2 * T));
          }
    }
    uint32_t ncut = rndn(4);
    for (uint32_t c = 0; c < ncut; c++) {
      uint64_t t1 = rndn(10 * T), t2 = t1 + 1 + rndn(10 * T);
      for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = 0; j < n; j++)
          if (i != j && chance(300)) {
            heap_push(&s, (ev){.t = t1, .kind = 3, .from = i, .to = j});
            heap_push(&s, (ev){.t = t2, .kind = 4, .from = i, .to = j});
          }
    }
  }
  /* starts are staggered a little */
  uint64_t order[MAXN];
  for (uint32_t i = 0; i < n; i++)
    order[i] = rndn(T / 4);
  for (uint64_t t = 0; t <= T / 4; t++)
    for (uint32_t i = 0; i < n; i++)
      if (order[i] == t && !s.crashed[i]) {
        run(&s, t);
        s.now = t;
        CHECK(nx_agree_start(&s.m[i], t, s.flag[i], NULL) == 0, "start");
        drain(&s, i);
      }
  run(&s, bound);
  check_safety(&s, seed);
  if (majority_case) {
    for (uint32_t i = 0; i < n; i++) {
      if (s.crashed[i]) continue;
      CHECK(s.decided[i], "seed %llu (n=%u, %u crashes): live member %u undecided at %llu",
            (unsigned long long)seed, n, ncrash, i, (unsigned long long)bound);
      if (s.outcome[i] == NX_AGREE_ABORTED) aborts_majority++;
      CHECK(quorum == NX_AGREE_SURVIVORS || s.outcome[i] != NX_AGREE_ABORTED,
            "seed %llu: member %u aborted although a majority stayed alive",
            (unsigned long long)seed, i);
      if (s.dtime[i] > max_decide) max_decide = s.dtime[i];
    }
  }
  run(&s, give_up + 20 * T);
  check_safety(&s, seed);
  for (uint32_t i = 0; i < n; i++) {
    CHECK(s.crashed[i] || s.decided[i], "seed %llu: live member %u never decided",
          (unsigned long long)seed, i);
    if (s.decided[i] && s.outcome[i] == NX_AGREE_EVICTED) evictions++;
    if (s.decided[i] && s.outcome[i] != NX_AGREE_ABORTED) commits_total++;
  }
  sim_free(&s);
}

/* Arguments: [schedules [first seed]]; AGREE_RANDOM_ONLY=1 skips the
 * deterministic cases (to see what the simulator alone catches). */
int main(int argc, char **argv) {
  if (getenv("AGREE_RANDOM_ONLY")) goto random;
  test_wire();
  test_no_failure();
  for (uint32_t n = 3; n <= 6; n++)
    for (uint32_t d = 0; d < n; d++) {
      test_dead_before(n, d, 0);
      test_dead_before(n, d, T / 2);
    }
  test_coord_crash(NX_AM_COLLECT, 0, 0);
  for (uint32_t k = 1; k <= 4; k++) {
    test_coord_crash(NX_AM_ACCEPT, k, 1);
    test_coord_crash(NX_AM_COMMIT, k, 1);
  }
  test_partition(NX_AGREE_MAJORITY);
  test_partition(NX_AGREE_SURVIVORS);
  test_asymmetric();
  test_classic_race();
  test_false_suspicion();
random:;
  uint64_t nsched = argc > 1 ? strtoull(argv[1], NULL, 10) : 12000;
  clock_t t0 = clock();
  uint64_t first = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
  for (uint64_t seed = first; seed < first + nsched; seed++)
    random_schedule(seed, NX_AGREE_MAJORITY);
  uint64_t nsurv = nsched / 6;
  for (uint64_t seed = first; seed < first + nsurv; seed++)
    random_schedule(seed + 1000000, NX_AGREE_SURVIVORS);
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  printf("agree: %llu majority + %llu survivors schedules in %.2f s; %llu hook crashes, %llu "
         "commits, %llu evictions, "
         "%llu aborts with a majority alive; latest decision %llu T\n",
         (unsigned long long)nsched, (unsigned long long)nsurv, secs,
         (unsigned long long)hook_crashes, (unsigned long long)commits_total,
         (unsigned long long)evictions, (unsigned long long)aborts_majority,
         (unsigned long long)(max_decide / T));
  return 0;
}
