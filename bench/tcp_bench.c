/* The TCP baseline for p2p_bench, measured the same way on the same machine:
 *   tcp_bench pingpong 64 20000     round trip of a 64-byte message
 *   tcp_bench bw 67108864 8         one-way bandwidth of 64 MiB messages
 * Two processes (fork) over loopback, TCP_NODELAY, blocking sockets. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int xfer(int fd, char *p, size_t n, int out) {
  while (n) {
    ssize_t k = out ? write(fd, p, n) : read(fd, p, n);
    if (k <= 0) return -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "pingpong";
  size_t bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : 64;
  long iters = argc > 3 ? strtol(argv[3], NULL, 10) : 10000;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1) ||
      getsockname(ls, (struct sockaddr *)&a, &al))
    return 1;
  int one = 1;
  char *buf = malloc(bytes ? bytes : 1);
  if (!buf) return 1;
  memset(buf, 1, bytes);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) return 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    long total = !strcmp(mode, "pingpong") ? iters + iters / 10 + 10 : iters;
    for (long i = 0; i < total; i++) {
      if (xfer(fd, buf, bytes, 0)) return 1;
      if (!strcmp(mode, "pingpong") && xfer(fd, buf, bytes, 1)) return 1;
    }
    char ack = 0;
    if (strcmp(mode, "pingpong") && xfer(fd, &ack, 1, 1)) return 1;
    return 0;
  }
  int fd = accept(ls, NULL, NULL);
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (!strcmp(mode, "pingpong")) {
    long warm = iters / 10 + 10;
    double t0 = 0;
    for (long i = 0; i < warm + iters; i++) {
      if (i == warm) t0 = now_s();
      if (xfer(fd, buf, bytes, 1) || xfer(fd, buf, bytes, 0)) return 1;
    }
    printf("tcp pingpong %zu B: round trip %.2f us (%ld iterations)\n", bytes,
           (now_s() - t0) / iters * 1e6, iters);
  } else {
    double t0 = now_s();
    for (long i = 0; i < iters; i++)
      if (xfer(fd, buf, bytes, 1)) return 1;
    char ack;
    if (xfer(fd, &ack, 1, 0)) return 1;
    double dt = now_s() - t0;
    printf("tcp bandwidth %zu B x %ld: %.3f GB/s\n", bytes, iters,
           (double)bytes * (double)iters / dt / 1e9);
  }
  int st;
  waitpid(pid, &st, 0);
  return 0;
}
