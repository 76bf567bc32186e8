/*
 * Idle-connection holder for the seed flood test: keeps N TCP connections to
 * 127.0.0.1:PORT open and silent, reopening each one the far end closes, for
 * SECONDS (or until killed). Loopback only.
 *
 *   seed_holder PORT N SECONDS
 *
 * Prints "holding N" once N are open at the same time (or "reached K" after
 * 10 s if it never gets there), and at the end how many connections the far
 * end closed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;
static void on_term(int sig) {
  (void)sig;
  g_stop = 1;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int dial(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: seed_holder PORT N SECONDS\n");
    return 2;
  }
  long port = strtol(argv[1], NULL, 10), n = strtol(argv[2], NULL, 10);
  double secs = strtod(argv[3], NULL);
  if (port <= 0 || port > 65535 || n <= 0 || n > 100000) return 2;
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)n + 64) {
    rl.rlim_cur = rl.rlim_max < (rlim_t)n + 64 ? rl.rlim_max : (rlim_t)n + 64;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  struct pollfd *p = calloc((size_t)n, sizeof *p);
  if (!p) return 1;
  for (long i = 0; i < n; i++)
    p[i].fd = -1;
  long closed = 0, most = 0;
  int said = 0;
  double t0 = now_s(), end = t0 + secs;
  signal(SIGTERM, on_term);
  while (!g_stop && now_s() < end) {
    long open_now = 0, budget = said ? 50 : n; /* reopen at most 50 per pass (~2,500/s) */
    for (long i = 0; i < n; i++) {
      if (p[i].fd < 0 && budget-- > 0) p[i].fd = dial((uint16_t)port), p[i].events = POLLIN;
      open_now += p[i].fd >= 0;
    }
    if (open_now > most) most = open_now;
    if (!said && open_now == n) {
      printf("holding %ld\n", n);
      fflush(stdout);
      said = 1;
    } else if (!said && now_s() - t0 > 10) {
      printf("reached %ld\n", most);
      fflush(stdout);
      said = 1;
    }
    if (poll(p, (nfds_t)n, 20) < 0 && errno != EINTR) break;
    for (long i = 0; i < n; i++)
      if (p[i].fd >= 0 && p[i].revents) {
        close(p[i].fd); /* the seed closed it (it never sends us anything else) */
        p[i].fd = -1;
        p[i].revents = 0;
        closed++;
      }
  }
  printf("done: at most %ld open at once, %ld closed by the far end\n", most, closed);
  for (long i = 0; i < n; i++)
    if (p[i].fd >= 0) close(p[i].fd);
  free(p);
  return 0;
}
