/* Slurm hostlist expansion (core/hostlist.c): ranges, lists, zero padding,
 * several prefixes and groups, and refusals of malformed lists. */
#include <string.h>

#include "core/common.h"
#include "core/hostlist.h"
#include "check.h"

typedef struct acc {
  char buf[4096];
  size_t n;
} acc;

static int add(void *ctx, size_t i, const char *host) {
  acc *a = ctx;
  CHECK(i == a->n, "index %zu, expected %zu", i, a->n);
  size_t o = strlen(a->buf);
  snprintf(a->buf + o, sizeof a->buf - o, "%s%s", o ? " " : "", host);
  a->n++;
  return 0;
}

/* list expands to the space-separated want */
static void ok(const char *list, const char *want) {
  acc a = {{0}, 0};
  int rc = nx_hostlist_walk(list, "TEST", add, &a);
  CHECK(rc == 0, "'%s' refused: %d", list, rc);
  CHECK(strcmp(a.buf, want) == 0, "'%s' -> '%s', want '%s'", list, a.buf, want);
  size_t n = 0;
  CHECK(nx_hostlist_count(list, "TEST", &n) == 0 && n == a.n, "'%s': count %zu vs %zu", list, n,
        a.n);
  char first[NX_HOSTLIST_NAME_MAX];
  CHECK(nx_hostlist_nth(list, "TEST", 0, first, sizeof first) == 0, "'%s': no first", list);
  CHECK(strncmp(want, first, strlen(first)) == 0 &&
            (want[strlen(first)] == ' ' || want[strlen(first)] == 0),
        "'%s': first '%s'", list, first);
}

static void refused(const char *list, const char *why) {
  acc a = {{0}, 0};
  int rc = nx_hostlist_walk(list, "TEST", add, &a);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT, "'%s' accepted (rc %d, '%s')", list ? list : "(null)", rc,
        a.buf);
  CHECK(a.n == 0, "'%s': %zu hosts delivered before the refusal", list, a.n);
  const char *e = nexar_last_error();
  CHECK(strncmp(e, "TEST", 4) == 0, "'%s': error does not name the source: %s", list, e);
  CHECK(strstr(e, why) != NULL, "'%s': error lacks '%s': %s", list, why, e);
  CHECK(strlen(e) < 300, "'%s': error unbounded", list);
}

static int stop_at_2(void *ctx, size_t i, const char *host) {
  (void)ctx, (void)host;
  return i == 2 ? 42 : 0;
}

int main(void) {
  ok("localhost", "localhost");
  ok("node1,node2", "node1 node2");
  ok("node[1-3]", "node1 node2 node3");
  ok("node[01-04,07],gpu-a[1-2]", "node01 node02 node03 node04 node07 gpu-a1 gpu-a2");
  ok("n[8-11]", "n8 n9 n10 n11");
  ok("n[008-010]", "n008 n009 n010");
  ok("n[5]", "n5");
  ok("n[0]", "n0");
  ok("r[1-2]n[01-02]", "r1n01 r1n02 r2n01 r2n02");
  ok("a[1-2]-ib", "a1-ib a2-ib");
  ok("c[3,1]x", "c3x c1x"); /* the order written */
  ok("host.example.com,h_2", "host.example.com h_2");
  ok("[1-2]", "1 2");
  ok("n[999999998-999999999]", "n999999998 n999999999");
  size_t n = 0;
  CHECK(nx_hostlist_count("big[0-999999]", "TEST", &n) == 0 && n == 1000000, "count %zu", n);
  char h[NX_HOSTLIST_NAME_MAX];
  CHECK(nx_hostlist_nth("big[0-999999]", "TEST", 999999, h, sizeof h) == 0 &&
            strcmp(h, "big999999") == 0,
        "nth: %s", h);
  CHECK(nx_hostlist_nth("a,b", "TEST", 2, h, sizeof h) == NEXAR_ERR_INVALID_ARGUMENT, "past end");
  CHECK(nx_hostlist_nth("abcdef", "TEST", 0, h, 4) == NEXAR_ERR_INVALID_ARGUMENT, "small buffer");
  CHECK(nx_hostlist_walk("a,b,c,d", "TEST", stop_at_2, NULL) == 42, "walk did not stop");

  refused(NULL, "no list");
  refused("", "empty list");
  refused("a,,b", "empty host name");
  refused("a,", "empty host name");
  refused(",a", "empty host name");
  refused("node[1-3", "'[' without ']'");
  refused("node1-3]", "']' without '['");
  refused("node[[1-2]]", "nested");
  refused("node[]", "empty bracket group");
  refused("node[3-1]", "ends below");
  refused("node[a-b]", "decimal digits");
  refused("node[1-]", "decimal digits");
  refused("node[-2]", "decimal digits");
  refused("node[1,]", "empty range");
  refused("node[1-2-3]", "unexpected character");
  refused("node[1234567890]", "decimal digits");
  refused("no de", "not allowed");
  refused("node;rm", "not allowed");
  refused("n[0-999999],m[0-99999]", "too many hosts");
  refused("a[0-9999]b[0-9999]", "too many hosts");
  refused("x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]x[1]",
          "too many bracket groups");
  char longname[400];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  refused(longname, "too long");
  printf("hostlist ok\n");
  return 0;
}
