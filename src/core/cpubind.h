/* Binding a rank's thread to its share of this host's CPUs (NEXAR_CPU_BIND),
 * as mpirun binds ranks by default. On a host with a CPU per rank, an
 * unbound rank that polls often shares one CPU with the peer it waits for
 * (a woken sleeper goes where its waker ran): measured at n = 2 processes
 * on 2 CPUs, 8-byte all_reduce and barrier 4-6 us unbound against 0.4 us
 * bound. Only the thread that formed the world is bound; the library starts
 * its own threads with nx_thread_create, which gives them the set from
 * before any binding, so the progress thread and copy workers may run on any
 * CPU whichever thread starts them. */
#ifndef NX_CORE_CPUBIND_H
#define NX_CORE_CPUBIND_H

#include <pthread.h>
#include <stdint.h>

/* Share `index` (of `nlocal` ranks on this host) of `ncpu` CPUs, as a first
 * position in the allowed set and a count: contiguous equal blocks while
 * there are enough CPUs, one CPU each (wrapping) beyond. Pure. */
void nx_cpu_share(uint32_t ncpu, uint32_t nlocal, uint32_t index, uint32_t *first, uint32_t *count);

/* Binds the calling thread to its share (mode: NX_BIND_* of core/config.h).
 * auto binds only when every rank of the world is on this host and nothing
 * restricted the thread already (its allowed set is every online CPU: a
 * launcher, taskset or a cpuset decided), with more ranks than CPUs too
 * (one CPU each, wrapping: left unbound, the scheduler put 4 ranks on 2
 * CPUs as 3 + 1 in about half the runs, and an 8-byte all_to_all took 16-17
 * us instead of 9); core binds to the share among the ranks on this host in
 * any case. Returns the number of CPUs bound to (0: left alone). Never
 * fails: a binding the kernel refuses is logged and skipped. */
int nx_cpu_bind_self(int mode, uint32_t nlocal, uint32_t index, int whole_world_local);

/* 1 if the calling thread was bound (nx_cpu_bind_self) to a share of the
 * host's CPUs that no other local rank's share overlaps: no rank it waits
 * for can be scheduled on its CPUs. */
int nx_cpu_bound_alone(void);

/* pthread_create for the library's threads: once a thread was bound, the
 * new one gets the CPUs from before that binding, whichever thread starts
 * it (attr may be NULL; a given attr gets that affinity set). */
int nx_thread_create(pthread_t *t, pthread_attr_t *attr, void *(*fn)(void *), void *arg);

/* Switches the calling thread to SCHED_BATCH (on) or back to SCHED_OTHER:
 * woken, it then waits for the next tick or an idle CPU instead of
 * preempting the running thread. Only a thread that began as SCHED_OTHER
 * switches (another policy was someone's choice); after a failure it stops
 * trying. Threads it starts meanwhile (nx_thread_create) get SCHED_OTHER.
 * 0, or -1 if the kernel refused. */
int nx_thread_batch(int on);

#endif
