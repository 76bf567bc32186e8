/* libFuzzer target: the seed's pre-authentication parser. The input is what a
 * stranger sends to the seed's port before proving the cluster token: it is
 * written into a socket pair (then the write side is shut) and the seed side
 * of the bootstrap handshake (nx_chan_server: GnuTLS's ClientHello parsing
 * with our PSK callback, alert and error mapping) runs on the other end. No
 * input may complete the handshake (that needs the token and the server's
 * fresh random), and every failure must map to AUTH, IO, TIMEOUT or TLS.
 *
 * Build: see fuzz/CMakeLists.txt (CC=clang -DNEXAR_FUZZ=ON).
 * Smoke run without libFuzzer: -DNX_FUZZ_STANDALONE, pass corpus files or
 * directories; "--write-seeds DIR" records a real worker's first flight. */
#include "cluster/chan.h"
#include "core/common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FUZZ_TOKEN "fuzz-cluster-token"
#define FUZZ_MAX (64u * 1024u) /* fits a socket pair's buffer: the write never blocks */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > FUZZ_MAX) size = FUZZ_MAX;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  int big = 4 * FUZZ_MAX;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  fcntl(sv[0], F_SETFL, O_NONBLOCK);
  size_t off = 0;
  while (off < size) {
    ssize_t n = send(sv[0], data + off, size - off, MSG_NOSIGNAL);
    if (n <= 0) break; /* the rest does not fit: the seed sees a shorter input */
    off += (size_t)n;
  }
  shutdown(sv[0], SHUT_WR);
  nx_chan *ch = NULL;
  int rc = nx_chan_server(&ch, sv[1], FUZZ_TOKEN, 200); /* takes sv[1] */
  if (rc == 0) {
    fprintf(stderr, "fuzz_chan: %zu unauthenticated bytes completed the handshake\n", size);
    abort();
  }
  if (ch || (rc != NEXAR_ERR_AUTH && rc != NEXAR_ERR_IO && rc != NEXAR_ERR_TIMEOUT &&
             rc != NEXAR_ERR_TLS)) {
    fprintf(stderr, "fuzz_chan: handshake failure mapped to %d (%s)\n", rc, nexar_last_error());
    abort();
  }
  if (getenv("FUZZ_CHAN_VERBOSE")) fprintf(stderr, "%zu bytes: %s\n", size, nexar_last_error());
  close(sv[0]);
  return 0;
}

#ifdef NX_FUZZ_STANDALONE
#include <dirent.h>

static int write_file(const char *dir, const char *name, const uint8_t *b, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(b, 1, n, f) != n) {
    if (f) fclose(f);
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  return fclose(f) != 0;
}

typedef struct client_arg {
  char addr[64];
  const char *token;
} client_arg;

static void *client_main(void *arg) {
  client_arg *a = arg;
  nx_chan *ch = NULL;
  if (nx_chan_connect(&ch, a->addr, a->token, 1000) == 0) nx_chan_del(ch);
  return NULL;
}

/* A real worker's first flight (its ClientHello), with our token and with
 * another one, plus two strangers' openings. */
static int write_seeds(const char *dir) {
  int bad = 0;
  const char *tokens[2] = {FUZZ_TOKEN, "some-other-token"};
  for (int k = 0; k < 2; k++) {
    int lfd;
    client_arg a = {.token = tokens[k]};
    if (nx_chan_listen(&lfd, "127.0.0.1:0", a.addr, sizeof a.addr)) return 1;
    pthread_t t;
    if (pthread_create(&t, NULL, client_main, &a)) return 1;
    int fd = accept(lfd, NULL, NULL);
    uint8_t buf[8192];
    size_t n = 0;
    struct timeval tv = {0, 300000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    for (ssize_t r; n < sizeof buf && (r = recv(fd, buf + n, sizeof buf - n, 0)) > 0;)
      n += (size_t)r;
    close(fd); /* the client fails: it never hears back */
    pthread_join(t, NULL);
    close(lfd);
    bad |= n == 0 || write_file(dir, k ? "clienthello_other_token" : "clienthello", buf, n);
  }
  static const char http[] = "GET / HTTP/1.1\r\nHost: seed\r\n\r\n";
  bad |= write_file(dir, "http", (const uint8_t *)http, sizeof http - 1);
  static const uint8_t tls12[] = {0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00};
  bad |= write_file(dir, "short_record", tls12, sizeof tls12);
  return bad;
}

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  uint8_t *b = malloc(FUZZ_MAX);
  size_t n = b ? fread(b, 1, FUZZ_MAX, f) : 0;
  fclose(f);
  if (!b) return 1;
  LLVMFuzzerTestOneInput(b, n);
  free(b);
  return 0;
}

static int run_path(const char *path) {
  DIR *d = opendir(path);
  if (!d) return run_file(path);
  int bad = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    bad |= run_file(p);
  }
  closedir(d);
  return bad;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
  int bad = 0, runs = 0;
  for (int i = 1; i < argc; i++, runs++)
    bad |= run_path(argv[i]);
  printf("fuzz_chan: ran %d path(s)%s\n", runs, bad ? ", some unreadable" : "");
  return bad;
}
#endif
