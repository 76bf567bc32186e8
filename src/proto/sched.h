/* Collective schedules as data: the steps of one collective on one rank
 * (sends, receives, reductions, copies) with the order they must keep, and
 * the executor that issues each step once the steps it depends on are done.
 *
 * Pure: no sockets, no clock, no threads. The algorithm modules build a
 * schedule in program order, exactly as a blocking algorithm would run:
 * posting a send or receive adds a step; waiting for one makes it a
 * dependency of every later step (a sequence point); a local reduction or
 * copy is a step that later steps depend on. The executor then runs the
 * steps as completions arrive, through callbacks the caller supplies (the
 * runtime's message port, or a simulated network in tests), so many
 * collectives can be in flight on one thread without a thread each.
 *
 * Not thread-safe: one thread at a time builds or advances a schedule. */
#ifndef NX_PROTO_SCHED_H
#define NX_PROTO_SCHED_H

#include <stddef.h>
#include <stdint.h>

#include "nexar/nexar.h"

/* A step id: 0 means "no step" (a zero-length message is never sent). */
typedef uint32_t nx_sid;

enum nx_step_kind {
  NX_ST_SEND = 1,
  NX_ST_RECV,
  NX_ST_REDUCE3, /* dst = a op b (count elements) */
  NX_ST_REDUCE,  /* dst = dst op a */
  NX_ST_COPY,    /* len bytes from a to dst */
  NX_ST_FILL,    /* dst = identity of op (count elements) */
  NX_ST_CALL,    /* rc = fn(arg): local work that reads received data */
  NX_ST_AVG,     /* dst /= round (count elements): NEXAR_AVG's division */
  NX_ST_NOP,     /* a sequence point */
};

typedef struct nx_step {
  uint8_t kind;
  uint8_t state;             /* 0 waiting, 1 posted, 2 done */
  uint32_t peer, round, seg; /* SEND / RECV */
  void *dst;
  const void *a, *b;
  size_t len; /* bytes (SEND, RECV, COPY) or elements (REDUCE*, FILL) */
  nx_sid dep[2];
  uint32_t waiting; /* dependencies not done yet (executor) */
  int (*fn)(void *arg);
  void *arg;
  void *h; /* the posted message (executor) */
} nx_step;

/* What the executor needs from the messaging layer. */
typedef struct nx_sched_ops {
  /* Posts a send (buf read until done) or receive of exactly len bytes,
   * keyed by (peer, round, seg); *h identifies it. 0 or a negative code. */
  int (*post)(void *ctx, const nx_step *st, void **h);
  /* 1 once h is finished (its result in *rc; h is released), else 0. */
  int (*reap)(void *ctx, void *h, int *rc);
  /* The first error: give up the posted messages (they still finish
   * through reap, promptly). */
  void (*fail)(void *ctx, int rc);
  /* Optional (NULL: always ready). Before a ready step is issued: 1 to
   * issue it now, 0 to hold it (asked again on every nx_sched_advance), or
   * a negative code that fails the schedule. Device staging loads the
   * step's host segments here (collective/devstage.c). */
  int (*gate)(void *ctx, nx_step *st);
  /* Optional: a step is done (local work ran, or its message succeeded). */
  void (*finish)(void *ctx, const nx_step *st);
} nx_sched_ops;

typedef struct nx_sched {
  nx_step *st; /* st[id - 1] */
  uint32_t n, cap;
  nx_sid sp; /* current sequence point */
  int nomem; /* building ran out of memory */
  nexar_dtype dt;
  nexar_op op;
  /* executor */
  const nx_sched_ops *ops;
  void *ctx;
  uint32_t *succ, *succ_off; /* successors of step i: succ[succ_off[i] .. succ_off[i+1]) */
  nx_sid *ready;
  uint32_t rhead, rtail;
  nx_sid *held; /* ready, held back by gate */
  uint32_t nheld;
  nx_sid *out; /* posted, not yet reaped */
  uint32_t nout;
  uint32_t ndone;
  int rc;
  int failed; /* ops->fail called */
} nx_sched;

void nx_sched_init(nx_sched *s, nexar_dtype dt, nexar_op op);
void nx_sched_free(nx_sched *s);

/* Builders, in program order. Each returns the new step's id (0 if
 * nothing was added: a zero-length message, or out of memory, which
 * nx_sched_start then reports). */
nx_sid nx_sched_send(nx_sched *s, uint32_t peer, uint32_t round, uint32_t seg, const void *buf,
                     size_t len);
nx_sid nx_sched_recv(nx_sched *s, uint32_t peer, uint32_t round, uint32_t seg, void *buf,
                     size_t len);
/* As nx_sched_send / nx_sched_recv, but a zero-length message is a message
 * too (sent and expected): for the variable-count collectives, whose ranks
 * do not know each other's counts, so an empty block still tells the
 * receiver its length (a differing one is then a size mismatch, not a hang). */
nx_sid nx_sched_send0(nx_sched *s, uint32_t peer, uint32_t round, uint32_t seg, const void *buf,
                      size_t len);
nx_sid nx_sched_recv0(nx_sched *s, uint32_t peer, uint32_t round, uint32_t seg, void *buf,
                      size_t len);
nx_sid nx_sched_reduce3(nx_sched *s, void *dst, const void *a, const void *b, size_t count);
nx_sid nx_sched_reduce(nx_sched *s, void *dst, const void *src, size_t count);
nx_sid nx_sched_copy(nx_sched *s, void *dst, const void *src, size_t bytes);
nx_sid nx_sched_fill_identity(nx_sched *s, void *dst, size_t count);
nx_sid nx_sched_call(nx_sched *s, int (*fn)(void *arg), void *arg);
/* dst /= n, count elements of the schedule's dtype (nx_avg_div). */
nx_sid nx_sched_avg(nx_sched *s, void *dst, size_t count, uint32_t n);
/* Every later step waits for id (0: nothing). */
void nx_sched_wait(nx_sched *s, nx_sid id);
/* Every later step waits for every step added so far (messages never waited
 * for included): what a step that rewrites an output buffer needs. */
void nx_sched_wait_all(nx_sched *s);

/* Ends building and issues the first steps. 0, or NOMEM. */
int nx_sched_start(nx_sched *s, const nx_sched_ops *ops, void *ctx);
/* Reaps finished messages and issues the steps they release. Returns 1
 * when the schedule is over (every step done, or an error and nothing
 * still posted; the result in s->rc), 0 while it waits. */
int nx_sched_advance(nx_sched *s);

#endif
