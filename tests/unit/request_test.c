/* A second nexar_wait (or nexar_test) of a request that was already waited
 * and freed is undefined by contract; the library catches it while the memory
 * is not reused: the process aborts with a clear message (a death test, in a
 * child). Under AddressSanitizer, ASan reports the use after free first. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "runtime/request.h"

/* Under ASan or TSan the sanitizer reports the use after free first. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NX_ASAN 1
#endif
#endif

/* Runs twice(r) in a child after one good wait; returns its stderr. */
static void death(int use_test, const char *want) {
  char path[] = "/tmp/nexar_reqdeath_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    dup2(fd, 2);
    nexar_request *r = nx_req_new();
    if (!r) _exit(90);
    nx_req_complete(r, 0, NULL);
    if (nexar_wait(r) != 0) _exit(91); /* the one legal wait: frees r */
    int done = 0;
    if (use_test)
      nexar_test(r, &done); /* undefined: must abort */
    else
      nexar_wait(r);
    _exit(92); /* not caught */
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  char buf[8192] = "";
  lseek(fd, 0, SEEK_SET);
  ssize_t n = read(fd, buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = '\0';
  close(fd);
  unlink(path);
#ifdef NX_ASAN
  CHECK((WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 92)) &&
            strstr(buf, "heap-use-after-free"),
        "double wait under a sanitizer: status %#x, stderr %.400s", st, buf);
  (void)want;
#else
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "double wait: status %#x (stderr %.300s)", st,
        buf);
  CHECK(strstr(buf, want), "double wait: stderr lacks '%s': %.300s", want, buf);
#endif
}

int main(void) {
  /* the legal sequence works */
  nexar_request *r = nx_req_new();
  CHECK(r, "nx_req_new");
  int done = 0;
  CHECK(nexar_test(r, &done) == 0 && done == 0, "test pending");
  nx_req_complete(r, NEXAR_ERR_TIMEOUT, "x");
  CHECK(nexar_test(r, &done) == 0 && done == 1, "test done");
  CHECK(nexar_wait(r) == NEXAR_ERR_TIMEOUT, "wait");

  death(0, "nexar_wait: request already completed and freed (double wait)");
  death(1, "nexar_test: request already completed and freed (double wait)");
  printf("request_test ok\n");
  return 0;
}
