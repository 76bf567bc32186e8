/* transport/vmread: reads across iovec lists cut at different places, with
 * more entries than one step passes and more bytes than one step reads; a
 * declared address that is not readable, lists shorter than the length and
 * a process that is gone fail with errno set, never a fault. */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "transport/vmread.h"

#define TOTAL ((size_t)3 * 1024 * 1024 + 12345)

int main(void) {
  uint8_t *src = malloc(TOTAL), *dst = malloc(TOTAL);
  CHECK(src && dst, "malloc");
  for (size_t i = 0; i < TOTAL; i++)
    src[i] = (uint8_t)(i * 131 + (i >> 13));
  /* remote: three uneven pieces; local: 150 pieces (past one step's 64) */
  struct iovec r[3] = {{src, 1000}, {src + 1000, 2u << 20}, {src + 1000 + (2u << 20), 0}};
  r[2].iov_len = TOTAL - r[0].iov_len - r[1].iov_len;
  struct iovec l[150];
  size_t at = 0;
  for (int i = 0; i < 150; i++) {
    size_t len = i == 149 ? TOTAL - at : 7 + (size_t)i * 331;
    l[i] = (struct iovec){dst + at, len};
    at += len;
  }
  memset(dst, 0, TOTAL);
  CHECK(nx_vm_read(getpid(), l, 150, r, 3, TOTAL) == 0, "read: %s", strerror(errno));
  CHECK(memcmp(src, dst, TOTAL) == 0, "bytes differ");

  /* an unmapped address a peer might declare */
  uint8_t *hole = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(hole != MAP_FAILED, "mmap");
  struct iovec bad = {hole, 4096}, one = {dst, 4096};
  errno = 0;
  CHECK(nx_vm_read(getpid(), &one, 1, &bad, 1, 4096) == -1 && errno == EFAULT,
        "unreadable address: errno %d", errno);
  /* lists that hold less than the length asked for */
  struct iovec small = {src, 100};
  errno = 0;
  CHECK(nx_vm_read(getpid(), &one, 1, &small, 1, 4096) == -1 && errno == EFAULT,
        "short list: errno %d", errno);
  /* a process that is gone */
  pid_t child = fork();
  CHECK(child >= 0, "fork");
  if (child == 0) _exit(0);
  CHECK(waitpid(child, NULL, 0) == child, "waitpid");
  errno = 0;
  CHECK(nx_vm_read(child, &one, 1, &small, 1, 100) == -1 && errno == ESRCH,
        "gone process: errno %d", errno);
  munmap(hole, 4096);
  free(src);
  free(dst);
  printf("vmread: ok\n");
  return 0;
}
