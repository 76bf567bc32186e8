/* The address helper (core/addr.c): "host:port" and "[v6]:port" split and
 * joined back, numeric printing of socket addresses, clear refusals that name
 * the field, bounded inputs. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "core/addr.h"
#include "core/common.h"
#include "check.h"

#define CHK(cond) CHECK(cond, "%s", #cond)

static void ok(const char *in, const char *host, uint16_t port) {
  char h[NX_ADDR_HOST_MAX];
  uint16_t p = 1;
  CHECK(nx_addr_split(in, "TEST_VAR", h, sizeof h, &p) == 0, "'%s' refused", in);
  CHECK(strcmp(h, host) == 0 && p == port, "'%s' -> '%s' %u", in, h, p);
  /* joined back: the same text (brackets for IPv6) */
  char out[NX_ADDR_TEXT_MAX + 8];
  CHECK(nx_addr_join(out, sizeof out, h, p) == 0 && strcmp(out, in) == 0, "'%s' joins as '%s'", in,
        out);
}

/* Refused with INVALID_ARGUMENT; the sentence names the field and has want. */
static void bad(const char *in, const char *want) {
  char h[NX_ADDR_HOST_MAX];
  uint16_t p;
  int rc = nx_addr_split(in, "TEST_VAR", h, sizeof h, &p);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT, "'%s' accepted (rc %d)", in ? in : "(null)", rc);
  const char *e = nexar_last_error();
  CHECK(strncmp(e, "TEST_VAR", 8) == 0, "'%s': error does not name the field: %s", in, e);
  CHECK(strstr(e, want) != NULL, "'%s': error lacks '%s': %s", in, want, e);
  CHECK(strlen(e) < 400, "'%s': error not bounded (%zu bytes)", in, strlen(e));
}

static void test_split(void) {
  ok("127.0.0.1:0", "127.0.0.1", 0);
  ok("10.1.2.3:65535", "10.1.2.3", 65535);
  ok("0.0.0.0:29500", "0.0.0.0", 29500);
  ok("localhost:80", "localhost", 80);
  ok("node-7.cluster_a.example:5000", "node-7.cluster_a.example", 5000);
  ok("*:0", "*", 0);
  ok("[::1]:0", "::1", 0);
  ok("[::]:29500", "::", 29500);
  ok("[fd00:6e78::3]:4711", "fd00:6e78::3", 4711);
  ok("[fe80::1%eth0]:1", "fe80::1%eth0", 1);
  ok("[::ffff:10.0.0.1]:9", "::ffff:10.0.0.1", 9);

  bad(NULL, "empty");
  bad("", "empty");
  bad("::1:59003", "[::1]:59003"); /* the message of the original bug: now says how */
  bad("::1", "[::1]:port");
  bad("fd00::1", "[fd00::1]:port");
  bad("a:b:c", "expected host:port");
  bad("nohost", "no port");
  bad(":5000", "no host");
  bad("[::1]", "expected ':port'");
  bad("[::1]5000", "expected ':port'");
  bad("[::1:5000", "no ']'");
  bad("[nothost]:1", "not an IPv6 address");
  bad("[10.0.0.1]:1", "not an IPv6 address");
  bad("[]:1", "not an IPv6 address");
  bad("[fe80::1%]:1", "not an IPv6 address");
  bad("host:", "port");
  bad("host:99999", "port");
  bad("host:123456", "port");
  bad("host:-1", "port");
  bad("host:+80", "port");
  bad("host: 80", "port");
  bad("host:80x", "port");
  bad("256.1.1.1:0", "not a host name or IPv4 address");
  bad("1.2.3.4.5:0", "not a host name or IPv4 address");
  bad("ho st:80", "not a host name");
  bad("host\n:80", "not a host name");
  bad("-host:80", "not a host name");
  bad("h/ost:80", "not a host name");

  /* long inputs: refused, and quoted only in part */
  char big[2000];
  memset(big, 'a', sizeof big);
  memcpy(big + sizeof big - 6, ":5000", 6);
  bad(big, "longer than");
  CHECK(strlen(nexar_last_error()) < 200, "long input echoed: %zu bytes",
        strlen(nexar_last_error()));
  /* a host that fits the text limit but not the caller's buffer */
  char h[8];
  uint16_t p;
  CHK(nx_addr_split("averylonghostname:1", "X", h, sizeof h, &p) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(strstr(nexar_last_error(), "longer than 7") != NULL, "%s", nexar_last_error());
  /* no field name: "address" */
  CHK(nx_addr_split("x", NULL, h, sizeof h, &p) == NEXAR_ERR_INVALID_ARGUMENT);
  CHECK(strncmp(nexar_last_error(), "address 'x'", 11) == 0, "%s", nexar_last_error());
  /* the old entry point parses the same way */
  char hh[64];
  CHK(nx_split_hostport("[::1]:7", hh, sizeof hh, &p) == 0 && !strcmp(hh, "::1") && p == 7);
}

static void test_join(void) {
  char out[32];
  CHECK(nx_addr_join(out, sizeof out, "::1", 5) == 0 && !strcmp(out, "[::1]:5"), "%s", out);
  CHK(nx_addr_join(out, sizeof out, "1.2.3.4", 5) == 0 && !strcmp(out, "1.2.3.4:5"));
  CHECK(nx_addr_join(out, sizeof out, "[::1]", 5) == 0 && !strcmp(out, "[::1]:5"), "%s", out);
  CHK(nx_addr_join(out, 6, "1.2.3.4", 5) == NEXAR_ERR_INVALID_ARGUMENT && !strcmp(out, "?"));
}

static void test_format(void) {
  char out[64];
  struct sockaddr_in v4 = {.sin_family = AF_INET, .sin_port = htons(80)};
  inet_pton(AF_INET, "10.0.0.7", &v4.sin_addr);
  CHECK(nx_addr_format((struct sockaddr *)&v4, sizeof v4, out, sizeof out, 1) == 0 &&
            !strcmp(out, "10.0.0.7:80"),
        "%s", out);
  CHK(nx_addr_format((struct sockaddr *)&v4, sizeof v4, out, sizeof out, 0) == 0 &&
      !strcmp(out, "10.0.0.7"));
  struct sockaddr_in6 v6 = {.sin6_family = AF_INET6, .sin6_port = htons(443)};
  inet_pton(AF_INET6, "fd00:6e78::2", &v6.sin6_addr);
  CHECK(nx_addr_format((struct sockaddr *)&v6, sizeof v6, out, sizeof out, 1) == 0 &&
            !strcmp(out, "[fd00:6e78::2]:443"),
        "%s", out);
  CHK(nx_addr_format((struct sockaddr *)&v6, sizeof v6, out, 8, 1) == -1 && !strcmp(out, "?"));
  /* v4-mapped prints as plain v4, and maps back and forth */
  struct sockaddr_storage ss;
  socklen_t len = sizeof v4;
  memcpy(&ss, &v4, sizeof v4);
  nx_sockaddr_map_v4(&ss, &len);
  CHK(ss.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6));
  CHK(IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&ss)->sin6_addr));
  CHK(nx_sockaddr_port((struct sockaddr *)&ss) == 80);
  CHECK(nx_addr_format((struct sockaddr *)&ss, len, out, sizeof out, 1) == 0 &&
            !strcmp(out, "10.0.0.7:80"),
        "%s", out);
  nx_sockaddr_unmap_v4(&ss, &len);
  CHK(ss.ss_family == AF_INET && len == sizeof v4 &&
      !memcmp(&((struct sockaddr_in *)&ss)->sin_addr, &v4.sin_addr, 4));
  nx_sockaddr_set_port((struct sockaddr *)&ss, 9);
  CHK(nx_sockaddr_port((struct sockaddr *)&ss) == 9);
  /* a real IPv6 address is not "unmapped" */
  memcpy(&ss, &v6, sizeof v6);
  len = sizeof v6;
  nx_sockaddr_unmap_v4(&ss, &len);
  CHK(ss.ss_family == AF_INET6 && len == sizeof v6);
}

static void test_predicates(void) {
  CHK(nx_addr_is_wildcard("") && nx_addr_is_wildcard("*") && nx_addr_is_wildcard("0.0.0.0") &&
      nx_addr_is_wildcard("::") && nx_addr_is_wildcard(NULL));
  CHK(!nx_addr_is_wildcard("::1") && !nx_addr_is_wildcard("127.0.0.1"));
  CHK(nx_addr_is_v6("::1") && nx_addr_is_v6("[::1]") && !nx_addr_is_v6("host") &&
      !nx_addr_is_v6(NULL));
}

/* The config field and its variable: the error names both. */
static void test_config(void) {
  nexar_config c;
  CHK(nexar_config_default(&c) == 0);
  c.bind_addr = "::1:0";
  nexar_client *cl[1] = {NULL};
  CHK(nexar_bootstrap_local(cl, 1, &c) == NEXAR_ERR_INVALID_ARGUMENT);
  const char *e = nexar_last_error();
  CHECK(strstr(e, "config.bind_addr") && strstr(e, "NEXAR_BIND_ADDR") && strstr(e, "[::1]:0"), "%s",
        e);
}

int main(void) {
  test_split();
  test_join();
  test_format();
  test_predicates();
  test_config();
  printf("addr_test: ok\n");
  return 0;
}
