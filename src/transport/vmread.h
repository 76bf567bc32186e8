/* Same-host copy link: one kernel copy from another process's memory
 * (process_vm_readv), for the rendezvous (runtime/rndv.c) and the
 * communicator segment's single copy (runtime/cseg.c). Any thread. */
#ifndef NX_TRANSPORT_VMREAD_H
#define NX_TRANSPORT_VMREAD_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Reads total bytes, the concatenation of remote[0..nr) in process pid, into
 * local[0..nl) (which holds at least total). The kernel checks every address
 * (a peer's declared address that is not readable fails, never faults us).
 * 0, or -1 with errno set (ESRCH: the process is gone; EFAULT also for a
 * read that stops short). */
int nx_vm_read(pid_t pid, const struct iovec *local, size_t nl, const struct iovec *remote,
               size_t nr, size_t total);

#endif
