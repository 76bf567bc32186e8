/* NEXAR_DEBUG logging: silent by default, lines prefixed host:pid:rank. */
#include "core/config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int nx_log_level = NX_LOG_OFF;
static FILE *nx_log_fp;
static char nx_log_host[64];
static _Thread_local int nx_log_rank = -1;
static pthread_once_t nx_log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t nx_log_mu = PTHREAD_MUTEX_INITIALIZER;

int nx_log_expand(const char *tmpl, const char *rank, const char *host, long pid, char *out,
                  size_t cap) {
  if (!out || cap == 0) return -1;
  out[0] = '\0';
  if (!tmpl) return -1;
  char pidbuf[24];
  snprintf(pidbuf, sizeof pidbuf, "%ld", pid);
  size_t o = 0;
  for (const char *p = tmpl; *p; p++) {
    const char *piece = p; /* what to append, and how long */
    size_t n = 1;
    if (p[0] == '%' && p[1]) {
      const char *sub = NULL;
      switch (p[1]) {
      case 'h':
        sub = host ? host : "x";
        break;
      case 'p':
        sub = pidbuf;
        break;
      case 'r':
        sub = rank ? rank : "x";
        break;
      case '%':
        sub = "%";
        break;
      default:
        break; /* an unknown %c stays as written */
      }
      if (sub) {
        piece = sub;
        n = strlen(sub);
        p++;
      }
    }
    if (n >= cap - o) { /* no room for it and the terminator: refuse, never cut */
      out[0] = '\0';
      return -1;
    }
    memcpy(out + o, piece, n);
    o += n;
  }
  out[o] = '\0';
  return 0;
}

static void nx_log_setup(void) {
  /* A malformed knob leaves logging off; the call that takes a config then
   * fails naming the variable (nx_config_resolve parses the same table). */
  nx_knobs k;
  if (nx_knobs_from_env(&k) != 0 || k.debug == NX_LOG_OFF) return;
  nx_log_level = k.debug;
  gethostname(nx_log_host, sizeof nx_log_host - 1);
  nx_log_fp = stderr;
  const char *file = k.debug_file;
  if (file && *file) {
    char path[PATH_MAX];
    FILE *f = NULL;
    if (nx_log_expand(file, getenv("RANK"), nx_log_host, (long)getpid(), path, sizeof path) != 0)
      fprintf(stderr,
              "nexar: NEXAR_DEBUG_FILE: the expanded path is longer than %d bytes; "
              "logging to stderr\n",
              (int)sizeof path - 1);
    else if (!(f = fopen(path, "a")))
      fprintf(stderr, "nexar: NEXAR_DEBUG_FILE: cannot open '%.200s' (%s); logging to stderr\n",
              path, strerror(errno));
    if (f) nx_log_fp = f;
  }
}

void nx_log_init(void) {
  pthread_once(&nx_log_once, nx_log_setup);
}

void nx_log_set_rank(uint32_t rank) {
  nx_log_rank = (int)rank;
}

void nx_log_write(int level, const char *fmt, ...) {
  static const char *tag[] = {"", "ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  pthread_mutex_lock(&nx_log_mu);
  fprintf(nx_log_fp ? nx_log_fp : stderr, "%s:%d:%d %ld.%06ld %s %s\n", nx_log_host, (int)getpid(),
          nx_log_rank, (long)ts.tv_sec, ts.tv_nsec / 1000, tag[level], msg);
  fflush(nx_log_fp ? nx_log_fp : stderr);
  pthread_mutex_unlock(&nx_log_mu);
}
