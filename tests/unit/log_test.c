/* NEXAR_DEBUG_FILE templates: the expansion of %h, %p, %r and %% is
 * length-safe (a value longer than the buffer is refused, never written past
 * it), and the logger set up from the environment survives a RANK of 600
 * characters and a template that repeats it (it used to smash its stack). */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/common.h"

static void test_expand(void) {
  char out[64];
  CHECK(nx_log_expand("nexar-%h-%p-%r.log", "3", "node1", 42, out, sizeof out) == 0, "plain");
  CHECK(strcmp(out, "nexar-node1-42-3.log") == 0, "plain: %s", out);
  CHECK(nx_log_expand("a%%b%zc%", NULL, NULL, 1, out, sizeof out) == 0, "escapes");
  CHECK(strcmp(out, "a%b%zc%") == 0, "escapes: %s", out);
  CHECK(nx_log_expand("%r-%h", NULL, NULL, 1, out, sizeof out) == 0 && strcmp(out, "x-x") == 0,
        "NULL rank and host: %s", out);

  /* exactly fitting, and one byte too long */
  CHECK(nx_log_expand("abc", "", "", 0, out, 4) == 0 && strcmp(out, "abc") == 0, "fit");
  memset(out, 'Z', sizeof out);
  CHECK(nx_log_expand("abcd", "", "", 0, out, 4) == -1 && out[0] == '\0' && out[4] == 'Z',
        "one byte over must be refused without writing past cap");
  out[0] = 'Z';
  CHECK(nx_log_expand("abc", "", "", 0, out, 0) == -1 && out[0] == 'Z', "cap 0 writes nothing");
  CHECK(nx_log_expand("", "", "", 0, out, 1) == 0 && out[0] == '\0', "empty template");

  /* long values: a 600-character rank and a 100-character host name */
  char rank[601], host[101];
  memset(rank, '7', 600);
  rank[600] = '\0';
  memset(host, 'h', 100);
  host[100] = '\0';
  char path[512];
  memset(path, 'Z', sizeof path);
  CHECK(nx_log_expand("x-%r.log", rank, host, 1, path, sizeof path) == -1 && path[0] == '\0',
        "600-character rank into 512 bytes must be refused");
  CHECK(nx_log_expand("%h%h%h%h%h%h", "1", host, 1, path, sizeof path) == -1,
        "600-character host expansion into 512 bytes must be refused");
  CHECK(nx_log_expand("%h%h%h%h%h", "1", host, 1, path, 501) == 0 && strlen(path) == 500,
        "500 characters fit in 501");
  char big[PATH_MAX];
  CHECK(nx_log_expand("x-%r.log", rank, host, 1, big, sizeof big) == 0 && strlen(big) == 606 &&
            strncmp(big, "x-777", 5) == 0 && strcmp(big + 602, ".log") == 0,
        "600-character rank into PATH_MAX");
  char *heap = malloc(33); /* ASan sees a heap overrun at once */
  CHECK(heap, "malloc");
  CHECK(nx_log_expand("%h", "1", host, 1, heap, 33) == -1, "100-character host into 33");
  CHECK(nx_log_expand("%p%p%p%p", "1", host, 1234567890, heap, 33) == -1, "40 > 32");
  CHECK(nx_log_expand("%p%p%p", "1", host, 1234567890, heap, 33) == 0 && strlen(heap) == 30,
        "30 <= 32: %s", heap);
  free(heap);
}

/* In a child: NEXAR_DEBUG=info, NEXAR_DEBUG_FILE=tmpl, RANK=rank; sets up the
 * logger and writes one line. Returns the child's wait status; its stderr
 * goes to errpath. */
static int run_logger(const char *tmpl, const char *rank, const char *errpath) {
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || dup2(fd, 2) < 0) _exit(90);
    setenv("NEXAR_DEBUG", "info", 1);
    setenv("NEXAR_DEBUG_FILE", tmpl, 1);
    setenv("RANK", rank, 1);
    nx_log_init();
    NX_INFO("log_test line");
    _exit(0);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  return st;
}

static size_t slurp(const char *path, char *buf, size_t cap) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, cap - 1, f);
  fclose(f);
  buf[n] = '\0';
  return n;
}

static void test_from_env(void) {
  char dir[] = "/tmp/nexar_log_XXXXXX";
  CHECK(mkdtemp(dir), "mkdtemp");
  char tmpl[PATH_MAX], errpath[PATH_MAX], want[PATH_MAX], buf[4096];
  snprintf(errpath, sizeof errpath, "%s/stderr", dir);

  /* an ordinary template: the file is made and gets the line */
  snprintf(tmpl, sizeof tmpl, "%s/x-%%r.log", dir);
  int st = run_logger(tmpl, "5", errpath);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "ordinary template: status %#x", st);
  snprintf(want, sizeof want, "%s/x-5.log", dir);
  CHECK(slurp(want, buf, sizeof buf) && strstr(buf, "log_test line"), "no line in %s", want);
  unlink(want);

  /* a 600-character RANK: no crash; the file name is too long for the file
   * system, so the logger says so and falls back to stderr */
  char rank[601];
  memset(rank, '9', 600);
  rank[600] = '\0';
  st = run_logger(tmpl, rank, errpath);
  slurp(errpath, buf, sizeof buf);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "600-character RANK: status %#x; stderr: %.300s", st,
        buf);
  CHECK(strstr(buf, "NEXAR_DEBUG_FILE") && strstr(buf, "log_test line"),
        "600-character RANK: expected a notice and the line on stderr: %.300s", buf);

  /* a template that expands past PATH_MAX: refused, not overrun */
  char longrank[201];
  memset(longrank, '8', 200);
  longrank[200] = '\0';
  size_t o = (size_t)snprintf(tmpl, sizeof tmpl, "%s/", dir);
  for (int i = 0; i < 30; i++)
    o += (size_t)snprintf(tmpl + o, sizeof tmpl - o, "%%r/");
  st = run_logger(tmpl, longrank, errpath);
  slurp(errpath, buf, sizeof buf);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "6000-byte expansion: status %#x; stderr: %.300s",
        st, buf);
  CHECK(strstr(buf, "longer than") && strstr(buf, "log_test line"),
        "6000-byte expansion: expected the refusal and the line on stderr: %.300s", buf);
  unlink(errpath);
  rmdir(dir);
}

int main(void) {
  test_expand();
  test_from_env();
  printf("log_test ok\n");
  return 0;
}
