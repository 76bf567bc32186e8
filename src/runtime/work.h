/* Deferred work: functions the engine runs outside its lock on a thread that
 * drives it (the progress thread, or an application thread waiting in
 * nx_req_wait), and timers that queue such work at a given time. Collective
 * schedules advance this way: a message completion (under the endpoint lock)
 * queues its schedule, and the next driver runs it, so no collective needs a
 * thread of its own. */
#ifndef NX_RUNTIME_WORK_H
#define NX_RUNTIME_WORK_H

#include <stdint.h>

typedef struct nx_ep nx_ep;
typedef struct nx_work nx_work;

struct nx_work {
  nx_work *next;          /* run queue */
  nx_work *tnext;         /* timer list */
  void (*fn)(nx_work *w); /* runs without any engine lock held */
  uint64_t due_ns;        /* timer */
  int queued;             /* on the run queue (under the endpoint's work lock) */
  int armed;              /* on the timer list */
};

/* Queues w to run soon (once, however often it is queued before it runs),
 * waking a driver. Safe from any thread, with or without the endpoint lock.
 * Returns 1 if w was queued now, 0 if it already was. */
int nx_ep_defer(nx_ep *ep, nx_work *w);
/* Arms (or re-arms) w's timer: it is queued at due_ns. 1 if it was not armed
 * (0 also when w is queued already: it runs soon and can re-arm then), so a
 * timer holds at most one reference to what w belongs to. */
int nx_ep_defer_at(nx_ep *ep, nx_work *w, uint64_t due_ns);
/* Disarms w's timer; 1 if it was armed. A queued w still runs. */
int nx_ep_undefer(nx_ep *ep, nx_work *w);
/* Runs the queued work and due timers (without ep->mu); returns how many
 * ran. Does nothing when called from inside deferred work. */
int nx_ep_run_deferred(nx_ep *ep);
/* The same, given a recent time (a spinning waiter's, which reads the clock
 * every few passes only) to decide whether a timer is due. */
int nx_ep_run_deferred_at(nx_ep *ep, uint64_t now);
/* The earliest armed timer (UINT64_MAX if none). */
uint64_t nx_ep_next_timer(nx_ep *ep);
/* Marks the calling thread as a driver of ep (it runs deferred work itself,
 * so queuing from it wakes nobody); returns the previous mark, to restore. */
nx_ep *nx_ep_set_driver(nx_ep *ep);

#endif
