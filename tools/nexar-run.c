/*
 * nexar-run: a local launcher.
 *
 *   nexar-run -n N [--timeout S] [--listen ADDR] -- program [args...]
 *   nexar-run -n N [--timeout S] --join HOST:PORT -- program [args...]
 *
 * Starts a seed in this process on 127.0.0.1 (ephemeral port, world N; or
 * at --listen ADDR, e.g. [::1]:0 for IPv6), then
 * starts N copies of the program with
 *
 *   NEXAR_SEED_ADDR=<seed address>  NEXAR_WORLD_SIZE=N
 *   NEXAR_CLUSTER_TOKEN=<token>     NEXAR_RANK=i  NEXAR_LOCAL_RANK=i
 *
 * so that nexar_init_from_env() in each copy joins the same world with a
 * deterministic rank. The token is NEXAR_CLUSTER_TOKEN if set, else drawn by
 * the seed. Children inherit stdout and stderr unchanged.
 *
 * With --join HOST:PORT no seed is started: the N copies join the seed
 * running there (nexar-seed) with
 *
 *   NEXAR_SEED_ADDR=HOST:PORT  NEXAR_CLUSTER_TOKEN=<the caller's>  NEXAR_LOCAL_RANK=i
 *
 * and neither NEXAR_RANK nor NEXAR_WORLD_SIZE, so the seed assigns their
 * ranks: into the world it is forming, or, once that has formed, as joiners
 * admitted at the members' next nexar_elastic_checkpoint. The caller must set
 * NEXAR_CLUSTER_TOKEN to the seed's token (nexar-seed prints it).
 *
 * Process handling:
 * - each rank runs in its own process group, so that a signal sent to a rank
 *   also reaches what it started (a shell's children, for instance);
 * - SIGINT, SIGTERM and SIGHUP received by the launcher are forwarded to every
 *   rank still running;
 * - as soon as one rank fails (non-zero exit or killed by a signal), the others
 *   get SIGTERM, then SIGKILL 3 s later; the launcher returns the first
 *   failure's status (128 + signal number for a signal);
 * - --timeout S: after S seconds everything is stopped the same way and the
 *   launcher returns 124;
 * - 0 when every rank exits 0.
 * Since ranks are not in the terminal's foreground process group, they cannot
 * read a terminal: when stdin is a terminal they get /dev/null instead.
 */
#include "core/addr.h"

#include <nexar/nexar.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define KILL_GRACE_MS 3000
#define MAX_RANKS 4096

/* One launched rank. */
typedef struct child {
  pid_t pid;   /* 0 when never started */
  int running; /* started and not yet reaped */
} child;

/* Launcher state, shared by the helpers below. */
typedef struct launcher {
  child *kids;
  uint32_t n;
  uint32_t running;
  int result;         /* -1 until decided; then the exit status to return */
  int stopping;       /* SIGTERM sent to every rank */
  uint64_t kill_at;   /* when stopping: time to send SIGKILL (ms) */
  int killed;         /* SIGKILL sent */
  int forward_signal; /* last signal received, for the final status */
  const char *what;   /* "rank", or "local rank" under --join (the seed assigns ranks) */
} launcher;

static const char *prog = "nexar-run";

static void usage(FILE *f) {
  fprintf(f,
          "usage: %s -n N [--timeout S] [--listen ADDR] -- program [args...]\n"
          "       %s -n N [--timeout S] --join HOST:PORT -- program [args...]\n"
          "\n"
          "Runs N copies of program on this host as one nexar world. A seed runs\n"
          "inside the launcher; each copy gets NEXAR_SEED_ADDR, NEXAR_WORLD_SIZE,\n"
          "NEXAR_CLUSTER_TOKEN, NEXAR_RANK and NEXAR_LOCAL_RANK, so\n"
          "nexar_init_from_env() joins with rank NEXAR_RANK.\n"
          "With --join, no seed is started: the copies join the seed at HOST:PORT\n"
          "(nexar-seed) with NEXAR_SEED_ADDR, the caller's NEXAR_CLUSTER_TOKEN\n"
          "(required) and NEXAR_LOCAL_RANK, without NEXAR_RANK and NEXAR_WORLD_SIZE:\n"
          "the seed assigns ranks, or queues them as joiners of a formed world,\n"
          "admitted at the members' next nexar_elastic_checkpoint.\n"
          "\n"
          "  -n, --np N         number of ranks (1..%d)\n"
          "  --timeout S        stop every rank after S seconds and exit 124\n"
          "  --listen ADDR      the seed's address (default 127.0.0.1:0; IPv6: [::1]:0)\n"
          "  --join HOST:PORT   join the running seed there instead of starting one\n"
          "  -h, --help         this text\n"
          "\n"
          "Exit status: 0 when every rank exits 0; else the first failing rank's\n"
          "status (128+signal when killed), the others being terminated; 124 on\n"
          "timeout; 127 when the program cannot be started; 2 on a usage error.\n"
          "The token is NEXAR_CLUSTER_TOKEN if set, else drawn by the seed.\n",
          prog, prog, MAX_RANKS);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Parses a decimal unsigned integer in [lo, hi]; 0 on success, -1 otherwise. */
static int parse_u32(const char *s, unsigned long lo, unsigned long hi, uint32_t *out) {
  if (s == NULL || *s == '\0' || *s == '-' || *s == '+') return -1;
  errno = 0;
  char *end = NULL;
  unsigned long v = strtoul(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return -1;
  *out = (uint32_t)v;
  return 0;
}

/* Status of a reaped child as a shell would report it. */
static int wait_status_code(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return 1;
}

/* Sends sig to the process group of every rank still running. */
static void signal_all(launcher *l, int sig) {
  for (uint32_t i = 0; i < l->n; i++) {
    if (!l->kids[i].running) continue;
    /* Each rank leads its own group; fall back to the pid should the group
     * already be gone (the rank changed its own group, for instance). */
    if (kill(-l->kids[i].pid, sig) != 0) kill(l->kids[i].pid, sig);
  }
}

/* Starts the orderly stop: SIGTERM now, SIGKILL after the grace period. */
static void stop_all(launcher *l) {
  if (l->stopping) return;
  l->stopping = 1;
  l->kill_at = now_ms() + KILL_GRACE_MS;
  signal_all(l, SIGTERM);
}

/* Reaps every child that has finished; decides the result on a first failure. */
static void reap(launcher *l) {
  for (;;) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid <= 0) return;
    for (uint32_t i = 0; i < l->n; i++) {
      if (!l->kids[i].running || l->kids[i].pid != pid) continue;
      l->kids[i].running = 0;
      l->running--;
      int code = wait_status_code(st);
      if (code != 0 && l->result < 0) {
        l->result = code;
        if (l->stopping) break; /* an expected consequence of our own stop */
        if (WIFSIGNALED(st))
          fprintf(stderr, "%s: %s %u (pid %ld) killed by signal %d (%s)\n", prog, l->what, i,
                  (long)pid, WTERMSIG(st), strsignal(WTERMSIG(st)));
        else
          fprintf(stderr, "%s: %s %u (pid %ld) exited with status %d\n", prog, l->what, i,
                  (long)pid, code);
        if (l->running > 0) {
          fprintf(stderr, "%s: terminating the %u other running rank(s)\n", prog, l->running);
          stop_all(l);
        }
      }
      break;
    }
  }
}

/* Returns "NAME=value" in fresh memory, or NULL when out of memory. */
static char *env_entry(const char *name, const char *value) {
  size_t len = strlen(name) + 1 + strlen(value) + 1;
  char *s = malloc(len);
  if (s == NULL) return NULL;
  snprintf(s, len, "%s=%s", name, value);
  return s;
}

/* Whether environ entry e sets one of the variables the launcher provides. */
static int is_launcher_var(const char *e) {
  static const char *const names[] = {"NEXAR_SEED_ADDR", "NEXAR_WORLD_SIZE", "NEXAR_CLUSTER_TOKEN",
                                      "NEXAR_RANK", "NEXAR_LOCAL_RANK"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    size_t k = strlen(names[i]);
    if (strncmp(e, names[i], k) == 0 && e[k] == '=') return 1;
  }
  return 0;
}

/* A child environment: ours minus the launcher variables, plus the fixed
 * entries (seed address, world size, token; no world size under --join), and
 * the per-child slots (rank, local rank; only the local rank under --join). */
typedef struct child_env {
  char **envp;
  size_t base; /* index of the first per-child slot */
  int join;    /* --join: the seed assigns the ranks */
  char *fixed[3];
} child_env;

/* world 0: --join, no NEXAR_WORLD_SIZE and no NEXAR_RANK. */
static int child_env_init(child_env *ce, const char *addr, uint32_t world, const char *token) {
  memset(ce, 0, sizeof *ce);
  size_t n = 0;
  for (char **e = environ; *e != NULL; e++)
    n++;
  ce->envp = calloc(n + 6, sizeof(char *));
  if (ce->envp == NULL) return -1;
  size_t k = 0;
  for (char **e = environ; *e != NULL; e++)
    if (!is_launcher_var(*e)) ce->envp[k++] = *e;
  char wbuf[16];
  snprintf(wbuf, sizeof wbuf, "%u", world);
  ce->join = world == 0;
  ce->fixed[0] = env_entry("NEXAR_SEED_ADDR", addr);
  ce->fixed[1] = env_entry("NEXAR_CLUSTER_TOKEN", token);
  ce->fixed[2] = ce->join ? NULL : env_entry("NEXAR_WORLD_SIZE", wbuf);
  for (int i = 0; i < (ce->join ? 2 : 3); i++) {
    if (ce->fixed[i] == NULL) return -1;
    ce->envp[k++] = ce->fixed[i];
  }
  ce->base = k; /* envp[base], envp[base + 1] per child; then NULL */
  return 0;
}

static void child_env_free(child_env *ce) {
  for (int i = 0; i < 3; i++)
    free(ce->fixed[i]);
  free(ce->envp);
}

/* Starts rank i; 0 or an errno value. */
static int spawn_rank(launcher *l, uint32_t i, child_env *ce, char **argv, int devnull) {
  char rank_e[40], local_e[40];
  snprintf(rank_e, sizeof rank_e, "NEXAR_RANK=%u", i);
  snprintf(local_e, sizeof local_e, "NEXAR_LOCAL_RANK=%u", i);
  size_t k = ce->base;
  if (!ce->join) ce->envp[k++] = rank_e;
  ce->envp[k++] = local_e;
  ce->envp[k] = NULL;

  posix_spawnattr_t attr;
  posix_spawn_file_actions_t fa;
  int rc = posix_spawnattr_init(&attr);
  if (rc != 0) return rc;
  rc = posix_spawn_file_actions_init(&fa);
  if (rc != 0) {
    posix_spawnattr_destroy(&attr);
    return rc;
  }
  /* The child starts with no blocked signals, default dispositions for the
   * ones we handle, and in a process group of its own. */
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGINT);
  sigaddset(&dflt, SIGTERM);
  sigaddset(&dflt, SIGHUP);
  sigaddset(&dflt, SIGCHLD);
  sigaddset(&dflt, SIGPIPE);
  rc = posix_spawnattr_setsigmask(&attr, &none);
  if (rc == 0) rc = posix_spawnattr_setsigdefault(&attr, &dflt);
  if (rc == 0) rc = posix_spawnattr_setpgroup(&attr, 0);
  if (rc == 0)
    rc = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                             POSIX_SPAWN_SETPGROUP);
  if (rc == 0 && devnull >= 0) rc = posix_spawn_file_actions_adddup2(&fa, devnull, STDIN_FILENO);
  pid_t pid = 0;
  if (rc == 0) rc = posix_spawnp(&pid, argv[0], &fa, &attr, argv, ce->envp);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return rc;
  l->kids[i].pid = pid;
  l->kids[i].running = 1;
  l->running++;
  return 0;
}

int main(int argc, char **argv) {
  uint32_t n = 0, timeout_s = 0;
  int have_n = 0, have_timeout = 0, argi = 1;
  const char *listen_addr = "127.0.0.1:0", *join_addr = NULL;
  int have_listen = 0;
  for (; argi < argc; argi++) {
    const char *a = argv[argi];
    if (strcmp(a, "--") == 0) {
      argi++;
      break;
    }
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    }
    const char *val = NULL;
    int is_n = 0, is_t = 0, is_l = 0, is_j = 0;
    if (strcmp(a, "-n") == 0 || strcmp(a, "--np") == 0) {
      is_n = 1;
    } else if (strcmp(a, "--timeout") == 0) {
      is_t = 1;
    } else if (strcmp(a, "--listen") == 0) {
      is_l = 1;
    } else if (strncmp(a, "--listen=", 9) == 0) {
      is_l = 1;
      val = a + 9;
    } else if (strcmp(a, "--join") == 0) {
      is_j = 1;
    } else if (strncmp(a, "--join=", 7) == 0) {
      is_j = 1;
      val = a + 7;
    } else if (strncmp(a, "--np=", 5) == 0) {
      is_n = 1;
      val = a + 5;
    } else if (strncmp(a, "--timeout=", 10) == 0) {
      is_t = 1;
      val = a + 10;
    } else if (a[0] != '-') {
      break; /* the program; "--" is optional when unambiguous */
    } else {
      fprintf(stderr, "%s: unknown option '%s'\n", prog, a);
      usage(stderr);
      return 2;
    }
    if (val == NULL) {
      if (argi + 1 >= argc) {
        fprintf(stderr, "%s: option '%s' needs a value\n", prog, a);
        return 2;
      }
      val = argv[++argi];
    }
    if (is_l) {
      listen_addr = val;
      have_listen = 1;
    } else if (is_j) {
      join_addr = val;
    } else if (is_n) {
      if (parse_u32(val, 1, MAX_RANKS, &n) != 0) {
        fprintf(stderr, "%s: -n wants a number of ranks in 1..%d, not '%s'\n", prog, MAX_RANKS,
                val);
        return 2;
      }
      have_n = 1;
    } else if (is_t) {
      if (parse_u32(val, 1, 86400u * 365u, &timeout_s) != 0) {
        fprintf(stderr, "%s: --timeout wants a positive number of seconds, not '%s'\n", prog, val);
        return 2;
      }
      have_timeout = 1;
    }
  }
  if (!have_n) {
    fprintf(stderr, "%s: missing -n N\n", prog);
    usage(stderr);
    return 2;
  }
  if (argi >= argc) {
    fprintf(stderr, "%s: missing the program to run (after --)\n", prog);
    usage(stderr);
    return 2;
  }
  char **child_argv = argv + argi;
  const char *token = NULL;
  if (join_addr != NULL) {
    if (have_listen) {
      fprintf(stderr, "%s: --join and --listen exclude each other (--join starts no seed)\n", prog);
      return 2;
    }
    char host[NX_ADDR_HOST_MAX];
    uint16_t port = 0;
    if (nx_addr_split(join_addr, "--join", host, sizeof host, &port) != 0) {
      fprintf(stderr, "%s: %s\n", prog, nexar_last_error());
      return 2;
    }
    if (port == 0 || nx_addr_is_wildcard(host)) {
      fprintf(stderr,
              "%s: --join wants the seed's HOST:PORT (a host to reach, a port other than 0), "
              "not '%s'\n",
              prog, join_addr);
      return 2;
    }
    /* The ranks present the seed's token; only the caller can know it. */
    token = getenv("NEXAR_CLUSTER_TOKEN");
    if (token == NULL || *token == '\0') {
      fprintf(stderr,
              "%s: --join %s: NEXAR_CLUSTER_TOKEN is not set; set it to the token of the seed "
              "there (nexar-seed prints NEXAR_CLUSTER_TOKEN=...)\n",
              prog, join_addr);
      return 2;
    }
  }

  /* Handle our signals synchronously (sigtimedwait) in this thread. They are
   * blocked before the seed starts so its threads inherit the mask and never
   * take them. SIGCHLD must not be ignored (an inherited SIG_IGN would make
   * the kernel reap the ranks before we see their status). */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGCHLD);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_DFL;
  sigaction(SIGCHLD, &sa, NULL);
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) {
    fprintf(stderr, "%s: cannot block signals\n", prog);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);

  /* The seed: defaults plus NEXAR_* environment (NEXAR_CLUSTER_TOKEN included).
   * None under --join: the ranks go to the caller's. */
  nexar_seed *seed = NULL;
  const char *addr = join_addr;
  if (join_addr == NULL) {
    int rc = nexar_seed_new(&seed, listen_addr, n, NULL);
    if (rc != NEXAR_OK) {
      fprintf(stderr, "%s: cannot start the seed: %s\n", prog, nexar_last_error());
      return 1;
    }
    addr = nexar_seed_addr(seed);
    token = nexar_seed_token(seed);
    if (addr == NULL || token == NULL) {
      fprintf(stderr, "%s: the seed reports no address or token\n", prog);
      nexar_seed_del(seed);
      return 1;
    }
  }

  launcher l;
  memset(&l, 0, sizeof l);
  l.n = n;
  l.result = -1;
  l.what = join_addr != NULL ? "local rank" : "rank";
  l.kids = calloc(n, sizeof(child));
  child_env ce;
  if (l.kids == NULL || child_env_init(&ce, addr, join_addr != NULL ? 0 : n, token) != 0) {
    fprintf(stderr, "%s: out of memory\n", prog);
    free(l.kids);
    nexar_seed_del(seed);
    return 1;
  }
  int devnull = -1;
  if (isatty(STDIN_FILENO)) devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

  uint64_t deadline = have_timeout ? now_ms() + (uint64_t)timeout_s * 1000u : 0;
  fflush(stdout);
  fflush(stderr);
  for (uint32_t i = 0; i < n; i++) {
    int err = spawn_rank(&l, i, &ce, child_argv, devnull);
    if (err != 0) {
      fprintf(stderr, "%s: cannot start %s %u ('%s'): %s\n", prog, l.what, i, child_argv[0],
              strerror(err));
      l.result = (err == ENOENT || err == EACCES || err == ENOEXEC) ? 127 : 126;
      stop_all(&l);
      break;
    }
  }
  child_env_free(&ce);
  if (devnull >= 0) close(devnull);

  int timed_out = 0;
  while (l.running > 0) {
    reap(&l);
    if (l.running == 0) break;
    uint64_t now = now_ms();
    if (have_timeout && !timed_out && !l.stopping && now >= deadline) {
      timed_out = 1;
      fprintf(stderr, "%s: timeout after %u s, stopping %u rank(s)\n", prog, timeout_s, l.running);
      stop_all(&l);
    }
    if (l.stopping && !l.killed && now >= l.kill_at) {
      fprintf(stderr, "%s: %u rank(s) still running after the grace period; sending SIGKILL\n",
              prog, l.running);
      l.killed = 1;
      signal_all(&l, SIGKILL);
    }
    /* Sleep until a signal or the next deadline (at most 1 s). */
    uint64_t wait_ms = 1000;
    if (have_timeout && !timed_out && deadline - now < wait_ms) wait_ms = deadline - now;
    if (l.stopping && !l.killed && l.kill_at - now < wait_ms) wait_ms = l.kill_at - now;
    struct timespec ts = {(time_t)(wait_ms / 1000), (long)(wait_ms % 1000) * 1000000L};
    siginfo_t si;
    int sig = sigtimedwait(&set, &si, &ts);
    if (sig < 0 || sig == SIGCHLD) continue;
    /* SIGINT, SIGTERM or SIGHUP: pass it on. A repeated one after the grace
     * period started escalates to SIGKILL. */
    if (l.forward_signal != 0 && l.stopping && !l.killed) {
      fprintf(stderr, "%s: %s again, sending SIGKILL\n", prog, strsignal(sig));
      l.killed = 1;
      signal_all(&l, SIGKILL);
      continue;
    }
    l.forward_signal = sig;
    signal_all(&l, sig);
    if (!l.stopping) {
      /* Ranks that ignore the signal still get stopped. */
      l.stopping = 1;
      l.kill_at = now_ms() + KILL_GRACE_MS;
    }
  }

  free(l.kids);
  nexar_seed_del(seed);
  if (timed_out) return 124;
  if (l.result >= 0) return l.result;
  if (l.forward_signal != 0) return 128 + l.forward_signal;
  return 0;
}
