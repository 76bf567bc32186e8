/* Deferred work and timers (see work.h). */
#include "runtime/work.h"

#include <stdatomic.h>
#include <unistd.h>

#include "runtime/engine.h"

static _Thread_local nx_ep *tls_driver;
static _Thread_local int tls_in_work;

nx_ep *nx_ep_set_driver(nx_ep *ep) {
  nx_ep *prev = tls_driver;
  tls_driver = ep;
  return prev;
}

static void wake(nx_ep *ep) {
  if (tls_driver == ep) return; /* this thread runs the queue before it sleeps */
  uint64_t one = 1;
  /* a waiting application thread sleeps on wfd, the progress thread on evfd */
  ssize_t k = write(atomic_load(&ep->spinners) > 0 ? ep->wfd : ep->evfd, &one, sizeof one);
  (void)k;
}

/* Appends w to the run queue unless it is there; 1 if appended. */
static int enqueue_locked(nx_ep *ep, nx_work *w) {
  if (w->queued) return 0;
  w->queued = 1;
  w->next = NULL;
  if (ep->work_tail)
    ep->work_tail->next = w;
  else
    ep->work_head = w;
  ep->work_tail = w;
  atomic_fetch_add(&ep->work_n, 1);
  return 1;
}

int nx_ep_defer(nx_ep *ep, nx_work *w) {
  pthread_mutex_lock(&ep->work_mu);
  int now = enqueue_locked(ep, w);
  pthread_mutex_unlock(&ep->work_mu);
  if (now) wake(ep);
  return now;
}

static void timer_min_locked(nx_ep *ep) {
  uint64_t m = UINT64_MAX;
  for (nx_work *t = ep->timers; t; t = t->tnext)
    if (t->due_ns < m) m = t->due_ns;
  atomic_store(&ep->timer_min, m);
}

int nx_ep_defer_at(nx_ep *ep, nx_work *w, uint64_t due_ns) {
  pthread_mutex_lock(&ep->work_mu);
  if (w->queued && !w->armed) { /* it runs soon anyway, and may re-arm then */
    pthread_mutex_unlock(&ep->work_mu);
    return 0;
  }
  int added = !w->armed;
  if (added) {
    w->armed = 1;
    w->tnext = ep->timers;
    ep->timers = w;
  }
  w->due_ns = due_ns;
  if (due_ns < atomic_load(&ep->timer_min)) atomic_store(&ep->timer_min, due_ns);
  pthread_mutex_unlock(&ep->work_mu);
  return added;
}

int nx_ep_undefer(nx_ep *ep, nx_work *w) {
  pthread_mutex_lock(&ep->work_mu);
  int was = w->armed;
  if (was) {
    for (nx_work **pp = &ep->timers; *pp; pp = &(*pp)->tnext)
      if (*pp == w) {
        *pp = w->tnext;
        break;
      }
    w->armed = 0;
    timer_min_locked(ep);
  }
  pthread_mutex_unlock(&ep->work_mu);
  return was;
}

uint64_t nx_ep_next_timer(nx_ep *ep) {
  return atomic_load(&ep->timer_min);
}

/* Moves due timers to the run queue (under work_mu). A timer that fires is
 * disarmed; the queued work owns what the timer owned. */
static void fire_timers_locked(nx_ep *ep, uint64_t now) {
  if (atomic_load(&ep->timer_min) > now) return;
  for (nx_work **pp = &ep->timers; *pp;) {
    nx_work *t = *pp;
    if (t->due_ns > now) {
      pp = &t->tnext;
      continue;
    }
    *pp = t->tnext;
    t->armed = 0;
    enqueue_locked(ep, t);
  }
  timer_min_locked(ep);
}

static int run_deferred(nx_ep *ep) {
  tls_in_work = 1;
  nx_ep *prev = tls_driver;
  tls_driver = ep;
  int ran = 0;
  pthread_mutex_lock(&ep->work_mu);
  fire_timers_locked(ep, nx_now_ns());
  /* only what is queued now: work that re-queues itself runs next time */
  int budget = atomic_load(&ep->work_n);
  while (ep->work_head && budget-- > 0) {
    nx_work *w = ep->work_head;
    ep->work_head = w->next;
    if (!ep->work_head) ep->work_tail = NULL;
    w->queued = 0;
    atomic_fetch_sub(&ep->work_n, 1);
    pthread_mutex_unlock(&ep->work_mu);
    w->fn(w); /* may free w */
    ran++;
    pthread_mutex_lock(&ep->work_mu);
  }
  pthread_mutex_unlock(&ep->work_mu);
  tls_driver = prev;
  tls_in_work = 0;
  return ran;
}

int nx_ep_run_deferred(nx_ep *ep) {
  if (tls_in_work) return 0;
  if (!atomic_load(&ep->work_n) && atomic_load(&ep->timer_min) > nx_now_ns()) return 0;
  return run_deferred(ep);
}

int nx_ep_run_deferred_at(nx_ep *ep, uint64_t now) {
  if (tls_in_work) return 0;
  if (!atomic_load(&ep->work_n) && atomic_load(&ep->timer_min) > now) return 0;
  return run_deferred(ep);
}
