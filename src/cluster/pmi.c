/* PMI-1 client for MPICH's Hydra (mpiexec): the text protocol on the socket
 * PMI_FD names. Only what forming a cluster needs: init, get_maxes,
 * get_my_kvsname, put, barrier, get, finalize. Every reply is decoded by
 * core/pmi_wire.c as untrusted input. */
#include "cluster/launch.h"
#include "core/config.h"
#include "core/pmi_wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct pmi1 {
  nx_kvs base;
  int fd;
  uint32_t keymax, valmax;
  char kvsname[256];
  char buf[NX_PMI_LINE_MAX + 2]; /* bytes received and not yet decoded: a line and its newline */
  size_t have;
} pmi1;

static int pmi_send(pmi1 *p, const char *what, const char *cmd, const char *const *kv, size_t n) {
  char line[NX_PMI_LINE_MAX + 2];
  size_t len;
  int rc = nx_pmi_encode(line, sizeof line, &len, cmd, kv, n);
  if (rc) return rc;
  NX_TRACE("PMI -> %.*s", (int)len - 1, line);
  for (size_t o = 0; o < len;) {
    /* a launcher gone away must be an error here, not SIGPIPE for the process */
    ssize_t w = send(p->fd, line + o, len - o, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK) w = write(p->fd, line + o, len - o);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return nx_fail(NEXAR_ERR_IO, "%s: writing to the launcher (PMI_FD=%d): %s", what, p->fd,
                     w < 0 ? strerror(errno) : "closed");
    o += (size_t)w;
  }
  return 0;
}

/* Reads one reply line into m, waiting until deadline (0: none). */
static int pmi_recv(pmi1 *p, const char *what, nx_pmi_msg *m, uint64_t deadline) {
  for (;;) {
    size_t linelen;
    int got = nx_pmi_line(p->buf, p->have, &linelen);
    if (got < 0) return got;
    if (got == 1) {
      NX_TRACE("PMI <- %.*s", (int)linelen, p->buf);
      int rc = nx_pmi_decode(p->buf, linelen, m);
      memmove(p->buf, p->buf + linelen + 1, p->have - linelen - 1);
      p->have -= linelen + 1;
      if (rc) {
        char why[256];
        snprintf(why, sizeof why, "%s", nexar_last_error()); /* not formatted into itself */
        return nx_fail(rc, "%s: %s", what, why);
      }
      return 0;
    }
    int wait = -1;
    if (deadline) {
      uint64_t now = nx_now_ns();
      if (now >= deadline)
        return nx_fail(NEXAR_ERR_TIMEOUT, "%s: no answer from the launcher (PMI_FD=%d) in time",
                       what, p->fd);
      wait = (int)NX_MIN((deadline - now) / 1000000u + 1, 60000u);
    }
    struct pollfd pf = {.fd = p->fd, .events = POLLIN};
    int pr = poll(&pf, 1, wait);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return nx_fail(NEXAR_ERR_IO, "%s: poll on PMI_FD: %s", what, strerror(errno));
    if (pr == 0) continue;
    ssize_t r = read(p->fd, p->buf + p->have, sizeof p->buf - 1 - p->have);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0)
      return nx_fail(NEXAR_ERR_IO, "%s: the launcher closed PMI_FD=%d%s%s", what, p->fd,
                     r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
    p->have += (size_t)r;
  }
}

/* One request and its reply, which must be cmd=reply with rc=0. */
static int pmi_call(pmi1 *p, const char *what, const char *cmd, const char *const *kv, size_t n,
                    const char *reply, nx_pmi_msg *m, uint64_t deadline) {
  int rc = pmi_send(p, what, cmd, kv, n);
  if (!rc) rc = pmi_recv(p, what, m, deadline);
  if (!rc) rc = nx_pmi_expect(m, reply, what);
  return rc;
}

static int pmi_u32(const nx_pmi_msg *m, const char *key, const char *what, uint32_t *v) {
  const char *s = nx_pmi_get(m, key);
  if (!s || nx_parse_u32(key, s, v))
    return nx_fail(NEXAR_ERR_PROTOCOL, "%s: the launcher's reply has no valid %s", what, key);
  return 0;
}

static uint64_t deadline_of(uint32_t timeout_ms) {
  return timeout_ms ? nx_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
}

static int pmi1_share(nx_kvs *kvs, const char *val, char *out, size_t cap, uint32_t timeout_ms) {
  pmi1 *p = (pmi1 *)kvs;
  uint64_t dl = deadline_of(timeout_ms);
  nx_pmi_msg *m = malloc(sizeof *m);
  if (!m) return nx_fail(NEXAR_ERR_NOMEM, "PMI: no memory");
  int rc = 0;
  if (val) {
    if (strlen(val) > p->valmax) {
      rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "PMI put: a value of %zu bytes, the launcher's limit is %u", strlen(val),
                   p->valmax);
      goto out;
    }
    const char *kv[] = {"kvsname", p->kvsname, "key", NX_LAUNCH_SEED_KEY, "value", val};
    if ((rc = pmi_call(p, "PMI put", "put", kv, 3, "put_result", m, dl))) goto out;
  }
  if ((rc = pmi_call(p, "PMI barrier", "barrier_in", NULL, 0, "barrier_out", m, dl))) goto out;
  if (!val) {
    const char *kv[] = {"kvsname", p->kvsname, "key", NX_LAUNCH_SEED_KEY};
    if ((rc = pmi_call(p, "PMI get of " NX_LAUNCH_SEED_KEY, "get", kv, 2, "get_result", m, dl)))
      goto out;
    const char *v = nx_pmi_get(m, "value");
    if (!v || strlen(v) >= cap) {
      rc = nx_fail(NEXAR_ERR_PROTOCOL, "PMI get of " NX_LAUNCH_SEED_KEY ": %s",
                   v ? "the value is too long" : "the reply has no value");
      goto out;
    }
    memcpy(out, v, strlen(v) + 1);
  }
out:
  free(m);
  return rc;
}

static void pmi1_close(nx_kvs *kvs) {
  pmi1 *p = (pmi1 *)kvs;
  if (!p) return;
  nx_pmi_msg *m = malloc(sizeof *m);
  /* Hydra counts a process that initialized and exits without finalize as
   * failed: say goodbye, bounded */
  if (m) pmi_call(p, "PMI finalize", "finalize", NULL, 0, "finalize_ack", m, deadline_of(5000));
  free(m);
  close(p->fd);
  free(p);
}

/* PMI-1 serves a process once: after finalize the descriptor is closed and
 * its number may belong to another file, so a second open is refused rather
 * than writing to whatever PMI_FD now names. */
static atomic_int pmi_used;

void nx_pmi_forget(void) {
  atomic_store(&pmi_used, 0);
}

int nx_pmi_open(nx_kvs **out, uint32_t timeout_ms) {
  *out = NULL;
  if (atomic_load(&pmi_used))
    return nx_fail(
        NEXAR_ERR_UNSUPPORTED,
        "init_from_env (PMI-1): this process already used its PMI_FD connection (PMI-1 "
        "serves one nexar_init_from_env per process); use nexar_split, or NEXAR_SEED_ADDR");
  uint32_t fd, rank, size;
  int have_fd, have_rank, have_size, rc;
  if ((rc = nx_env_u32("PMI_FD", &fd, &have_fd)) ||
      (rc = nx_env_u32("PMI_RANK", &rank, &have_rank)) ||
      (rc = nx_env_u32("PMI_SIZE", &size, &have_size)))
    return rc;
  if (!have_fd || !have_rank || !have_size)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "init_from_env (PMI-1): PMI_FD is set but %s is not",
                   !have_fd     ? "PMI_FD"
                   : !have_rank ? "PMI_RANK"
                                : "PMI_SIZE");
  if (size == 0 || rank >= size)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "init_from_env (PMI-1): rank %u is outside a world of %u (PMI_RANK=%u, "
                   "PMI_SIZE=%u)",
                   rank, size, rank, size);
  if (fd > INT32_MAX || fcntl((int)fd, F_GETFD) < 0)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "init_from_env (PMI-1): PMI_FD=%u is not an open descriptor", fd);
  pmi1 *p = calloc(1, sizeof *p);
  nx_pmi_msg *m = malloc(sizeof *m);
  if (!p || !m) {
    free(p);
    free(m);
    return nx_fail(NEXAR_ERR_NOMEM, "PMI: no memory");
  }
  p->fd = (int)fd;
  p->base.name = "PMI-1";
  p->base.rank = rank;
  p->base.world = size;
  uint32_t lr = 0;
  int have_lr = 0;
  if (nx_env_u32("MPI_LOCALRANKID", &lr, &have_lr) || !have_lr) lr = 0; /* Hydra's; informative */
  p->base.local_rank = lr;
  p->base.share = pmi1_share;
  p->base.close = pmi1_close;
  uint64_t dl = deadline_of(timeout_ms);
  const char *init[] = {"pmi_version", "1", "pmi_subversion", "1"};
  uint32_t ver = 0;
  if ((rc = pmi_call(p, "PMI init", "init", init, 2, "response_to_init", m, dl)) ||
      (rc = pmi_u32(m, "pmi_version", "PMI init", &ver)))
    goto fail;
  if (ver != 1) {
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "PMI init: the launcher speaks PMI version %u, not 1", ver);
    goto fail;
  }
  if ((rc = pmi_call(p, "PMI get_maxes", "get_maxes", NULL, 0, "maxes", m, dl)) ||
      (rc = pmi_u32(m, "keylen_max", "PMI get_maxes", &p->keymax)) ||
      (rc = pmi_u32(m, "vallen_max", "PMI get_maxes", &p->valmax)))
    goto fail;
  if (p->keymax < sizeof NX_LAUNCH_SEED_KEY || p->valmax < 64) {
    rc = nx_fail(NEXAR_ERR_PROTOCOL,
                 "PMI get_maxes: keys of %u and values of %u bytes are too small", p->keymax,
                 p->valmax);
    goto fail;
  }
  if ((rc = pmi_call(p, "PMI get_my_kvsname", "get_my_kvsname", NULL, 0, "my_kvsname", m, dl)))
    goto fail;
  const char *kvs = nx_pmi_get(m, "kvsname");
  if (!kvs || !*kvs || strlen(kvs) >= sizeof p->kvsname) {
    rc = nx_fail(NEXAR_ERR_PROTOCOL, "PMI get_my_kvsname: %s",
                 kvs && *kvs ? "the name is too long" : "no kvsname in the reply");
    goto fail;
  }
  memcpy(p->kvsname, kvs, strlen(kvs) + 1);
  atomic_store(&pmi_used, 1);
  free(m);
  *out = &p->base;
  return 0;
fail:
  free(m);
  free(p); /* not initialized: nothing to finalize; the fd stays the launcher's */
  return rc;
}
