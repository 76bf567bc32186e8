/*
 * seed_worker: a real multi-process world formed through a seed.
 *
 * A seed is a small discovery service: workers contact it, it hands out ranks
 * and peer addresses, and once every rank has been welcomed the workers talk
 * to each other directly. Workers must present the seed's cluster token.
 *
 * Two ways to run this program:
 *
 *   ./example_seed_worker [N]
 *       Launcher mode (N defaults to 4). The parent forks N worker processes,
 *       then starts a seed on 127.0.0.1 (any free port) and tells each worker
 *       the seed's address and token through a pipe. Workers call
 *       nexar_join(addr, cfg) with cfg.cluster_token set. The parent waits
 *       for the world to form and for every worker, and fails if any did.
 *       (Workers are forked before the seed exists so that no process forks
 *       while library threads are running.)
 *
 *   NEXAR_SEED_ADDR=host:port NEXAR_CLUSTER_TOKEN=... ./example_seed_worker
 *       Worker mode, as under `nexar-run -n 4 -- ./example_seed_worker` or with
 *       a standalone `nexar-seed`: nexar_init_from_env() joins as the NEXAR_*
 *       variables say.
 *
 * Each worker passes a value around a ring (rank 0 -> 1 -> ... -> 0, every
 * rank adding rank + 1), checks the total on rank 0, and ends with a barrier.
 */
#include <nexar/nexar.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_WORLD 4
#define MAX_WORLD 64
#define TAG_RING 7
#define FORM_TIMEOUT_MS 60000

/* What every worker does once it has joined; 0 on success. */
static int worker_body(nexar_client *c) {
  uint32_t me = nexar_rank(c), n = nexar_world_size(c);
  uint32_t right = (me + 1) % n, left = (me + n - 1) % n;
  uint64_t value = 0;
  int rc;
  if (me == 0) {
    value = 1; /* rank 0 contributes 0 + 1 */
    rc = nexar_send(c, &value, sizeof value, right, TAG_RING);
    if (rc == NEXAR_OK) rc = nexar_recv(c, &value, sizeof value, left, TAG_RING);
  } else {
    rc = nexar_recv(c, &value, sizeof value, left, TAG_RING);
    value += me + 1;
    if (rc == NEXAR_OK) rc = nexar_send(c, &value, sizeof value, right, TAG_RING);
  }
  if (rc != NEXAR_OK) {
    fprintf(stderr, "rank %u: ring failed: %s (%s)\n", me, nexar_strerror(rc), nexar_last_error());
    return 1;
  }
  uint64_t expected = (uint64_t)n * (n + 1) / 2; /* 1 + 2 + ... + n */
  if (me == 0) {
    if (value != expected) {
      fprintf(stderr, "rank 0: ring total %llu, expected %llu\n", (unsigned long long)value,
              (unsigned long long)expected);
      return 1;
    }
    printf("rank 0: ring total %llu ok\n", (unsigned long long)value);
  }
  rc = nexar_barrier(c);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "rank %u: barrier failed: %s (%s)\n", me, nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  printf("rank %u/%u: done (pid %ld)\n", me, n, (long)getpid());
  fflush(stdout);
  return 0;
}

/* Worker mode: join as the environment says (NEXAR_SEED_ADDR, token, rank). */
static int run_from_env(void) {
  nexar_client *c = NULL;
  int rc = nexar_init_from_env(&c);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "worker %ld: cannot join: %s (%s)\n", (long)getpid(), nexar_strerror(rc),
            nexar_last_error());
    return 1;
  }
  int failed = worker_body(c);
  nexar_client_del(c);
  return failed;
}

/* Reads everything from fd until end of file into buf (NUL-terminated). */
static int read_all(int fd, char *buf, size_t cap) {
  size_t len = 0;
  for (;;) {
    if (len + 1 >= cap) return -1;
    ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    len += (size_t)r;
  }
  buf[len] = '\0';
  return 0;
}

/* A forked worker in launcher mode: gets "addr\ntoken\n" from the parent,
 * then joins with the token in its config. */
static int forked_worker(int fd) {
  char msg[1024];
  int rc = read_all(fd, msg, sizeof msg);
  close(fd);
  char *nl1 = rc == 0 ? strchr(msg, '\n') : NULL;
  char *nl2 = nl1 ? strchr(nl1 + 1, '\n') : NULL;
  if (nl2 == NULL) return 1; /* the parent gave up before starting the seed */
  *nl1 = *nl2 = '\0';
  const char *seed_addr = msg, *token = nl1 + 1;

  nexar_config cfg;
  rc = nexar_config_default(&cfg);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "worker %ld: %s\n", (long)getpid(), nexar_last_error());
    return 1;
  }
  cfg.cluster_token = token; /* the seed refuses workers without it */
  nexar_client *c = NULL;
  rc = nexar_join(&c, seed_addr, &cfg);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "worker %ld: cannot join %s: %s (%s)\n", (long)getpid(), seed_addr,
            nexar_strerror(rc), nexar_last_error());
    return 1;
  }
  int failed = worker_body(c);
  nexar_client_del(c);
  return failed;
}

/* Launcher mode. */
static int run_launcher(uint32_t n) {
  pid_t pids[MAX_WORLD];
  int pipes[MAX_WORLD];
  uint32_t forked = 0;
  int failed = 0;

  /* 1. Fork the workers while this process is still single-threaded. */
  fflush(stdout);
  fflush(stderr);
  for (; forked < n; forked++) {
    int fds[2];
    if (pipe(fds) != 0) {
      perror("pipe");
      failed = 1;
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      close(fds[0]);
      close(fds[1]);
      failed = 1;
      break;
    }
    if (pid == 0) {
      close(fds[1]);
      for (uint32_t k = 0; k < forked; k++)
        close(pipes[k]);
      exit(forked_worker(fds[0]));
    }
    close(fds[0]);
    pids[forked] = pid;
    pipes[forked] = fds[1];
  }

  /* 2. Start the seed: NULL config means defaults plus NEXAR_* variables; the
   * token is NEXAR_CLUSTER_TOKEN if set, else drawn at random. */
  nexar_seed *seed = NULL;
  if (!failed) {
    int rc = nexar_seed_new(&seed, "127.0.0.1:0", n, NULL);
    if (rc != NEXAR_OK) {
      fprintf(stderr, "launcher: nexar_seed_new: %s (%s)\n", nexar_strerror(rc),
              nexar_last_error());
      failed = 1;
    }
  }

  /* 3. Tell each worker where the seed is and what the token is. Closing a
   * pipe without writing tells a worker to give up. */
  signal(SIGPIPE, SIG_IGN);
  for (uint32_t i = 0; i < forked; i++) {
    if (seed != NULL) {
      char msg[1024];
      int len =
          snprintf(msg, sizeof msg, "%s\n%s\n", nexar_seed_addr(seed), nexar_seed_token(seed));
      if (len <= 0 || (size_t)len >= sizeof msg || write(pipes[i], msg, (size_t)len) != len) {
        fprintf(stderr, "launcher: cannot reach worker %u\n", i);
        failed = 1;
      }
    }
    close(pipes[i]);
  }
  if (seed != NULL) printf("launcher: seed on %s, world of %u\n", nexar_seed_addr(seed), n);

  /* 4. Wait for the world to form, and for every worker. */
  if (seed != NULL && !failed) {
    int rc = nexar_seed_wait(seed, FORM_TIMEOUT_MS);
    if (rc != NEXAR_OK) {
      fprintf(stderr, "launcher: the world did not form: %s (%s)\n", nexar_strerror(rc),
              nexar_last_error());
      failed = 1;
    } else {
      printf("launcher: world formed\n");
    }
    fflush(stdout);
  }
  if (failed)
    for (uint32_t i = 0; i < forked; i++)
      kill(pids[i], SIGTERM);
  for (uint32_t i = 0; i < forked; i++) {
    int st = 0;
    while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (!failed)
        fprintf(stderr, "launcher: worker process %u (pid %ld) failed\n", i, (long)pids[i]);
      failed = 1;
    }
  }
  if (seed != NULL) nexar_seed_del(seed); /* after the workers: nothing needs it now */
  printf("seed_worker: %s\n", failed ? "FAILED" : "all workers succeeded");
  return failed;
}

int main(int argc, char **argv) {
  if (getenv("NEXAR_SEED_ADDR") != NULL || getenv("MASTER_ADDR") != NULL) return run_from_env();

  uint32_t n = DEFAULT_WORLD;
  if (argc > 1) {
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(argv[1], &end, 10);
    if (errno != 0 || end == argv[1] || *end != '\0' || v < 1 || v > MAX_WORLD) {
      fprintf(stderr, "usage: %s [N]   (1 <= N <= %d; or run under nexar-run)\n", argv[0],
              MAX_WORLD);
      return 2;
    }
    n = (uint32_t)v;
  }
  return run_launcher(n);
}
