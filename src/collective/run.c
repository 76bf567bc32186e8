/* Runs a collective's schedule over the runtime port without a thread of
 * its own. The schedule is advanced first on the calling thread (its first
 * sends leave at once), then whenever one of its messages completes: the
 * completion (under engine locks) only queues the run as deferred work, and
 * the next thread that drives the engine (the progress thread, or an
 * application thread waiting in nx_req_wait, typically the caller of a
 * blocking collective) advances it outside the locks. A timer re-advances a
 * run whose messages stall, so the no-progress limit applies even when
 * nobody waits. The last step ends the collective and completes its
 * request. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "collective/coll.h"
#include "runtime/comm.h"
#include "runtime/request.h"

typedef struct nx_run {
  nx_job j; /* first: the job outlives its call */
  nx_work kick, timer;
  atomic_int refs;    /* owner (until over) + kick queued + timer armed/queued */
  atomic_int pending; /* drive requests; the one taking it from 0 runs */
  nx_ep *ep;
  nexar_request *req;
  int over;
  atomic_int timer_set; /* step armed the timer; cleared when it fires */
  nx_dstage *dev;       /* device staging (NULL: host buffers) */
  nx_work dpoll;        /* re-advances while device events are pending */
  atomic_int dpoll_set;
  uint64_t now, wake;
  char why[512];
} nx_run;

static void unref(nx_run *u) {
  if (atomic_fetch_sub(&u->refs, 1) != 1) return;
  free(u->j.bucket_copy);
  free(u->j.vmem);
  free(u);
}

/* ------------------------------------------------------ the port as ops */

static int op_post(void *ctx, const nx_step *st, void **h) {
  nx_run *u = ctx;
  nx_creq *cr = NULL;
  int rc = st->kind == NX_ST_SEND
               ? nx_coll_isend(u->j.k, st->peer, st->round, st->seg, st->dst, st->len, &cr)
               : nx_coll_irecv(u->j.k, st->peer, st->round, st->seg, st->dst, st->len, &cr);
  *h = cr;
  return rc;
}

static int op_reap(void *ctx, void *h, int *rc) {
  nx_run *u = ctx;
  return nx_coll_reap(u->j.k, h, u->now, &u->wake, rc);
}

static void op_fail(void *ctx, int rc) {
  nx_run *u = ctx;
  snprintf(u->why, sizeof u->why, "%s", nexar_last_error());
  nx_coll_fail(u->j.k, rc);
}

static int op_gate(void *ctx, nx_step *st) {
  nx_run *u = ctx;
  return nx_dstage_gate(u->dev, &u->j.sched, st);
}

static void op_finish(void *ctx, const nx_step *st) {
  nx_run *u = ctx;
  nx_dstage_finish(u->dev, &u->j.sched, st);
}

static const nx_sched_ops port_ops = {op_post, op_reap, op_fail, NULL, NULL};
static const nx_sched_ops dev_ops = {op_post, op_reap, op_fail, op_gate, op_finish};

/* ------------------------------------------------------------- driving */

static int end_job(nx_job *j, int rc);

static void complete(nx_run *u) {
  u->over = 1;
  if (nx_ep_undefer(u->ep, &u->timer)) atomic_fetch_sub(&u->refs, 1); /* never the last */
  if (nx_ep_undefer(u->ep, &u->dpoll)) atomic_fetch_sub(&u->refs, 1);
  int rc = u->j.sched.rc;
  if (u->dev) {
    if (!rc && nx_dstage_rc(u->dev)) {
      rc = nx_dstage_rc(u->dev);
      snprintf(u->why, sizeof u->why, "%s", nx_dstage_why(u->dev));
    }
    if (nx_dstage_poll(u->dev, 1, u->now, NULL) == 0)
      nx_dstage_free(u->dev); /* else: stuck, leaked */
    u->dev = NULL;
  }
  if (rc) nx_set_error_text(u->why);
  rc = end_job(&u->j, rc);
  nx_sched_free(&u->j.sched);
  nexar_request *req = u->req;
  u->req = NULL;
  nx_req_complete(req, rc, rc ? nexar_last_error() : NULL);
  unref(u); /* the owner's; whoever drives holds another until it returns */
}

static void step(nx_run *u) {
  if (u->over) return;
  u->now = nx_now_ns();
  u->wake = UINT64_MAX;
  if (u->dev) nx_dstage_poll(u->dev, u->j.sched.failed, u->now, NULL);
  int over = nx_sched_advance(&u->j.sched);
  if (u->dev) {
    /* The run ends only when no device copy is outstanding. An event found
     * done here may open a gate the advance just stopped at, and its
     * completion wakes no one: advance again until no load completes (a
     * step held only by its own segments would otherwise wait forever). */
    int loaded = 0;
    int left = nx_dstage_poll(u->dev, over || u->j.sched.failed, u->now, &loaded);
    while (loaded && !over) {
      over = nx_sched_advance(&u->j.sched);
      left = nx_dstage_poll(u->dev, over || u->j.sched.failed, u->now, &loaded);
    }
    if (left && over && nx_dstage_stuck(u->dev, u->now)) left = 0;
    if (left && nx_dstage_async(u->dev) && !atomic_exchange(&u->dpoll_set, 1)) {
      atomic_fetch_add(&u->refs, 1);
      if (!nx_ep_defer_at(u->ep, &u->dpoll, u->now + 50000)) atomic_fetch_sub(&u->refs, 1);
    }
    if (left && over) return; /* a copy's end advances us again */
  }
  if (over) {
    complete(u);
    return;
  }
  /* Arm once: a timer that fires early (the deadline moved on as bytes
   * arrived) just re-advances and re-arms; re-arming on every step would
   * cost a lock per message. */
  if (u->wake == UINT64_MAX || atomic_exchange(&u->timer_set, 1)) return;
  atomic_fetch_add(&u->refs, 1);
  if (!nx_ep_defer_at(u->ep, &u->timer, u->wake)) atomic_fetch_sub(&u->refs, 1);
}

/* One thread at a time advances a run; a request that arrives meanwhile
 * makes that thread go round once more. */
static void drive(nx_run *u) {
  if (atomic_fetch_add(&u->pending, 1) != 0) return;
  int seen;
  do {
    seen = atomic_load(&u->pending);
    step(u);
  } while (atomic_fetch_sub(&u->pending, seen) != seen);
}

static void on_kick(nx_work *w) {
  nx_run *u = (nx_run *)((char *)w - offsetof(nx_run, kick));
  drive(u);
  unref(u);
}

static void on_dpoll(nx_work *w) {
  nx_run *u = (nx_run *)((char *)w - offsetof(nx_run, dpoll));
  atomic_store(&u->dpoll_set, 0);
  drive(u);
  unref(u);
}

static void on_timer(nx_work *w) {
  nx_run *u = (nx_run *)((char *)w - offsetof(nx_run, timer));
  atomic_store(&u->timer_set, 0);
  drive(u);
  unref(u);
}

/* A message of the run completed (any thread, engine locks possibly held;
 * inside the request's lock, so the run outlives this call). */
static void on_done(void *arg) {
  nx_run *u = arg;
  /* A thread is advancing the run right now (typically the one whose send
   * just completed at post time): it goes round once more, no queueing. */
  int p = atomic_load(&u->pending);
  while (p > 0)
    if (atomic_compare_exchange_weak(&u->pending, &p, p + 1)) return;
  atomic_fetch_add(&u->refs, 1);
  if (!nx_ep_defer(u->ep, &u->kick)) atomic_fetch_sub(&u->refs, 1);
}

/* A device copy thread's references and its wake-up (devstage.c). */
static void dev_wake(void *arg) {
  on_done(arg);
}
static void dev_hold(void *arg) {
  atomic_fetch_add(&((nx_run *)arg)->refs, 1);
}
static void dev_drop(void *arg) {
  unref(arg);
}

/* ------------------------------------------------------------ the calls */

/* Ends the collective (reporting rc to the peers), then frees the scratch:
 * only nx_coll_end guarantees no receive still targets it. */
static int end_job(nx_job *j, int rc) {
  /* a segment collective runs on the caller's thread, with no request */
  rc = !rc && j->seg ? nx_coll_end_quick(j->k) : nx_coll_end(j->k, rc);
  j->k = NULL;
  for (size_t i = 0; i < NX_JOB_SCRATCH; i++) {
    if (!j->scratch[i]) continue; /* most calls have none: no call to free */
    if (j->scratch_cap[i] >= NX_SCRATCH_KEEP_MIN)
      nx_comm_scratch_give(j->c, j->scratch[i], j->scratch_cap[i]);
    else
      free(j->scratch[i]);
    j->scratch[i] = NULL;
  }
  if (rc && j->kind == NX_COLL_SPLIT && j->out) *j->out = NULL;
  return rc;
}

int nx_run_new(const nx_job *j, nx_job **out) {
  *out = NULL;
  nx_run *u = calloc(1, sizeof *u);
  if (!u) return NEXAR_ERR_NOMEM;
  u->j = *j;
  if (j->nbuckets) {
    u->j.bucket_copy = calloc(j->nbuckets, sizeof(nexar_bucket));
    if (!u->j.bucket_copy) {
      free(u);
      return NEXAR_ERR_NOMEM;
    }
    memcpy(u->j.bucket_copy, j->buckets, j->nbuckets * sizeof(nexar_bucket));
    u->j.buckets = u->j.bucket_copy;
  }
  u->req = nx_req_new();
  if (!u->req) {
    free(u->j.bucket_copy);
    free(u);
    return NEXAR_ERR_NOMEM;
  }
  u->ep = j->c->ep;
  u->req->ep = u->ep; /* its waiter drives the engine, and so the run */
  atomic_init(&u->refs, 1);
  u->kick.fn = on_kick;
  u->timer.fn = on_timer;
  u->dpoll.fn = on_dpoll;
  *out = &u->j;
  return 0;
}

void nx_run_discard(nx_job *j) {
  nx_run *u = (nx_run *)j;
  nx_req_free(u->req);
  unref(u);
}

int nx_run_end_now(nx_job *j, int rc) {
  return end_job(j, rc);
}

nexar_request *nx_run_start(nx_job *j) {
  nx_run *u = (nx_run *)j;
  nexar_request *req = u->req;
  nx_coll_watch(j->k, on_done, u);
  nx_sched_init(&j->sched, j->dt, j->op);
  int rc = nx_job_build(j);
  if (!rc && !j->sched.nomem && j->ad) {
    nx_dstage_cbs cb = {dev_wake, dev_hold, dev_drop, u};
    rc = nx_dstage_new(j, &cb, &u->dev);
  }
  if (!rc && (rc = nx_sched_start(&j->sched, u->dev ? &dev_ops : &port_ops, u)) != 0)
    nx_fail(rc, "%s: out of memory for its schedule", nx_job_name(j));
  if (rc) {
    nx_dstage_free(u->dev); /* no copy started yet */
    u->dev = NULL;
    rc = end_job(j, rc);
    nx_sched_free(&j->sched);
    u->over = 1;
    u->req = NULL;
    nx_req_complete(req, rc, nexar_last_error());
    unref(u);
    return req;
  }
  atomic_fetch_add(&u->refs, 1); /* held by this call until drive returns */
  drive(u);
  unref(u);
  return req;
}
