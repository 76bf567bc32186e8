/* Schedule building and execution (see sched.h). */
#include "proto/sched.h"

#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"

void nx_sched_init(nx_sched *s, nexar_dtype dt, nexar_op op) {
  memset(s, 0, sizeof *s);
  s->dt = dt;
  s->op = op;
}

void nx_sched_free(nx_sched *s) {
  free(s->st);
  free(s->succ);
  free(s->succ_off);
  free(s->ready);
  free(s->out);
  free(s->held);
  memset(s, 0, sizeof *s);
}

static nx_step *add(nx_sched *s, int kind, nx_sid dep2) {
  if (s->nomem) return NULL;
  if (s->n == s->cap) {
    uint32_t nc = s->cap ? s->cap * 2 : 32;
    nx_step *a = nc > s->cap ? realloc(s->st, (size_t)nc * sizeof *a) : NULL;
    if (!a) {
      s->nomem = 1;
      return NULL;
    }
    s->st = a;
    s->cap = nc;
  }
  nx_step *st = &s->st[s->n++];
  memset(st, 0, sizeof *st);
  st->kind = (uint8_t)kind;
  st->dep[0] = s->sp;
  st->dep[1] = dep2;
  return st;
}

static nx_sid id_of(const nx_sched *s, const nx_step *st) {
  return (nx_sid)(st - s->st) + 1;
}

static nx_sid msg(nx_sched *s, int kind, uint32_t peer, uint32_t round, uint32_t seg,
                  const void *buf, size_t len, int empty_ok) {
  if (len == 0 && !empty_ok) return 0;
  nx_step *st = add(s, kind, 0);
  if (!st) return 0;
  st->peer = peer;
  st->round = round;
  st->seg = seg;
  st->dst = (void *)buf;
  st->len = len;
  return id_of(s, st);
}

nx_sid nx_sched_send(nx_sched *s, uint32_t peer, uint32_t round, uint32_t seg, const void *buf,
                     size_t len) {
  return msg(s, NX_ST_SEND, peer, round, seg, buf, len, 0);
}

nx_sid nx_sched_send0(nx_sched *s, uint32_t peer, uint32_t round, uint32_t seg, const void *buf,
                      size_t len) {
  return msg(s, NX_ST_SEND, peer, round, seg, buf, len, 1);
}

nx_sid nx_sched_recv0(nx_sched *s, uint32_t peer, uint32_t round, uint32_t seg, void *buf,
                      size_t len) {
  return msg(s, NX_ST_RECV, peer, round, seg, buf, len, 1);
}

nx_sid nx_sched_recv(nx_sched *s, uint32_t peer, uint32_t round, uint32_t seg, void *buf,
                     size_t len) {
  return msg(s, NX_ST_RECV, peer, round, seg, buf, len, 0);
}

/* A local step is also a sequence point: a blocking algorithm would have
 * finished it before its next statement. */
static nx_sid local(nx_sched *s, int kind, void *dst, const void *a, const void *b, size_t len) {
  if (len == 0 && kind != NX_ST_CALL) return 0;
  nx_step *st = add(s, kind, 0);
  if (!st) return 0;
  st->dst = dst;
  st->a = a;
  st->b = b;
  st->len = len;
  s->sp = id_of(s, st);
  return s->sp;
}

nx_sid nx_sched_reduce3(nx_sched *s, void *dst, const void *a, const void *b, size_t count) {
  return local(s, NX_ST_REDUCE3, dst, a, b, count);
}
nx_sid nx_sched_reduce(nx_sched *s, void *dst, const void *src, size_t count) {
  return local(s, NX_ST_REDUCE, dst, src, NULL, count);
}
nx_sid nx_sched_copy(nx_sched *s, void *dst, const void *src, size_t bytes) {
  if (dst == src) return 0;
  return local(s, NX_ST_COPY, dst, src, NULL, bytes);
}
nx_sid nx_sched_fill_identity(nx_sched *s, void *dst, size_t count) {
  return local(s, NX_ST_FILL, dst, NULL, NULL, count);
}
nx_sid nx_sched_call(nx_sched *s, int (*fn)(void *arg), void *arg) {
  nx_sid id = local(s, NX_ST_CALL, NULL, NULL, NULL, 0);
  if (id) {
    s->st[id - 1].fn = fn;
    s->st[id - 1].arg = arg;
  }
  return id;
}

nx_sid nx_sched_avg(nx_sched *s, void *dst, size_t count, uint32_t n) {
  nx_sid id = local(s, NX_ST_AVG, dst, NULL, NULL, count);
  if (id) s->st[id - 1].round = n;
  return id;
}

void nx_sched_wait(nx_sched *s, nx_sid id) {
  if (!id || id == s->sp) return;
  nx_step *st = add(s, NX_ST_NOP, id);
  if (st) s->sp = id_of(s, st);
}

void nx_sched_wait_all(nx_sched *s) {
  /* Local steps are sequence points already; only messages can be unordered. */
  uint32_t n = s->n;
  for (uint32_t i = 0; i < n && !s->nomem; i++)
    if (s->st[i].kind == NX_ST_SEND || s->st[i].kind == NX_ST_RECV) nx_sched_wait(s, i + 1);
}

/* ------------------------------------------------------------ executor */

static void push_ready(nx_sched *s, nx_sid id) {
  s->ready[s->rtail++] = id; /* each step is pushed once: n slots suffice */
}

static void done(nx_sched *s, nx_sid id) {
  nx_step *st = &s->st[id - 1];
  st->state = 2;
  s->ndone++;
  if (s->ops->finish) s->ops->finish(s->ctx, st);
  for (uint32_t i = s->succ_off[id - 1]; i < s->succ_off[id]; i++) {
    nx_sid t = s->succ[i];
    if (--s->st[t - 1].waiting == 0) push_ready(s, t);
  }
}

int nx_sched_start(nx_sched *s, const nx_sched_ops *ops, void *ctx) {
  s->ops = ops;
  s->ctx = ctx;
  if (s->nomem) return NEXAR_ERR_NOMEM;
  uint32_t n = s->n;
  s->succ_off = calloc((size_t)n + 1, sizeof *s->succ_off);
  s->succ = malloc(((size_t)n * 2 + 1) * sizeof *s->succ);
  s->ready = malloc(((size_t)n + 1) * sizeof *s->ready);
  s->out = malloc(((size_t)n + 1) * sizeof *s->out);
  s->held = malloc(((size_t)n + 1) * sizeof *s->held);
  if (!s->succ_off || !s->succ || !s->ready || !s->out || !s->held) return NEXAR_ERR_NOMEM;
  /* successors in compressed rows: count, prefix sums, fill */
  for (uint32_t i = 0; i < n; i++) {
    nx_step *st = &s->st[i];
    if (st->dep[1] == st->dep[0]) st->dep[1] = 0;
    for (int d = 0; d < 2; d++)
      if (st->dep[d]) {
        s->succ_off[st->dep[d]]++; /* counted at dep's row + 1 */
        st->waiting++;
      }
  }
  for (uint32_t i = 0; i < n; i++)
    s->succ_off[i + 1] += s->succ_off[i];
  uint32_t *fill = malloc(((size_t)n + 1) * sizeof *fill);
  if (!fill) return NEXAR_ERR_NOMEM;
  memcpy(fill, s->succ_off, ((size_t)n + 1) * sizeof *fill);
  for (uint32_t i = 0; i < n; i++)
    for (int d = 0; d < 2; d++) {
      nx_sid p = s->st[i].dep[d];
      if (p) s->succ[fill[p - 1]++] = i + 1;
    }
  free(fill);
  for (uint32_t i = 0; i < n; i++)
    if (!s->st[i].waiting) push_ready(s, i + 1);
  return 0;
}

static void set_error(nx_sched *s, int rc) {
  if (!s->rc) s->rc = rc;
  if (!s->failed) {
    s->failed = 1;
    s->ops->fail(s->ctx, s->rc);
  }
}

/* Runs one ready step; 0 or an error. */
static int issue(nx_sched *s, nx_sid id) {
  nx_step *st = &s->st[id - 1];
  switch (st->kind) {
  case NX_ST_SEND:
  case NX_ST_RECV: {
    int rc = s->ops->post(s->ctx, st, &st->h);
    if (rc) return rc;
    st->state = 1;
    s->out[s->nout++] = id;
    return 0;
  }
  case NX_ST_REDUCE3:
    nx_reduce3(st->dst, st->a, st->b, st->len, s->dt, s->op);
    break;
  case NX_ST_REDUCE:
    nx_reduce(st->dst, st->a, st->len, s->dt, s->op);
    break;
  case NX_ST_COPY:
    memmove(st->dst, st->a, st->len);
    break;
  case NX_ST_FILL:
    nx_fill_identity(st->dst, st->len, s->dt, s->op);
    break;
  case NX_ST_CALL: {
    int rc = st->fn(st->arg);
    if (rc) return rc;
    break;
  }
  case NX_ST_AVG:
    nx_avg_div(st->dst, st->len, s->dt, st->round);
    break;
  default:
    break;
  }
  done(s, id);
  return 0;
}

int nx_sched_advance(nx_sched *s) {
  for (;;) {
    int moved = 0;
    for (uint32_t i = 0; i < s->nout;) {
      nx_sid id = s->out[i];
      int rc = 0;
      if (!s->ops->reap(s->ctx, s->st[id - 1].h, &rc)) {
        i++;
        continue;
      }
      s->st[id - 1].h = NULL;
      s->out[i] = s->out[--s->nout];
      moved = 1;
      if (rc)
        set_error(s, rc);
      else
        done(s, id);
    }
    /* held steps first (they were ready earlier), then the new ones */
    for (uint32_t i = 0; !s->rc && i < s->nheld;) {
      int g = s->ops->gate(s->ctx, &s->st[s->held[i] - 1]);
      if (g == 0) {
        i++;
        continue;
      }
      nx_sid id = s->held[i];
      memmove(&s->held[i], &s->held[i + 1], (s->nheld - i - 1) * sizeof *s->held);
      s->nheld--;
      moved = 1;
      int rc = g < 0 ? g : issue(s, id);
      if (rc) set_error(s, rc);
    }
    while (!s->rc && s->rhead < s->rtail) {
      nx_sid id = s->ready[s->rhead++];
      int g = s->ops->gate ? s->ops->gate(s->ctx, &s->st[id - 1]) : 1;
      moved = 1;
      if (g == 0) {
        s->held[s->nheld++] = id;
        continue;
      }
      int rc = g < 0 ? g : issue(s, id);
      if (rc) set_error(s, rc);
    }
    if (!moved) break;
  }
  if (s->nout || (s->nheld && !s->rc)) return 0;
  /* dependencies point to earlier steps, so with nothing posted and nothing
   * ready every step is done; never wait forever on a builder's mistake */
  if (!s->rc && s->ndone < s->n) s->rc = NEXAR_ERR_PROTOCOL;
  return 1;
}
