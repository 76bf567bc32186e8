/* Device adapter calls (nexar_device_adapter) and the copy threads that run
 * a synchronous adapter's copies while the network progresses. The staging
 * of collective schedules is collective/devstage.c; p2p stages whole
 * messages with nx_dev_copy. Thread-safe. */
#ifndef NX_RUNTIME_DEVCOPY_H
#define NX_RUNTIME_DEVCOPY_H

#include <stddef.h>

#include "nexar/nexar.h"

/* 1 when a's asynchronous copies are usable (struct_size covers them and
 * all four of to_host_async, from_host_async, event_query, event_release
 * are set). */
int nx_dev_async(const nexar_device_adapter *a);
/* Starts one copy of len bytes: to the device (to_dev) or to the host. A
 * synchronous adapter copies now (*ev = NULL); an asynchronous one returns
 * its event in *ev. 0, or NEXAR_ERR_IO (text set, naming what). */
int nx_dev_issue(const nexar_device_adapter *a, int to_dev, void *dst, const void *src, size_t len,
                 void **ev, const char *what);
/* 1 once ev is done (and released), 0 not yet; NEXAR_ERR_IO (released) if
 * the copy failed. Never blocks. */
int nx_dev_query(const nexar_device_adapter *a, void *ev, const char *what);
/* Blocking copy in pieces of at most seg bytes (each piece a callback);
 * an asynchronous adapter's events are polled until done. 0 or IO. */
int nx_dev_copy(const nexar_device_adapter *a, int to_dev, void *dst, const void *src, size_t len,
                size_t seg, const char *what);
/* Host staging memory: the adapter's pinned memory when it has host_alloc,
 * else malloc. NULL when out of memory. Free with nx_dev_host_free. */
void *nx_dev_host_alloc(const nexar_device_adapter *a, size_t len);
void nx_dev_host_free(const nexar_device_adapter *a, void *p);
/* Runs fn(arg) on one of the process's copy threads (at most `threads`,
 * started on demand, exiting when idle). 0 or NOMEM. */
int nx_dev_submit(unsigned threads, void (*fn)(void *arg), void *arg);

#endif
