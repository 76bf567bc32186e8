/* Every collective's schedule, executed without sockets: N simulated ranks
 * (worlds 1-9) in one thread over an in-memory network that delivers
 * matching messages in a seeded random order. A send either copies its data
 * when posted (eager) or is read only when it is delivered (rendezvous), so
 * a schedule that touches a buffer before the message using it is done
 * gives wrong results; a schedule that waits for something nobody sends is
 * reported as a deadlock; a message nobody receives is reported too. Results
 * are compared bit for bit with the reference of coll_util.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_test.h"
#include "collective/coll.h"
#include "proto/sched.h"

#define MAXN 9

typedef struct smsg {
  int is_send, eager, done, rc;
  uint32_t src, dst, round, seg;
  void *buf;
  size_t len;
  void *copy;        /* eager data */
  struct smsg *peer; /* the matched send of a receive */
  struct smsg *hnext;
} smsg;

#define NB 4096
typedef struct net {
  smsg **m; /* every message, for freeing and the final check */
  size_t n, cap;
  smsg *sends[NB], *recvs[NB]; /* unmatched, by key, oldest first */
  smsg **ev;                   /* possible events: eager sends, matched receives */
  size_t nev, capev;
  uint64_t rng;
} net;

typedef struct srank {
  net *nw;
  uint32_t rank;
  int failed;
} srank;

static uint64_t rnd(net *nw) {
  nw->rng ^= nw->rng << 13;
  nw->rng ^= nw->rng >> 7;
  nw->rng ^= nw->rng << 17;
  return nw->rng;
}

static void push(smsg ***a, size_t *n, size_t *cap, smsg *m) {
  if (*n == *cap) {
    *cap = *cap ? *cap * 2 : 256;
    *a = realloc(*a, *cap * sizeof **a);
    if (!*a) exit(2);
  }
  (*a)[(*n)++] = m;
}

static size_t hkey(const smsg *m) {
  uint64_t h = m->src * 31u + m->dst;
  h = h * 1000003u + m->round;
  h = h * 1000003u + m->seg;
  return (size_t)(h % NB);
}

static int same_key(const smsg *a, const smsg *b) {
  return a->src == b->src && a->dst == b->dst && a->round == b->round && a->seg == b->seg;
}

/* Takes the oldest message with m's key from list *head (NULL if none). */
static smsg *take(smsg **head, const smsg *m) {
  for (smsg **pp = head; *pp; pp = &(*pp)->hnext)
    if (same_key(*pp, m)) {
      smsg *x = *pp;
      *pp = x->hnext;
      return x;
    }
  return NULL;
}

static void append(smsg **head, smsg *m) {
  while (*head)
    head = &(*head)->hnext;
  m->hnext = NULL;
  *head = m;
}

static int s_post(void *ctx, const nx_step *st, void **h) {
  srank *sr = ctx;
  net *nw = sr->nw;
  smsg *m = t_xmalloc(sizeof *m);
  memset(m, 0, sizeof *m);
  m->is_send = st->kind == NX_ST_SEND;
  m->src = m->is_send ? sr->rank : st->peer;
  m->dst = m->is_send ? st->peer : sr->rank;
  m->round = st->round;
  m->seg = st->seg;
  m->buf = st->dst;
  m->len = st->len;
  push(&nw->m, &nw->n, &nw->cap, m);
  size_t k = hkey(m);
  if (m->is_send) {
    if (rnd(nw) & 1) { /* copied now, like an eager send */
      m->eager = 1;
      m->copy = t_xmalloc(m->len);
      memcpy(m->copy, m->buf, m->len);
      push(&nw->ev, &nw->nev, &nw->capev, m);
    }
    smsg *r = take(&nw->recvs[k], m);
    if (r) {
      r->peer = m;
      push(&nw->ev, &nw->nev, &nw->capev, r);
    } else {
      append(&nw->sends[k], m);
    }
  } else {
    smsg *x = take(&nw->sends[k], m);
    if (x) {
      m->peer = x;
      push(&nw->ev, &nw->nev, &nw->capev, m);
    } else {
      append(&nw->recvs[k], m);
    }
  }
  *h = m;
  return 0;
}

static int s_reap(void *ctx, void *h, int *rc) {
  (void)ctx;
  smsg *m = h;
  if (!m->done) return 0;
  *rc = m->rc;
  return 1;
}

static void s_fail(void *ctx, int rc) {
  srank *sr = ctx;
  sr->failed = rc;
}

static const nx_sched_ops sim_ops = {s_post, s_reap, s_fail, NULL, NULL};

/* One random event: an eager send completes, or a matched receive reads
 * its send's data (a rendezvous send completes then). 0 if none. */
static int step_net(net *nw) {
  if (!nw->nev) return 0;
  size_t i = rnd(nw) % nw->nev;
  smsg *m = nw->ev[i];
  nw->ev[i] = nw->ev[--nw->nev];
  if (m->is_send) {
    m->done = 1;
    return 1;
  }
  smsg *x = m->peer;
  if (x->len != m->len)
    m->rc = NEXAR_ERR_SIZE_MISMATCH;
  else
    memcpy(m->buf, x->eager ? x->copy : x->buf, m->len);
  m->done = 1;
  if (!x->eager) x->done = 1;
  return 1;
}

/* ---------------------------------------------------------------- cases */

typedef struct ccase {
  int kind; /* nx_coll_op */
  const char *name;
  int *force;
  int algo;
  nexar_op op; /* SUM unless given */
  int ints;    /* integer dtypes only (bitwise ops) */
} ccase;

typedef struct rstate {
  nx_job j;
  char *buf, *send, *recv;
  nexar_bucket bk[3];
  srank sr;
  size_t v[4 * MAXN]; /* send counts, send displs, recv counts, recv displs */
} rstate;

/* Variable counts: block (src -> dst) of a v-collective has vc() elements,
 * some zero, all zero when count is 0. */
static size_t vc(size_t count, uint32_t src, uint32_t dst, uint64_t seed) {
  if (count == 0) return 0;
  if ((src * 5 + dst * 3 + seed) % 4 == 0) return 0;
  return 1 + (count * (src + 1) + dst * 7 + seed) % (count + 2);
}

/* Displacements for counts c[0..n): packed in rank order, or (odd seeds) in
 * reverse rank order with a gap of 3 elements before each block. Returns
 * the extent in elements. */
static size_t layout(const size_t *c, size_t *d, uint32_t n, uint64_t seed) {
  size_t at = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t i = (seed & 1) ? n - 1 - k : k;
    if (seed & 1) at += 3;
    d[i] = at;
    at += c[i];
  }
  return at;
}

static int is_v(int kind) {
  return kind >= NX_COLL_ALL_GATHER_V;
}

static int checks;

/* Runs one collective on n simulated ranks; returns failures. */
static int run_case(const ccase *cc, uint32_t n, size_t count, nexar_dtype dt, uint32_t root,
                    uint64_t seed) {
  static net nw;
  memset(&nw, 0, sizeof nw);
  nw.rng = seed * 2654435761u + 1;
  rstate *rs = calloc(n, sizeof *rs);
  size_t es = nexar_dtype_size(dt), blk = count * es;
  int salt = (int)(seed % 1000);
  nexar_op op = cc->op;     /* exact inputs: every order gives the same bits */
  size_t ext = blk * n + 1; /* buffer bytes (the v-collectives' layouts need more) */
  if (is_v(cc->kind)) ext = (size_t)n * ((count + 2) + 3) * es * (n + 1) + 1;
  int fails = 0;
  tctx tc = {.n = n};
  for (uint32_t r = 0; r < n; r++) {
    rstate *x = &rs[r];
    nx_job *j = &x->j;
    j->kind = cc->kind;
    j->rank = r;
    j->world = n;
    j->count = count;
    j->dt = dt;
    j->op = op;
    j->es = es;
    j->root = root;
    j->params = *nx_algo_defaults();
    x->buf = t_xmalloc(ext);
    x->send = t_xmalloc(ext);
    x->recv = t_xmalloc(ext);
    memset(x->recv, 0xee, ext);
    size_t *sc = x->v, *sd = x->v + MAXN, *rc_ = x->v + 2 * MAXN, *rd = x->v + 3 * MAXN;
    switch (cc->kind) {
    case NX_COLL_ALL_GATHER_V:
    case NX_COLL_GATHER_V: /* rank i contributes vc(i, 0) elements */
      for (uint32_t i = 0; i < n; i++)
        rc_[i] = vc(count, i, 0, seed);
      layout(rc_, rd, n, seed);
      j->count = rc_[r];
      t_fill(x->send, rc_[r], dt, op, r, 0, salt);
      j->send = x->send;
      j->recv = x->recv;
      j->rcounts = rc_;
      j->rdispls = rd;
      break;
    case NX_COLL_SCATTER_V: /* rank i receives vc(root, i) elements */
      for (uint32_t i = 0; i < n; i++)
        sc[i] = vc(count, root, i, seed);
      layout(sc, sd, n, seed);
      j->count = sc[r];
      if (r == root)
        for (uint32_t i = 0; i < n; i++)
          t_fill(x->send + sd[i] * es, sc[i], dt, op, root, 1000 * (size_t)i, salt);
      j->send = x->send;
      j->recv = x->recv;
      j->scounts = sc;
      j->sdispls = sd;
      break;
    case NX_COLL_REDUCE_SCATTER_V: {
      for (uint32_t i = 0; i < n; i++)
        rc_[i] = vc(count, i, 0, seed);
      size_t tot = layout(rc_, rd, n, 0); /* packed */
      t_fill(x->send, tot, dt, op, r, 0, salt);
      j->send = x->send;
      j->recv = x->recv;
      j->rcounts = rc_;
      j->rdispls = rd;
      break;
    }
    case NX_COLL_ALL_TO_ALL_V:
      for (uint32_t i = 0; i < n; i++) {
        sc[i] = vc(count, r, i, seed);
        rc_[i] = vc(count, i, r, seed);
      }
      layout(sc, sd, n, seed);
      layout(rc_, rd, n, seed >> 1);
      for (uint32_t i = 0; i < n; i++)
        t_fill(x->send + sd[i] * es, sc[i], dt, op, r, 1000 * (size_t)i, salt);
      j->send = x->send;
      j->recv = x->recv;
      j->scounts = sc;
      j->sdispls = sd;
      j->rcounts = rc_;
      j->rdispls = rd;
      break;
    case NX_COLL_ALL_REDUCE:
    case NX_COLL_ALL_REDUCE_RS_AG:
    case NX_COLL_REDUCE:
    case NX_COLL_SCAN:
    case NX_COLL_EXSCAN:
      t_fill(x->buf, count, dt, op, r, 0, salt);
      j->buf = x->buf;
      break;
    case NX_COLL_BROADCAST:
      t_fill(x->buf, count, dt, op, r == root ? 0 : 1 + r, 0, salt);
      j->buf = x->buf;
      break;
    case NX_COLL_ALL_REDUCE_BUCKETED: {
      t_fill(x->buf, count, dt, op, r, 0, salt);
      size_t a = count / 3, b = count / 2;
      x->bk[0] = (nexar_bucket){x->buf, a};
      x->bk[1] = (nexar_bucket){x->buf + a * es, b - a};
      x->bk[2] = (nexar_bucket){x->buf + b * es, count - b};
      j->buckets = x->bk;
      j->nbuckets = 3;
      break;
    }
    case NX_COLL_ALL_GATHER:
    case NX_COLL_GATHER:
      t_fill(x->send, count, dt, op, r, 0, salt);
      j->send = x->send;
      j->recv = x->recv;
      break;
    default: /* reduce_scatter, scatter, all_to_all: n blocks in */
      t_fill(x->send, count * n, dt, op, r, 0, salt);
      j->send = x->send;
      j->recv = x->recv;
      break;
    }
    x->sr = (srank){.nw = &nw, .rank = r};
    nx_sched_init(&j->sched, dt, op);
    int rc = nx_job_build(j);
    if (!rc) rc = nx_sched_start(&j->sched, &sim_ops, &x->sr);
    if (rc) {
      tc.rank = r;
      t_fail(&tc, __LINE__, "%s n=%u count=%zu: build -> %d", cc->name, n, count, rc);
      return 1;
    }
  }
  /* run: advance every rank, then one network event, until all are over */
  int *over = calloc(n, sizeof *over);
  for (;;) {
    uint32_t left = 0;
    for (uint32_t r = 0; r < n; r++)
      if (!over[r]) {
        over[r] = nx_sched_advance(&rs[r].j.sched);
        left += !over[r];
      }
    if (!left) break;
    if (!step_net(&nw)) {
      tc.rank = 0;
      t_fail(&tc, __LINE__, "%s n=%u count=%zu seed=%llu: deadlock, %u ranks waiting", cc->name, n,
             count, (unsigned long long)seed, left);
      fails++;
      break;
    }
  }
  for (size_t k = 0; k < NB && !fails; k++)
    for (smsg *u = nw.sends[k]; u && !fails; u = u->hnext) {
      t_fail(&tc, __LINE__, "%s n=%u count=%zu: rank %u sent (round %u seg %u) to %u unreceived",
             cc->name, n, count, u->src, u->round, u->seg, u->dst);
      fails++;
    }
  /* results */
  char *exp = t_xmalloc(ext);
  for (uint32_t r = 0; r < n && !fails; r++) {
    rstate *x = &rs[r];
    tc.rank = r;
    if (x->j.sched.rc) {
      t_fail(&tc, __LINE__, "%s n=%u: rc %d", cc->name, n, x->j.sched.rc);
      fails++;
      continue;
    }
    char what[96];
    snprintf(what, sizeof what, "%s n=%u count=%zu root=%u seed=%llu seg=%zu", cc->name, n, count,
             root, (unsigned long long)seed, nx_algo_force_segment);
    int bad = 1; /* T_BUF: 1 when equal */
    switch (cc->kind) {
    case NX_COLL_ALL_REDUCE:
    case NX_COLL_ALL_REDUCE_RS_AG:
    case NX_COLL_ALL_REDUCE_BUCKETED:
      t_fold(exp, count, dt, op, 0, n, 0, salt);
      bad = T_BUF(&tc, what, x->buf, exp, count, dt);
      break;
    case NX_COLL_REDUCE:
      if (r != root) break;
      t_fold(exp, count, dt, op, 0, n, 0, salt);
      bad = T_BUF(&tc, what, x->buf, exp, count, dt);
      break;
    case NX_COLL_SCAN:
      t_fold(exp, count, dt, op, 0, r + 1, 0, salt);
      bad = T_BUF(&tc, what, x->buf, exp, count, dt);
      break;
    case NX_COLL_EXSCAN:
      if (r == 0)
        t_identity(exp, count, dt, op);
      else
        t_fold(exp, count, dt, op, 0, r, 0, salt);
      bad = T_BUF(&tc, what, x->buf, exp, count, dt);
      break;
    case NX_COLL_BROADCAST:
      t_fill(exp, count, dt, op, 0, 0, salt);
      bad = T_BUF(&tc, what, x->buf, exp, count, dt);
      break;
    case NX_COLL_ALL_GATHER:
    case NX_COLL_GATHER:
      if (cc->kind == NX_COLL_GATHER && r != root) break;
      for (uint32_t s2 = 0; s2 < n; s2++)
        t_fill(exp + s2 * blk, count, dt, op, s2, 0, salt);
      bad = T_BUF(&tc, what, x->recv, exp, count * n, dt);
      break;
    case NX_COLL_SCATTER:
      t_fill(exp, count, dt, op, root, (size_t)r * count, salt);
      bad = T_BUF(&tc, what, x->recv, exp, count, dt);
      break;
    case NX_COLL_REDUCE_SCATTER:
      t_fold(exp, count, dt, op, 0, n, (size_t)r * count, salt);
      bad = T_BUF(&tc, what, x->recv, exp, count, dt);
      break;
    case NX_COLL_ALL_TO_ALL:
      for (uint32_t s2 = 0; s2 < n; s2++)
        t_fill(exp + s2 * blk, count, dt, op, s2, (size_t)r * count, salt);
      bad = T_BUF(&tc, what, x->recv, exp, count * n, dt);
      break;
    case NX_COLL_ALL_GATHER_V:
    case NX_COLL_GATHER_V:
    case NX_COLL_ALL_TO_ALL_V: {
      if (cc->kind == NX_COLL_GATHER_V && r != root) break;
      const size_t *c2 = x->v + 2 * MAXN, *d2 = x->v + 3 * MAXN;
      for (uint32_t s2 = 0; s2 < n && bad; s2++) {
        int a2a = cc->kind == NX_COLL_ALL_TO_ALL_V;
        t_fill(exp, c2[s2], dt, op, s2, a2a ? 1000 * (size_t)r : 0, salt);
        bad = T_BUF(&tc, what, x->recv + d2[s2] * es, exp, c2[s2], dt);
      }
      break;
    }
    case NX_COLL_SCATTER_V:
      t_fill(exp, x->j.count, dt, op, root, 1000 * (size_t)r, salt);
      bad = T_BUF(&tc, what, x->recv, exp, x->j.count, dt);
      break;
    case NX_COLL_REDUCE_SCATTER_V: {
      const size_t *c2 = x->v + 2 * MAXN, *d2 = x->v + 3 * MAXN;
      t_fold(exp, c2[r], dt, op, 0, n, d2[r], salt);
      bad = T_BUF(&tc, what, x->recv, exp, c2[r], dt);
      break;
    }
    default:
      break;
    }
    fails += !bad;
    checks++;
  }
  for (size_t i = 0; i < nw.n; i++) {
    free(nw.m[i]->copy);
    free(nw.m[i]);
  }
  free(nw.m);
  free(nw.ev);
  for (uint32_t r = 0; r < n; r++) {
    nx_sched_free(&rs[r].j.sched);
    for (size_t i = 0; i < NX_JOB_SCRATCH; i++)
      free(rs[r].j.scratch[i]);
    free(rs[r].buf), free(rs[r].send), free(rs[r].recv);
  }
  free(exp);
  free(over);
  free(rs);
  return fails;
}

int main(int argc, char **argv) {
  int seeds = argc > 1 ? atoi(argv[1]) : 3;
  ccase cases[] = {
      {NX_COLL_ALL_REDUCE, "allreduce/recdbl", &nx_algo_force_allreduce, NX_AR_RECDBL, NEXAR_SUM,
       0},
      {NX_COLL_ALL_REDUCE, "allreduce/halvdbl", &nx_algo_force_allreduce, NX_AR_HALVDBL, NEXAR_SUM,
       0},
      {NX_COLL_ALL_REDUCE, "allreduce/ring", &nx_algo_force_allreduce, NX_AR_RING, NEXAR_SUM, 0},
      {NX_COLL_ALL_REDUCE, "allreduce/ring_pipe", &nx_algo_force_allreduce, NX_AR_RING_PIPE,
       NEXAR_SUM, 0},
      {NX_COLL_ALL_REDUCE_RS_AG, "allreduce_rs_ag", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_ALL_REDUCE_BUCKETED, "allreduce_bucketed", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_BROADCAST, "broadcast/binomial", &nx_algo_force_broadcast, NX_BC_BINOMIAL, NEXAR_SUM,
       0},
      {NX_COLL_BROADCAST, "broadcast/chain", &nx_algo_force_broadcast, NX_BC_CHAIN, NEXAR_SUM, 0},
      {NX_COLL_ALL_GATHER, "allgather/recdbl", &nx_algo_force_allgather, NX_AG_RECDBL, NEXAR_SUM,
       0},
      {NX_COLL_ALL_GATHER, "allgather/ring", &nx_algo_force_allgather, NX_AG_RING, NEXAR_SUM, 0},
      {NX_COLL_GATHER, "gather/binomial", &nx_algo_force_gather, NX_GS_BINOMIAL, NEXAR_SUM, 0},
      {NX_COLL_GATHER, "gather/direct", &nx_algo_force_gather, NX_GS_DIRECT, NEXAR_SUM, 0},
      {NX_COLL_SCATTER, "scatter/binomial", &nx_algo_force_gather, NX_GS_BINOMIAL, NEXAR_SUM, 0},
      {NX_COLL_SCATTER, "scatter/direct", &nx_algo_force_gather, NX_GS_DIRECT, NEXAR_SUM, 0},
      {NX_COLL_REDUCE_SCATTER, "reduce_scatter", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_REDUCE, "reduce", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_ALL_TO_ALL, "all_to_all", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_SCAN, "scan/recdbl", &nx_algo_force_scan, NX_SC_RECDBL, NEXAR_SUM, 0},
      {NX_COLL_SCAN, "scan/chain", &nx_algo_force_scan, NX_SC_CHAIN, NEXAR_SUM, 0},
      {NX_COLL_EXSCAN, "exscan/recdbl", &nx_algo_force_scan, NX_SC_RECDBL, NEXAR_SUM, 0},
      {NX_COLL_EXSCAN, "exscan/chain", &nx_algo_force_scan, NX_SC_CHAIN, NEXAR_SUM, 0},
      {NX_COLL_BARRIER, "barrier", NULL, 0, NEXAR_SUM, 0},
      /* the operators of issue 14 (the schedules are those above; these check
       * the kernels and avg's final division inside them) */
      {NX_COLL_ALL_REDUCE, "allreduce/halvdbl band", &nx_algo_force_allreduce, NX_AR_HALVDBL,
       NEXAR_BAND, 1},
      {NX_COLL_ALL_REDUCE, "allreduce/ring avg", &nx_algo_force_allreduce, NX_AR_RING, NEXAR_AVG,
       0},
      {NX_COLL_ALL_REDUCE_RS_AG, "allreduce_rs_ag avg", NULL, 0, NEXAR_AVG, 0},
      {NX_COLL_ALL_REDUCE_BUCKETED, "allreduce_bucketed avg", NULL, 0, NEXAR_AVG, 0},
      {NX_COLL_REDUCE_SCATTER, "reduce_scatter avg", NULL, 0, NEXAR_AVG, 0},
      {NX_COLL_REDUCE, "reduce bxor", NULL, 0, NEXAR_BXOR, 1},
      {NX_COLL_EXSCAN, "exscan/chain bor", &nx_algo_force_scan, NX_SC_CHAIN, NEXAR_BOR, 1},
      /* the variable-count collectives */
      {NX_COLL_ALL_GATHER_V, "all_gather_v", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_GATHER_V, "gather_v", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_SCATTER_V, "scatter_v", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_ALL_TO_ALL_V, "all_to_all_v", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_REDUCE_SCATTER_V, "reduce_scatter_v", NULL, 0, NEXAR_SUM, 0},
      {NX_COLL_REDUCE_SCATTER_V, "reduce_scatter_v avg", NULL, 0, NEXAR_AVG, 0},
  };
  static const size_t counts[] = {0, 1, 2, 7, 33, 250};
  static const nexar_dtype dts[] = {NEXAR_F32, NEXAR_I64, NEXAR_BF16};
  static const nexar_dtype idts[] = {NEXAR_I32, NEXAR_U8, NEXAR_I64};
  int fails = 0;
  size_t runs = 0;
  const char *only = argc > 2 ? argv[2] : NULL; /* debugging: one case by name */
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    const ccase *cc = &cases[c];
    if (only && strcmp(only, cc->name) != 0) continue;
    if (cc->force) *cc->force = cc->algo;
    for (uint32_t n = 1; n <= MAXN; n++)
      for (size_t k = 0; k < sizeof counts / sizeof *counts; k++)
        for (int seg = 0; seg < 2; seg++) {
          /* small forced segments make the pipelined schedules cut blocks */
          nx_algo_force_segment = seg ? 8 : 0;
          for (int sd = 0; sd < seeds; sd++) {
            uint64_t seed = 1 + (uint64_t)sd + 1000u * (uint64_t)(n + 10 * k + 100 * c);
            nexar_dtype dt = cc->ints ? idts[(size_t)sd % 3] : dts[(size_t)sd % 3];
            uint32_t root = (uint32_t)(seed % n);
            fails += run_case(cc, n, counts[k], dt, root, seed);
            runs++;
            if (fails > 20) goto out;
          }
        }
    if (cc->force) *cc->force = -1;
  }
out:
  nx_algo_force_segment = 0;
  fprintf(stderr, "sched_sim: %zu runs, %d rank results checked, %d failures\n", runs, checks,
          fails);
  return fails ? 1 : 0;
}
