/*
 * nexar-seed: the discovery daemon.
 *
 *   nexar-seed --listen HOST:PORT --world-size N [--token-file FILE]
 *              [--max-world M] [--timeout-ms MS] [--once] [--print-config]
 *
 * Starts a seed, prints "NEXAR_SEED_ADDR=<host:port>" on stdout (one flushed
 * line), and publishes the cluster token workers must present: written to
 * FILE (mode 0600, created atomically) with --token-file, else printed as
 * "NEXAR_CLUSTER_TOKEN=<token>". The token is NEXAR_CLUSTER_TOKEN when set,
 * else one the seed draws from the OS CSPRNG. The seed then serves until
 * SIGINT or SIGTERM (exit 0), and keeps serving after the world has formed:
 * a worker that joins then (nexar_join, or nexar_init_from_env without
 * NEXAR_RANK) is queued and admitted at the members' next
 * nexar_elastic_checkpoint, up to --max-world M members (elastic_max_world;
 * 0, the default, is no limit). With --once it exits 0 as soon as the world
 * has formed; the members keep running, but nobody can join any more (their
 * checkpoints then only handle leaves). Every other NEXAR_* variable
 * configures it as it would a worker; --print-config shows the result and
 * exits.
 */
#include "core/config.h"

#include <nexar/nexar.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE 2
#define EXIT_TIMEOUT 124
#define WAIT_SLICE_MS 200

static const char *prog = "nexar-seed";

static void usage(FILE *f) {
  fprintf(f,
          "usage: %s --listen HOST:PORT --world-size N [options]\n"
          "\n"
          "Runs a nexar seed: it hands out ranks and peer addresses until the world\n"
          "of N ranks has formed, and is never on the data path. Without --once it\n"
          "keeps serving after formation: a worker that joins later (nexar_join, or\n"
          "nexar_init_from_env without NEXAR_RANK) is queued and admitted at the\n"
          "members' next nexar_elastic_checkpoint.\n"
          "\n"
          "  --listen HOST:PORT  address to serve on (port 0: any free port;\n"
          "                      IPv6 as [addr]:port)\n"
          "  --world-size N      number of ranks in the world\n"
          "  --max-world M       admit joiners only up to M members in all\n"
          "                      (elastic_max_world; 0: no limit, the default)\n"
          "  --token-file FILE   write the cluster token to FILE (mode 0600, atomic)\n"
          "                      instead of printing it\n"
          "  --timeout-ms MS     fail (exit %d) if the world has not formed within MS\n"
          "                      (default: none; with --once, NEXAR_CONNECT_TIMEOUT_MS)\n"
          "  --once              exit 0 once the world has formed (no joiner can be\n"
          "                      admitted after that)\n"
          "  --print-config      print the effective configuration and exit\n"
          "  -h, --help          this text\n"
          "\n"
          "Prints NEXAR_SEED_ADDR=<addr> and, without --token-file,\n"
          "NEXAR_CLUSTER_TOKEN=<token>. The token is NEXAR_CLUSTER_TOKEN if set,\n"
          "else drawn at random. Runs until SIGINT or SIGTERM (exit 0).\n"
          "Workers join with NEXAR_SEED_ADDR and NEXAR_CLUSTER_TOKEN set.\n",
          prog, EXIT_TIMEOUT);
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

/* Writes token to path atomically: a private temporary file in the same
 * directory (mode 0600 from mkstemp), synced, then renamed over path. */
static int write_token_file(const char *path, const char *token) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 8);
  if (tmp == NULL) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return -1;
  }
  snprintf(tmp, plen + 8, "%s.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "%s: cannot create a temporary file next to %s: %s\n", prog, path,
            strerror(errno));
    free(tmp);
    return -1;
  }
  int ok = fchmod(fd, S_IRUSR | S_IWUSR) == 0;
  size_t len = strlen(token), off = 0;
  while (ok && off < len) {
    ssize_t w = write(fd, token + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      ok = 0;
    else
      off += (size_t)w;
  }
  if (ok && fsync(fd) != 0) ok = 0;
  int saved = errno;
  if (close(fd) != 0 && ok) {
    ok = 0;
    saved = errno;
  }
  if (ok && rename(tmp, path) != 0) {
    ok = 0;
    saved = errno;
  }
  if (!ok) {
    fprintf(stderr, "%s: cannot write the token file %s: %s\n", prog, path, strerror(saved));
    unlink(tmp);
  }
  free(tmp);
  return ok ? 0 : -1;
}

/* Takes a pending SIGINT/SIGTERM/SIGHUP within wait_ms; 0 if none. */
static int take_signal(const sigset_t *set, uint32_t wait_ms) {
  struct timespec ts = {(time_t)(wait_ms / 1000), (long)(wait_ms % 1000) * 1000000L};
  for (;;) {
    int sig = sigtimedwait(set, NULL, &ts);
    if (sig > 0) return sig;
    if (errno != EINTR) return 0;
  }
}

int main(int argc, char **argv) {
  const char *listen = NULL, *token_file = NULL;
  uint32_t world = 0, timeout_ms = 0, max_world = 0;
  int have_world = 0, have_timeout = 0, have_max = 0, once = 0, print_config = 0;

  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      usage(stdout);
      return 0;
    }
    if (strcmp(a, "--once") == 0) {
      once = 1;
      continue;
    }
    if (strcmp(a, "--print-config") == 0) {
      print_config = 1;
      continue;
    }
    /* Options with a value: "--opt value" or "--opt=value". */
    static const char *const valued[] = {"--listen", "--world-size", "--token-file", "--timeout-ms",
                                         "--max-world"};
    int which = -1;
    const char *val = NULL;
    for (int k = 0; k < 5; k++) {
      size_t n = strlen(valued[k]);
      if (strncmp(a, valued[k], n) != 0) continue;
      if (a[n] == '\0') {
        if (i + 1 >= argc) {
          fprintf(stderr, "%s: option '%s' needs a value\n", prog, a);
          return EXIT_USAGE;
        }
        val = argv[++i];
      } else if (a[n] == '=') {
        val = a + n + 1;
      } else {
        continue;
      }
      which = k;
      break;
    }
    if (which < 0) {
      fprintf(stderr, "%s: unknown argument '%s'\n", prog, a);
      usage(stderr);
      return EXIT_USAGE;
    }
    switch (which) {
    case 0:
      listen = val;
      break;
    case 1:
      if (parse_u32(val, 1, UINT32_MAX, &world) != 0) {
        fprintf(stderr, "%s: --world-size wants a positive number, not '%s'\n", prog, val);
        return EXIT_USAGE;
      }
      have_world = 1;
      break;
    case 2:
      if (*val == '\0') {
        fprintf(stderr, "%s: --token-file wants a file name\n", prog);
        return EXIT_USAGE;
      }
      token_file = val;
      break;
    case 4:
      if (parse_u32(val, 0, UINT32_MAX, &max_world) != 0) {
        fprintf(stderr, "%s: --max-world wants a number of members (0: no limit), not '%s'\n", prog,
                val);
        return EXIT_USAGE;
      }
      have_max = 1;
      break;
    default:
      if (parse_u32(val, 1, UINT32_MAX, &timeout_ms) != 0) {
        fprintf(stderr, "%s: --timeout-ms wants a positive number of milliseconds, not '%s'\n",
                prog, val);
        return EXIT_USAGE;
      }
      have_timeout = 1;
      break;
    }
  }

  /* The configuration: defaults, then NEXAR_* variables. */
  nexar_config cfg;
  int rc = nexar_config_default(&cfg);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "%s: bad configuration: %s\n", prog, nexar_last_error());
    return 1;
  }
  /* The option wins over NEXAR_ELASTIC_MAX_WORLD, as on a command line. */
  if (have_max) cfg.elastic_max_world = max_world;

  if (print_config) {
    nexar_config eff;
    rc = nx_config_resolve(&cfg, &eff);
    if (rc != NEXAR_OK) {
      fprintf(stderr, "%s: bad configuration: %s\n", prog, nexar_last_error());
      return 1;
    }
    printf("# nexar-seed %s\n", nexar_version());
    printf("listen=%s\n", listen ? listen : "(unset)");
    if (have_world)
      printf("world_size=%u\n", world);
    else
      printf("world_size=(unset)\n");
    nx_config_print_all(stdout, &eff);
    nx_config_release(&eff);
    return fflush(stdout) == 0 ? 0 : 1;
  }

  if (listen == NULL || *listen == '\0' || !have_world) {
    fprintf(stderr, "%s: %s is required\n", prog,
            (listen == NULL || *listen == '\0') ? "--listen HOST:PORT" : "--world-size N");
    usage(stderr);
    return EXIT_USAGE;
  }
  if (cfg.elastic_max_world != 0 && cfg.elastic_max_world < world)
    fprintf(stderr,
            "%s: note: a limit of %u members is below the world of %u: joiners are admitted "
            "only once departures bring the world below it\n",
            prog, cfg.elastic_max_world, world);
  if (once && !have_timeout) {
    timeout_ms = cfg.connect_timeout_ms; /* 0: no limit */
    have_timeout = timeout_ms != 0;
  }

  /* Signals are taken synchronously by this thread; they are blocked before
   * the seed starts so that its threads inherit the mask. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  if (pthread_sigmask(SIG_BLOCK, &set, NULL) != 0) {
    fprintf(stderr, "%s: cannot block signals\n", prog);
    return 1;
  }
  signal(SIGPIPE, SIG_IGN);

  nexar_seed *seed = NULL;
  rc = nexar_seed_new(&seed, listen, world, &cfg);
  if (rc != NEXAR_OK) {
    fprintf(stderr, "%s: cannot start a seed on %s: %s\n", prog, listen, nexar_last_error());
    return 1;
  }
  const char *addr = nexar_seed_addr(seed);
  const char *token = nexar_seed_token(seed);
  if (addr == NULL || token == NULL || *token == '\0') {
    fprintf(stderr, "%s: the seed reports no address or token\n", prog);
    nexar_seed_del(seed);
    return 1;
  }
  if (token_file != NULL && write_token_file(token_file, token) != 0) {
    nexar_seed_del(seed);
    return 1;
  }
  printf("NEXAR_SEED_ADDR=%s\n", addr);
  if (token_file == NULL) printf("NEXAR_CLUSTER_TOKEN=%s\n", token);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "%s: cannot write to stdout: %s\n", prog, strerror(errno));
    nexar_seed_del(seed);
    return 1;
  }
  if (cfg.elastic_max_world != 0)
    fprintf(stderr, "%s: serving on %s for a world of %u (at most %u members)\n", prog, addr, world,
            cfg.elastic_max_world);
  else
    fprintf(stderr, "%s: serving on %s for a world of %u\n", prog, addr, world);
  if (strncmp(addr, "0.0.0.0:", 8) == 0 || strncmp(addr, "[::]:", 5) == 0)
    fprintf(stderr,
            "%s: note: that is a wildcard address; workers on other hosts need this "
            "host's name or address with the same port\n",
            prog);

  /* Wait for the world to form, in slices, watching for signals between. */
  int status = 0, formed = 0, sig = 0;
  uint64_t deadline = have_timeout ? now_ms() + timeout_ms : 0;
  while (!formed) {
    sig = take_signal(&set, 0);
    if (sig != 0) break;
    uint32_t slice = WAIT_SLICE_MS;
    if (have_timeout) {
      uint64_t now = now_ms();
      if (now >= deadline) {
        fprintf(stderr, "%s: the world of %u did not form within %u ms\n", prog, world, timeout_ms);
        status = EXIT_TIMEOUT;
        break;
      }
      if (deadline - now < slice) slice = (uint32_t)(deadline - now);
    }
    rc = nexar_seed_wait(seed, slice);
    if (rc == NEXAR_OK) {
      formed = 1;
    } else if (rc != NEXAR_ERR_TIMEOUT) {
      fprintf(stderr, "%s: %s\n", prog, nexar_last_error());
      status = 1;
      break;
    }
  }
  if (formed) {
    fprintf(stderr, "%s: the world of %u has formed%s\n", prog, world,
            once ? "" : "; joiners are admitted at the members' checkpoints");
    /* Daemon mode: keep serving (late joiners, admissions) until told to stop. */
    while (!once && sig == 0)
      sig = take_signal(&set, 60000);
  }
  if (sig != 0) {
    fprintf(stderr, "%s: %s, stopping\n", prog, strsignal(sig));
    /* A stop request is a normal end for the daemon; with --once it means the
     * world may not have formed, so report how we were stopped. */
    if (once && !formed) status = 128 + sig;
  }
  nexar_seed_del(seed);
  return status;
}
