/* The PMI-1 wire codec (core/pmi_wire.c) and the client on PMI_FD
 * (cluster/pmi.c) against a scripted fake launcher on a socketpair: Hydra's
 * real replies, malformed and hostile ones (PROTOCOL), refusals (IO), a
 * launcher that goes away (IO) or says nothing (TIMEOUT). Never a hang. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/launch.h"
#include "core/common.h"
#include "core/pmi_wire.h"
#include "check.h"

static nx_pmi_msg M;

static void dec_ok(const char *line) {
  CHECK(nx_pmi_decode(line, strlen(line), &M) == 0, "'%s' refused", line);
}

static void dec_bad(const char *line, size_t len, const char *why) {
  int rc = nx_pmi_decode(line, len, &M);
  CHECK(rc == NEXAR_ERR_PROTOCOL, "'%.60s' accepted (rc %d)", line, rc);
  CHECK(M.n == 0, "'%.60s': fields left after a refusal", line);
  CHECK(strstr(nexar_last_error(), why), "'%.60s': error lacks '%s': %s", line, why,
        nexar_last_error());
}

static void test_codec(void) {
  dec_ok("cmd=get_result rc=0 msg=success value=vm:46631");
  CHECK(M.n == 4 && !strcmp(nx_pmi_get(&M, "value"), "vm:46631") &&
            !strcmp(nx_pmi_get(&M, "msg"), "success"),
        "hydra get_result");
  CHECK(nx_pmi_expect(&M, "get_result", "t") == 0, "expect");
  CHECK(nx_pmi_expect(&M, "put_result", "t") == NEXAR_ERR_PROTOCOL, "wrong cmd accepted");
  dec_ok("cmd=get_result rc=-1 msg=key nexar-seed not found");
  CHECK(!strcmp(nx_pmi_get(&M, "msg"), "key nexar-seed not found"), "msg: '%s'",
        nx_pmi_get(&M, "msg"));
  CHECK(nx_pmi_expect(&M, "get_result", "PMI get") == NEXAR_ERR_IO, "rc=-1 not refused");
  CHECK(strstr(nexar_last_error(), "rc=-1: key nexar-seed not found"), "%s", nexar_last_error());
  dec_ok("cmd=barrier_out");
  dec_ok("  cmd=maxes   kvsname_max=256 keylen_max=64 vallen_max=1024 ");
  CHECK(M.n == 4 && !strcmp(nx_pmi_get(&M, "vallen_max"), "1024"), "spaces");
  dec_ok("cmd=get_result rc=0 value=");
  CHECK(!strcmp(nx_pmi_get(&M, "value"), ""), "empty value");

  dec_bad("", 0, "empty line");
  dec_bad("   ", 3, "empty line");
  dec_bad("rc=0 cmd=x", 10, "first key is not cmd");
  dec_bad("cmd=", 4, "empty cmd");
  dec_bad("cmd=a rc=0 rc=1", 15, "twice");
  dec_bad("cmd=a value=b=c", 15, "bad character");
  dec_bad("cmd=a junk", 10, "expected '='");
  dec_bad("cmd=a =x", 8, "expected a key");
  dec_bad("cmd=a v=\x01", 9, "bad character");
  dec_bad("cmd=a msg=ok\tno", 15, "bad character");
  dec_bad("cmd=a v=x\r", 10, "bad character");
  char line[NX_PMI_LINE_MAX + 100];
  memset(line, 'k', 100);
  memcpy(line, "cmd=a ", 6);
  memcpy(line + 80, "=v", 2);
  dec_bad(line, 82, "key too long");
  size_t o = (size_t)snprintf(line, sizeof line, "cmd=a");
  for (int i = 0; i < NX_PMI_FIELDS_MAX; i++)
    o += (size_t)snprintf(line + o, sizeof line - o, " k%d=v", i);
  dec_bad(line, o, "too many fields");
  dec_bad(line, NX_PMI_LINE_MAX + 1, "too long");

  size_t ll = 0;
  CHECK(nx_pmi_line("cmd=a\ncmd=b\n", 12, &ll) == 1 && ll == 5, "framing");
  CHECK(nx_pmi_line("cmd=a", 5, &ll) == 0, "partial line");
  CHECK(nx_pmi_line("cmd\0=a\n", 7, &ll) == NEXAR_ERR_PROTOCOL, "NUL accepted");
  memset(line, 'a', sizeof line);
  CHECK(nx_pmi_line(line, NX_PMI_LINE_MAX, &ll) == 0, "a full line without newline yet");
  CHECK(nx_pmi_line(line, NX_PMI_LINE_MAX + 1, &ll) == NEXAR_ERR_PROTOCOL, "endless line accepted");

  char out[NX_PMI_LINE_MAX + 2];
  size_t len;
  const char *kv[] = {"kvsname", "kvs_1", "key", "nexar-seed", "value", "h:1"};
  CHECK(nx_pmi_encode(out, sizeof out, &len, "put", kv, 3) == 0 &&
            !strcmp(out, "cmd=put kvsname=kvs_1 key=nexar-seed value=h:1\n") && len == strlen(out),
        "encode: %s", out);
  const char *sp[] = {"value", "a b"}, *eq[] = {"value", "a=b"}, *k2[] = {"k y", "v"},
             *nl[] = {"value", "a\nb"};
  CHECK(nx_pmi_encode(out, sizeof out, &len, "put", sp, 1) == NEXAR_ERR_INVALID_ARGUMENT, "space");
  CHECK(nx_pmi_encode(out, sizeof out, &len, "put", eq, 1) == NEXAR_ERR_INVALID_ARGUMENT, "'='");
  CHECK(nx_pmi_encode(out, sizeof out, &len, "put", k2, 1) == NEXAR_ERR_INVALID_ARGUMENT, "key");
  CHECK(nx_pmi_encode(out, sizeof out, &len, "put", nl, 1) == NEXAR_ERR_INVALID_ARGUMENT,
        "newline");
  CHECK(nx_pmi_encode(out, 10, &len, "put", kv, 3) == NEXAR_ERR_INVALID_ARGUMENT, "too small");
}

/* ------------------------------------------------------- a fake launcher */

typedef struct script {
  int fd;
  const char *const *replies; /* one per request read; NULL: close; "" : say nothing */
  int bytewise;               /* write each reply one byte at a time */
} script;

static void *server(void *arg) {
  script *s = arg;
  char buf[4096];
  size_t have = 0;
  for (const char *const *r = s->replies; *r; r++) {
    /* read one request line */
    for (;;) {
      char *nl = memchr(buf, '\n', have);
      if (nl) {
        size_t used = (size_t)(nl - buf) + 1;
        memmove(buf, buf + used, have - used);
        have -= used;
        break;
      }
      ssize_t n = read(s->fd, buf + have, sizeof buf - have);
      if (n <= 0) goto out;
      have += (size_t)n;
    }
    if (!**r) { /* silence: wait for the client to give up */
      char c;
      while (read(s->fd, &c, 1) > 0) {
      }
      goto out;
    }
    size_t len = strlen(*r);
    if (s->bytewise) {
      for (size_t i = 0; i < len; i++)
        if (send(s->fd, *r + i, 1, MSG_NOSIGNAL) != 1) goto out;
    } else if (send(s->fd, *r, len, MSG_NOSIGNAL) != (ssize_t)len) {
      break;
    }
  }
out:
  close(s->fd);
  return NULL;
}

static int bytewise_next; /* the next fake launcher writes byte by byte */

static int run_open(const char *const *replies, uint32_t timeout_ms, nx_kvs **kvs, pthread_t *thr,
                    script *s) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
  s->fd = sv[1];
  s->replies = replies;
  s->bytewise = bytewise_next;
  bytewise_next = 0;
  CHECK(pthread_create(thr, NULL, server, s) == 0, "thread");
  char fd[16];
  snprintf(fd, sizeof fd, "%d", sv[0]);
  setenv("PMI_FD", fd, 1);
  setenv("PMI_RANK", "1", 1);
  setenv("PMI_SIZE", "2", 1);
  int rc = nx_pmi_open(kvs, timeout_ms);
  if (rc) close(sv[0]); /* on failure the launcher's fd stays open: ours to close */
  return rc;
}

#define HYDRA_INIT "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
#define HYDRA_MAXES "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n"
#define HYDRA_KVS "cmd=my_kvsname kvsname=kvs_1_0\n"

/* silent: the fake launcher says nothing, so the open must give up after its
 * timeout (400 ms); otherwise the launcher answers and the 10 s timeout
 * leaves room for a loaded machine. */
static void open_fails_t(const char *const *replies, int want, const char *why, uint32_t ms) {
  nx_kvs *kvs = NULL;
  pthread_t thr;
  script s;
  uint64_t t0 = nx_now_ns();
  int rc = run_open(replies, ms, &kvs, &thr, &s);
  CHECK(rc == want, "%s: rc %d, want %d", why, rc, want);
  CHECK(strstr(nexar_last_error(), why), "error lacks '%s': %s", why, nexar_last_error());
  CHECK(nx_now_ns() - t0 < (uint64_t)ms * 1000000u + 3000000000ull, "%s: took too long", why);
  CHECK(kvs == NULL, "kvs set on failure");
  pthread_join(thr, NULL);
}

static void open_fails(const char *const *replies, int want, const char *why) {
  open_fails_t(replies, want, why, 10000);
}

static void test_client(void) {
  /* the whole exchange as Hydra answers it, rank 1 reading rank 0's value */
  const char *good[] = {HYDRA_INIT,
                        HYDRA_MAXES,
                        HYDRA_KVS,
                        "cmd=barrier_out\n",
                        "cmd=get_result rc=0 msg=success value=vm:46631\n",
                        "cmd=finalize_ack\n",
                        NULL};
  nx_kvs *kvs = NULL;
  pthread_t thr;
  script s;
  CHECK(run_open(good, 2000, &kvs, &thr, &s) == 0, "open");
  CHECK(kvs->rank == 1 && kvs->world == 2 && !strcmp(kvs->name, "PMI-1"), "rank/world");
  char v[NX_LAUNCH_VAL_MAX];
  CHECK(kvs->share(kvs, NULL, v, sizeof v, 2000) == 0 && !strcmp(v, "vm:46631"), "share: %s", v);
  kvs->close(kvs);
  pthread_join(thr, NULL);
  /* PMI_FD is closed now: a second open must not write to whatever has its number */
  CHECK(nx_pmi_open(&kvs, 100) == NEXAR_ERR_UNSUPPORTED &&
            strstr(nexar_last_error(), "already used"),
        "second PMI-1 open accepted");
  nx_pmi_forget();

  /* the same exchange with every reply split into one-byte reads */
  bytewise_next = 1;
  CHECK(run_open(good, 2000, &kvs, &thr, &s) == 0, "open, bytewise");
  CHECK(kvs->share(kvs, NULL, v, sizeof v, 2000) == 0 && !strcmp(v, "vm:46631"), "bytewise: %s", v);
  kvs->close(kvs);
  pthread_join(thr, NULL);
  nx_pmi_forget();

  const char *bad_ver[] = {"cmd=response_to_init pmi_version=2 rc=0\n", NULL};
  open_fails(bad_ver, NEXAR_ERR_PROTOCOL, "PMI version 2");
  const char *garbage[] = {"hello there\n", NULL};
  open_fails(garbage, NEXAR_ERR_PROTOCOL, "PMI init: PMI: malformed reply");
  const char *wrong[] = {"cmd=barrier_out\n", NULL};
  open_fails(wrong, NEXAR_ERR_PROTOCOL, "expected cmd=response_to_init");
  const char *refuse[] = {"cmd=response_to_init pmi_version=1 rc=-1 msg=go away\n", NULL};
  open_fails(refuse, NEXAR_ERR_IO, "rc=-1: go away");
  const char *closes[] = {NULL};
  open_fails(closes, NEXAR_ERR_IO,
             "PMI_FD="); /* "closed PMI_FD=3" or "writing to ... PMI_FD=3: Broken pipe" */
  const char *silent[] = {"", NULL};
  open_fails_t(silent, NEXAR_ERR_TIMEOUT, "no answer", 400);
  static char endless[NX_PMI_LINE_MAX + 600];
  memset(endless, 'x', sizeof endless - 1);
  const char *toolong[] = {endless, NULL};
  open_fails(toolong, NEXAR_ERR_PROTOCOL, "longer than");
  const char *nomax[] = {HYDRA_INIT, "cmd=maxes kvsname_max=256 keylen_max=64\n", NULL};
  open_fails(nomax, NEXAR_ERR_PROTOCOL, "no valid vallen_max");
  const char *tiny[] = {HYDRA_INIT, "cmd=maxes kvsname_max=256 keylen_max=4 vallen_max=8\n", NULL};
  open_fails(tiny, NEXAR_ERR_PROTOCOL, "too small");
  const char *nokvs[] = {HYDRA_INIT, HYDRA_MAXES, "cmd=my_kvsname\n", NULL};
  open_fails(nokvs, NEXAR_ERR_PROTOCOL, "no kvsname");

  /* a get the launcher refuses, and a value longer than the caller's buffer */
  const char *miss[] = {HYDRA_INIT,
                        HYDRA_MAXES,
                        HYDRA_KVS,
                        "cmd=barrier_out\n",
                        "cmd=get_result rc=-1 msg=key_nexar-seed_not_found\n",
                        "cmd=finalize_ack\n",
                        NULL};
  CHECK(run_open(miss, 2000, &kvs, &thr, &s) == 0, "open");
  nx_pmi_forget();
  CHECK(kvs->share(kvs, NULL, v, sizeof v, 2000) == NEXAR_ERR_IO, "missing key");
  CHECK(strstr(nexar_last_error(), "not_found"), "%s", nexar_last_error());
  kvs->close(kvs);
  pthread_join(thr, NULL);
  const char *longv[] = {HYDRA_INIT,
                         HYDRA_MAXES,
                         HYDRA_KVS,
                         "cmd=barrier_out\n",
                         "cmd=get_result rc=0 value=0123456789abcdef\n",
                         "cmd=finalize_ack\n",
                         NULL};
  CHECK(run_open(longv, 2000, &kvs, &thr, &s) == 0, "open");
  nx_pmi_forget();
  CHECK(kvs->share(kvs, NULL, v, 8, 2000) == NEXAR_ERR_PROTOCOL, "long value accepted");
  kvs->close(kvs);
  pthread_join(thr, NULL);

  /* the environment itself */
  setenv("PMI_FD", "x", 1);
  CHECK(nx_pmi_open(&kvs, 100) == NEXAR_ERR_INVALID_ARGUMENT &&
            strstr(nexar_last_error(), "PMI_FD"),
        "bad PMI_FD");
  setenv("PMI_FD", "999", 1);
  CHECK(nx_pmi_open(&kvs, 100) == NEXAR_ERR_INVALID_ARGUMENT &&
            strstr(nexar_last_error(), "not an open descriptor"),
        "closed PMI_FD");
  setenv("PMI_FD", "0", 1);
  setenv("PMI_RANK", "2", 1);
  CHECK(nx_pmi_open(&kvs, 100) == NEXAR_ERR_INVALID_ARGUMENT &&
            strstr(nexar_last_error(), "rank 2 is outside a world of 2"),
        "rank outside");
  unsetenv("PMI_SIZE");
  CHECK(nx_pmi_open(&kvs, 100) == NEXAR_ERR_INVALID_ARGUMENT &&
            strstr(nexar_last_error(), "PMI_SIZE is not"),
        "no PMI_SIZE");
}

int main(void) {
  /* SIGPIPE keeps its default: the "closes" case has the client write to a
   * launcher that is gone, which must be NEXAR_ERR_IO, not a dead process */
  test_codec();
  test_client();
  printf("pmi ok\n");
  return 0;
}
