/* process_vm_readv in bounded steps (transport/vmread.h). */
#include "transport/vmread.h"

#include <errno.h>

#include "core/common.h"

/* Most iovec entries one step passes (the kernel takes up to IOV_MAX). */
#define NX_VM_IOV 64
/* Bytes per call: the kernel pins the pages of a whole call first, and 4 MiB
 * in one call measured 25% slower than in four of 1 MiB. */
#define NX_VM_STEP ((size_t)1 << 20)

/* The part of in[0..n) after its first skip bytes, at most most bytes and
 * NX_VM_IOV entries, as out[]: the entry count. */
static size_t window(struct iovec *out, const struct iovec *in, size_t n, size_t skip,
                     size_t most) {
  size_t k = 0;
  for (size_t i = 0; i < n && k < NX_VM_IOV && most; i++) {
    if (skip >= in[i].iov_len) {
      skip -= in[i].iov_len;
      continue;
    }
    size_t len = NX_MIN(in[i].iov_len - skip, most);
    out[k].iov_base = (uint8_t *)in[i].iov_base + skip;
    out[k++].iov_len = len;
    most -= len;
    skip = 0;
  }
  return k;
}

int nx_vm_read(pid_t pid, const struct iovec *local, size_t nl, const struct iovec *remote,
               size_t nr, size_t total) {
  size_t done = 0;
  while (done < total) { /* a partial read continues where it stopped */
    struct iovec l[NX_VM_IOV], r[NX_VM_IOV];
    size_t step = NX_MIN(total - done, NX_VM_STEP);
    size_t nl2 = window(l, local, nl, done, step), nr2 = window(r, remote, nr, done, step);
    if (!nl2 || !nr2) {
      errno = EFAULT; /* the lists hold less than total */
      return -1;
    }
    ssize_t k = process_vm_readv(pid, l, nl2, r, nr2, 0);
    if (k <= 0) {
      if (k == 0) errno = EFAULT;
      return -1;
    }
    done += (size_t)k;
  }
  return 0;
}
