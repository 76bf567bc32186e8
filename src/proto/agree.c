/* The agreement state machine (see agree.h for the protocol). */
#include "proto/agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bset(uint8_t *b, uint32_t i) {
  b[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static uint32_t bcount(const uint8_t *b, uint32_t n) {
  uint32_t c = 0;
  for (uint32_t i = 0; i < n; i++)
    c += (uint32_t)nx_agree_bit(b, i);
  return c;
}

static int bcmp_(nx_ballot x, nx_ballot y) {
  if (x.round != y.round) return x.round < y.round ? -1 : 1;
  if (x.coord != y.coord) return x.coord < y.coord ? -1 : 1;
  return 0;
}

int nx_agree_init(nx_agree *a, uint64_t epoch, uint32_t n, const uint64_t *ids, uint32_t me,
                  int quorum, uint64_t timeout, uint64_t give_up) {
  memset(a, 0, sizeof *a);
  if (n == 0 || n > NX_AGREE_MAX_N || me >= n || !ids || timeout == 0 || give_up < timeout ||
      (quorum != NX_AGREE_MAJORITY && quorum != NX_AGREE_SURVIVORS))
    return NEXAR_ERR_INVALID_ARGUMENT;
  a->epoch = epoch;
  a->n = n;
  a->me = me;
  a->nb = (n + 7) / 8;
  a->quorum = quorum;
  a->timeout = timeout;
  a->give_up = give_up;
  a->ids = malloc((size_t)n * sizeof *a->ids);
  a->flags = calloc(n, sizeof *a->flags);
  a->rep_susp = calloc(n, a->nb);
  uint8_t **sets[] = {&a->susp,      &a->timed_out, &a->acc_dead, &a->answered,
                      &a->best_dead, &a->prop_dead, &a->dec.dead};
  int bad = !a->ids || !a->flags || !a->rep_susp;
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
    *sets[i] = calloc(a->nb, 1);
    bad |= !*sets[i];
  }
  if (bad) {
    nx_agree_free(a);
    return NEXAR_ERR_NOMEM;
  }
  memcpy(a->ids, ids, (size_t)n * sizeof *ids);
  return 0;
}

void nx_agree_free(nx_agree *a) {
  for (size_t i = a->qhead; i < a->qn; i++)
    free(a->qbuf[i]);
  free(a->q);
  free(a->qbuf);
  free(a->popped);
  free(a->ids);
  free(a->flags);
  free(a->susp);
  free(a->timed_out);
  free(a->acc_dead);
  free(a->answered);
  free(a->rep_susp);
  free(a->best_dead);
  free(a->prop_dead);
  free(a->dec.dead);
  memset(a, 0, sizeof *a);
}

static int push(nx_agree *a, int kind, uint32_t to, uint8_t mtype, uint8_t *buf, size_t len) {
  if (a->qn == a->qcap) {
    size_t nc = a->qcap ? a->qcap * 2 : 16;
    nx_agree_action *q = realloc(a->q, nc * sizeof *q);
    if (q) a->q = q;
    uint8_t **qb = q ? realloc(a->qbuf, nc * sizeof *qb) : NULL;
    if (!qb) {
      free(buf);
      a->nomem = 1;
      return NEXAR_ERR_NOMEM;
    }
    a->qbuf = qb;
    a->qcap = nc;
  }
  a->q[a->qn] = (nx_agree_action){.kind = kind, .to = to, .mtype = mtype, .buf = buf, .len = len};
  a->qbuf[a->qn] = buf;
  a->qn++;
  return 0;
}

int nx_agree_pop(nx_agree *a, nx_agree_action *out) {
  free(a->popped);
  a->popped = NULL;
  if (a->qhead == a->qn) {
    a->qhead = a->qn = 0;
    return 0;
  }
  *out = a->q[a->qhead];
  a->popped = a->qbuf[a->qhead];
  a->qhead++;
  return 1;
}

const nx_agree_decision *nx_agree_result(const nx_agree *a) {
  return &a->dec;
}

/* Encodes a message of type t with ballot b and queues it to `to`. */
static int sendm(nx_agree *a, uint32_t to, uint8_t t, nx_ballot b, uint32_t flag,
                 const uint8_t *bits, int with_acc) {
  nx_agree_msg m = {.type = t, .epoch = a->epoch, .n = a->n, .b = b, .flag = flag, .bits = bits};
  if (with_acc && a->has_acc) {
    m.has_acc = 1;
    m.acc_b = a->acc_b;
    m.acc_flag = a->acc_flag;
    m.acc_dead = a->acc_dead;
  }
  size_t len = nx_agree_msg_size(t, m.has_acc, a->n);
  uint8_t *buf = malloc(len);
  if (!buf) {
    a->nomem = 1;
    return NEXAR_ERR_NOMEM;
  }
  if (nx_agree_encode(&m, buf, len) != len) {
    free(buf);
    return NEXAR_ERR_INVALID_ARGUMENT;
  }
  return push(a, NX_AGREE_SEND, to, t, buf, len);
}

static nx_ballot any_ballot(const nx_agree *a) {
  if (a->promised.round) return a->promised;
  return (nx_ballot){1, a->me};
}

static int send_commit(nx_agree *a, uint32_t to) {
  return sendm(a, to, NX_AM_COMMIT, any_ballot(a), a->dec.flag, a->dec.dead, 0);
}

/* Learns the decided value: reports it and floods COMMIT to every member. */
static int decide(nx_agree *a, uint32_t flag, const uint8_t *dead) {
  if (a->dec.outcome != NX_AGREE_PENDING) return 0;
  memcpy(a->dec.dead, dead, a->nb);
  a->dec.flag = flag;
  a->dec.new_epoch = a->epoch + 1;
  a->dec.ndead = bcount(dead, a->n);
  a->role = 0;
  if (nx_agree_bit(dead, a->me)) {
    a->dec.outcome = NX_AGREE_EVICTED;
    snprintf(a->dec.reason, sizeof a->dec.reason,
             "this member (id %llu) was declared failed by the agreement at epoch %llu",
             (unsigned long long)a->ids[a->me], (unsigned long long)a->epoch);
  } else {
    a->dec.outcome = NX_AGREE_COMMITTED;
  }
  int rc = a->n > 1 ? send_commit(a, NX_AGREE_ALL) : 0;
  int rc2 = push(a, NX_AGREE_DECIDE, a->me, 0, NULL, 0);
  return rc ? rc : rc2;
}

static int give_up(nx_agree *a) {
  /* a collect cut short by give_up still counts who answered it */
  if (a->role == 1 && a->nanswered > a->reachable) a->reachable = a->nanswered;
  uint32_t k = a->n - bcount(a->susp, a->n);
  if (a->rounds && a->reachable < k) k = a->reachable;
  a->dec.outcome = NX_AGREE_ABORTED;
  a->role = 0;
  if (a->quorum == NX_AGREE_MAJORITY)
    snprintf(a->dec.reason, sizeof a->dec.reason, "no majority: %u of %u reachable", k, a->n);
  else
    snprintf(a->dec.reason, sizeof a->dec.reason, "no agreement in time: %u of %u reachable", k,
             a->n);
  return push(a, NX_AGREE_DECIDE, a->me, 0, NULL, 0);
}

/* My index among the members I do not suspect, by id (0: I coordinate). */
static uint32_t position(const nx_agree *a) {
  uint32_t pos = 0;
  for (uint32_t i = 0; i < a->n; i++)
    if (i != a->me && !nx_agree_bit(a->susp, i) && a->ids[i] < a->ids[a->me]) pos++;
  return pos;
}

static void fail_round(nx_agree *a, uint64_t now) {
  uint32_t pos = position(a);
  if (pos > 8) pos = 8;
  a->role = 3;
  uint64_t half = a->timeout / 2 ? a->timeout / 2 : 1;
  a->retry_at = now + half * (1 + pos);
}

static uint64_t retx_step(const nx_agree *a) {
  return a->timeout / 4 ? a->timeout / 4 : 1;
}

static int choose(nx_agree *a, uint64_t now);
static int accept_check(nx_agree *a);

/* Ends the collect early once every member I do not suspect answered. */
static int collect_check(nx_agree *a, uint64_t now) {
  for (uint32_t i = 0; i < a->n; i++)
    if (!nx_agree_bit(a->answered, i) && !nx_agree_bit(a->susp, i)) return 0;
  return choose(a, now);
}

static int start_ballot(nx_agree *a, uint64_t now) {
  uint32_t r = a->max_round > a->promised.round ? a->max_round : a->promised.round;
  if (r >= NX_AGREE_MAX_ROUND) { /* rounds exhausted: only giving up is left */
    fail_round(a, now);
    return 0;
  }
  a->cur = (nx_ballot){r + 1, a->me};
  a->max_round = r + 1;
  a->rounds++;
  a->role = 1;
  memset(a->answered, 0, a->nb);
  a->promised = a->cur;
  bset(a->answered, a->me);
  a->nanswered = 1;
  a->flags[a->me] = a->my_flag;
  a->best_has = a->has_acc;
  if (a->has_acc) {
    a->best_b = a->acc_b;
    a->best_flag = a->acc_flag;
    memcpy(a->best_dead, a->acc_dead, a->nb);
  }
  a->phase_end = now + a->timeout;
  a->retx_at = now + retx_step(a);
  int rc = a->n > 1 ? sendm(a, NX_AGREE_ALL, NX_AM_COLLECT, a->cur, 0, NULL, 0) : 0;
  if (rc) return rc;
  return collect_check(a, now);
}

static int choose(nx_agree *a, uint64_t now) {
  uint32_t n = a->n;
  if (a->nanswered > a->reachable) a->reachable = a->nanswered;
  for (uint32_t i = 0; i < n; i++)
    if (!nx_agree_bit(a->answered, i)) bset(a->timed_out, i);
  if (a->quorum == NX_AGREE_MAJORITY && a->nanswered * 2 <= n) {
    fail_round(a, now);
    return 0;
  }
  int adopt = a->best_has;
  if (adopt && a->quorum == NX_AGREE_SURVIVORS) {
    for (uint32_t i = 0; i < n; i++)
      if (!nx_agree_bit(a->best_dead, i) && !nx_agree_bit(a->answered, i)) adopt = 0;
  }
  if (adopt) {
    memcpy(a->prop_dead, a->best_dead, a->nb);
    a->prop_flag = a->best_flag;
  } else {
    /* D = my suspicions | non-responders | (SURVIVORS) an adopted D, then
     * the suspicions of each responder not already in D, in index order
     * (so of two members suspecting each other only the higher goes). */
    uint8_t *d = a->prop_dead;
    for (uint32_t j = 0; j < a->nb; j++)
      d[j] = (uint8_t)(a->susp[j] | (uint8_t)~a->answered[j]);
    if (n % 8) d[a->nb - 1] &= (uint8_t)((1u << (n % 8)) - 1);
    if (a->best_has)
      for (uint32_t j = 0; j < a->nb; j++)
        d[j] |= a->best_dead[j];
    for (uint32_t i = 0; i < n; i++) {
      if (i == a->me || !nx_agree_bit(a->answered, i) || nx_agree_bit(d, i)) continue;
      const uint8_t *r = a->rep_susp + (size_t)i * a->nb;
      for (uint32_t j = 0; j < a->nb; j++)
        d[j] |= r[j];
    }
    a->prop_flag = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++)
      if (!nx_agree_bit(d, i)) a->prop_flag &= a->flags[i];
  }
  uint32_t alive = n - bcount(a->prop_dead, n);
  if ((a->quorum == NX_AGREE_MAJORITY && alive * 2 <= n) || alive == 0) {
    fail_round(a, now);
    return 0;
  }
  if (bcmp_(a->promised, a->cur) > 0) {
    fail_round(a, now);
    return 0;
  }
  a->role = 2;
  memset(a->answered, 0, a->nb);
  a->has_acc = 1;
  a->acc_b = a->cur;
  a->acc_flag = a->prop_flag;
  memcpy(a->acc_dead, a->prop_dead, a->nb);
  bset(a->answered, a->me);
  a->nanswered = 1;
  a->phase_end = now + a->timeout;
  a->retx_at = now + retx_step(a);
  int rc = n > 1 ? sendm(a, NX_AGREE_ALL, NX_AM_ACCEPT, a->cur, a->prop_flag, a->prop_dead, 0) : 0;
  if (rc) return rc;
  return accept_check(a);
}

static int accept_check(nx_agree *a) {
  if (a->quorum == NX_AGREE_MAJORITY) {
    if (a->nanswered * 2 <= a->n) return 0;
  } else {
    for (uint32_t i = 0; i < a->n; i++)
      if (!nx_agree_bit(a->prop_dead, i) && !nx_agree_bit(a->answered, i)) return 0;
  }
  return decide(a, a->prop_flag, a->prop_dead);
}

int nx_agree_start(nx_agree *a, uint64_t now, uint32_t my_flag, const uint8_t *suspected) {
  if (a->started) return NEXAR_ERR_INVALID_ARGUMENT;
  a->started = 1;
  a->my_flag = my_flag;
  if (suspected)
    for (uint32_t j = 0; j < a->nb; j++)
      a->susp[j] |= suspected[j];
  if (a->n % 8) a->susp[a->nb - 1] &= (uint8_t)((1u << (a->n % 8)) - 1);
  a->give_up_at = now + a->give_up;
  a->stall_at = now + 3 * a->timeout;
  if (a->dec.outcome != NX_AGREE_PENDING) return 0;
  if (a->pend_collect && bcmp_(a->promised, a->pend_b) == 0) {
    int rc = sendm(a, a->pend_b.coord, NX_AM_PROMISE, a->pend_b, a->my_flag, a->susp, 1);
    if (rc) return rc;
  }
  a->pend_collect = 0;
  if (position(a) == 0 && !nx_agree_bit(a->susp, a->me)) return start_ballot(a, now);
  return 0;
}

int nx_agree_suspect(nx_agree *a, uint64_t now, uint32_t member) {
  if (member >= a->n) return NEXAR_ERR_INVALID_ARGUMENT;
  if (nx_agree_bit(a->susp, member)) return 0;
  bset(a->susp, member);
  if (!a->started || a->dec.outcome != NX_AGREE_PENDING) return 0;
  if (a->role == 0 && position(a) == 0) return start_ballot(a, now);
  if (a->role == 1) return collect_check(a, now);
  return 0;
}

/* A message from the coordinator of ballot b: postpones my takeover, and a
 * coordinator of lower id than mine makes me stand down. */
static void heard_coordinator(nx_agree *a, uint64_t now, uint32_t from) {
  if (a->started) a->stall_at = now + 3 * a->timeout;
  if (from != a->me && a->role != 0 && a->ids[from] < a->ids[a->me]) a->role = 0;
}

static int on_collect(nx_agree *a, uint64_t now, uint32_t from, const nx_agree_msg *m) {
  heard_coordinator(a, now, from);
  if (m->b.round > a->max_round) a->max_round = m->b.round;
  if (bcmp_(m->b, a->promised) < 0) return sendm(a, from, NX_AM_NACK, a->promised, 0, NULL, 0);
  a->promised = m->b;
  if (!a->started) {
    a->pend_collect = 1;
    a->pend_b = m->b;
    return 0;
  }
  return sendm(a, from, NX_AM_PROMISE, m->b, a->my_flag, a->susp, 1);
}

static int on_accept(nx_agree *a, uint64_t now, uint32_t from, const nx_agree_msg *m) {
  heard_coordinator(a, now, from);
  if (m->b.round > a->max_round) a->max_round = m->b.round;
  if (bcmp_(m->b, a->promised) < 0) return sendm(a, from, NX_AM_NACK, a->promised, 0, NULL, 0);
  a->promised = m->b;
  a->has_acc = 1;
  a->acc_b = m->b;
  a->acc_flag = m->flag;
  memcpy(a->acc_dead, m->bits, a->nb);
  return sendm(a, from, NX_AM_ACCEPTED, m->b, 0, NULL, 0);
}

static int on_promise(nx_agree *a, uint64_t now, uint32_t from, const nx_agree_msg *m) {
  if (a->role != 1 || bcmp_(m->b, a->cur) != 0 || nx_agree_bit(a->answered, from)) return 0;
  bset(a->answered, from);
  a->nanswered++;
  a->flags[from] = m->flag;
  memcpy(a->rep_susp + (size_t)from * a->nb, m->bits, a->nb);
  if (m->has_acc && (!a->best_has || bcmp_(m->acc_b, a->best_b) > 0)) {
    a->best_has = 1;
    a->best_b = m->acc_b;
    a->best_flag = m->acc_flag;
    memcpy(a->best_dead, m->acc_dead, a->nb);
  }
  return collect_check(a, now);
}

int nx_agree_on_msg(nx_agree *a, uint64_t now, uint32_t from, const uint8_t *buf, size_t len) {
  nx_agree_msg m;
  if (from >= a->n) return NEXAR_ERR_INVALID_ARGUMENT;
  if (nx_agree_decode(buf, len, &m) != 0) return NEXAR_ERR_PROTOCOL;
  if (m.epoch != a->epoch) return 0; /* another view's agreement */
  if (m.n != a->n) return NEXAR_ERR_PROTOCOL;
  if ((m.type == NX_AM_COLLECT || m.type == NX_AM_ACCEPT) && m.b.coord != from)
    return NEXAR_ERR_PROTOCOL;
  if (from == a->me) return 0;
  if (a->dec.outcome == NX_AGREE_ABORTED) return 0;
  if (a->dec.outcome != NX_AGREE_PENDING) {
    /* Decided: whoever still talks about this epoch learns the value. */
    return m.type == NX_AM_COMMIT ? 0 : send_commit(a, from);
  }
  switch (m.type) {
  case NX_AM_COLLECT:
    return on_collect(a, now, from, &m);
  case NX_AM_ACCEPT:
    return on_accept(a, now, from, &m);
  case NX_AM_PROMISE:
    return on_promise(a, now, from, &m);
  case NX_AM_ACCEPTED:
    if (a->role != 2 || bcmp_(m.b, a->cur) != 0 || nx_agree_bit(a->answered, from)) return 0;
    bset(a->answered, from);
    a->nanswered++;
    return accept_check(a);
  case NX_AM_NACK:
    if (m.b.round > a->max_round) a->max_round = m.b.round;
    if ((a->role == 1 || a->role == 2) && bcmp_(m.b, a->cur) > 0) fail_round(a, now);
    return 0;
  case NX_AM_COMMIT:
    return decide(a, m.flag, m.bits);
  default:
    return NEXAR_ERR_PROTOCOL;
  }
}

/* Re-sends the current phase's message to the members that did not answer. */
static int retransmit(nx_agree *a, uint64_t now) {
  a->retx_at = now + retx_step(a);
  for (uint32_t i = 0; i < a->n; i++) {
    if (nx_agree_bit(a->answered, i)) continue;
    int rc = a->role == 1 ? sendm(a, i, NX_AM_COLLECT, a->cur, 0, NULL, 0)
                          : sendm(a, i, NX_AM_ACCEPT, a->cur, a->prop_flag, a->prop_dead, 0);
    if (rc) return rc;
  }
  return 0;
}

int nx_agree_on_timer(nx_agree *a, uint64_t now) {
  if (!a->started || a->dec.outcome != NX_AGREE_PENDING) return 0;
  if (now >= a->give_up_at) return give_up(a);
  switch (a->role) {
  case 1:
    if (now >= a->phase_end) return choose(a, now);
    return now >= a->retx_at ? retransmit(a, now) : 0;
  case 2:
    if (now >= a->phase_end) {
      fail_round(a, now);
      return 0;
    }
    return now >= a->retx_at ? retransmit(a, now) : 0;
  case 3:
    return now >= a->retry_at ? start_ballot(a, now) : 0;
  default:
    return now >= a->stall_at ? start_ballot(a, now) : 0;
  }
}

uint64_t nx_agree_next_deadline(const nx_agree *a) {
  if (!a->started || a->dec.outcome != NX_AGREE_PENDING) return UINT64_MAX;
  uint64_t t;
  switch (a->role) {
  case 1:
  case 2:
    t = a->phase_end < a->retx_at ? a->phase_end : a->retx_at;
    break;
  case 3:
    t = a->retry_at;
    break;
  default:
    t = a->stall_at;
  }
  return t < a->give_up_at ? t : a->give_up_at;
}
