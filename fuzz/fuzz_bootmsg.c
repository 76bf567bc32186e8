/* libFuzzer target: the bootstrap message decoders. Whatever decodes must re-encode to the
 * same bytes (the encoding is canonical), so a decoder that accepts something the encoder
 * would refuse, or drops information, aborts here.
 *
 * Build: clang -fsanitize=fuzzer,address -DNX_FUZZ -Iinclude -Isrc fuzz/fuzz_bootmsg.c
 *        src/cluster/{bootmsg,elasticmsg}.c src/core/{error,util,log}.c
 * Smoke run without libFuzzer: add -DNX_FUZZ_STANDALONE and pass corpus files or directories;
 * "--write-seeds DIR" writes the seed corpus. */
#include "cluster/bootmsg.h"
#include "core/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_or_abort(int rc, uint8_t *enc, size_t len, const uint8_t *data, size_t size,
                          const char *what) {
  if (rc != 0 || len != size || memcmp(enc, data, size) != 0) {
    fprintf(stderr, "fuzz_bootmsg: %s decoded but did not re-encode identically (%s)\n", what,
            nexar_last_error());
    abort();
  }
  free(enc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *enc = NULL;
  size_t len = 0;
  int type = nx_bootmsg_type(data, size);
  nx_hello h;
  if (nx_hello_decode(data, size, &h) == 0) {
    if (type != NX_BOOT_HELLO) abort();
    int rc = nx_hello_encode(&h, &enc, &len); /* before reading enc/len */
    same_or_abort(rc, enc, len, data, size, "hello");
    nx_hello_free(&h);
  } else if (h.csr) {
    abort(); /* a failed decode must own nothing */
  }
  nx_welcome w;
  if (nx_welcome_decode(data, size, &w) == 0) {
    if (type != NX_BOOT_WELCOME || w.rank >= w.world_size) abort();
    int rc = nx_welcome_encode(&w, &enc, &len); /* before reading enc/len */
    same_or_abort(rc, enc, len, data, size, "welcome");
    nx_welcome_free(&w);
  } else if (w.addrs || w.hosts || w.cert || w.ca_cert) {
    abort();
  }
  nx_refuse r;
  if (nx_refuse_decode(data, size, &r) == 0) {
    if (type != NX_BOOT_REFUSE || r.code >= 0) abort();
    int rc = nx_refuse_encode(&r, &enc, &len); /* before reading enc/len */
    same_or_abort(rc, enc, len, data, size, "refuse");
  }
  if (nx_formed_decode(data, size) == 0) {
    if (type != NX_BOOT_FORMED) abort();
    int rc = nx_formed_encode(&enc, &len);
    same_or_abort(rc, enc, len, data, size, "formed");
  }
  nx_lost l;
  if (nx_lost_decode(data, size, &l) == 0) {
    if (type != NX_BOOT_LOST || l.rank >= NX_BOOT_WORLD_MAX) abort();
    int rc = nx_lost_encode(&l, &enc, &len);
    same_or_abort(rc, enc, len, data, size, "lost");
  }
  if (nx_waiting_decode(data, size) == 0) {
    if (type != NX_BOOT_WAITING) abort();
    int rc = nx_waiting_encode(&enc, &len);
    same_or_abort(rc, enc, len, data, size, "waiting");
  }
  nx_admit_req q;
  if (nx_admit_req_decode(data, size, &q) == 0) {
    if (type != NX_BOOT_ADMIT_REQ || q.n == 0) abort();
    int rc = nx_admit_req_encode(&q, &enc, &len);
    same_or_abort(rc, enc, len, data, size, "admit request");
    nx_admit_req_free(&q);
  } else if (q.m) {
    abort();
  }
  nx_admit_list al;
  if (nx_admit_list_decode(data, size, &al) == 0) {
    if (type != NX_BOOT_ADMIT_LIST) abort();
    int rc = nx_admit_list_encode(&al, &enc, &len);
    same_or_abort(rc, enc, len, data, size, "admit list");
    nx_admit_list_free(&al);
  } else if (al.m) {
    abort();
  }
  nx_view_msg v;
  if (nx_view_decode(data, size, &v) == 0) {
    if (type != NX_BOOT_VIEW || v.nstay >= v.n) abort();
    int rc = nx_view_encode(&v, &enc, &len);
    same_or_abort(rc, enc, len, data, size, "view");
    nx_view_free(&v);
  } else if (v.ids) {
    abort();
  }
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

/* A few valid messages of each type; the fuzzer mutates from there. */
static int write_seeds(const char *dir) {
  uint8_t blob[200], *b = NULL;
  size_t n = 0;
  int bad = 0;
  for (size_t i = 0; i < sizeof blob; i++)
    blob[i] = (uint8_t)(0x30 + i);
  nx_hello h = {.version = NX_BOOT_VERSION, .requested_rank = NX_BOOT_ANY_RANK};
  snprintf(h.listen_addr, sizeof h.listen_addr, "10.1.2.3:4791");
  snprintf(h.hostname, sizeof h.hostname, "worker-a");
  h.csr = blob;
  h.csr_len = 64;
  bad |= nx_hello_encode(&h, &b, &n) || write_file(dir, "hello_any", b, n);
  free(b);
  h.requested_rank = 2;
  h.world_size = 4;
  h.topology = NEXAR_TOPO_HYPERCUBE;
  h.topology_degree = 2;
  snprintf(h.listen_addr, sizeof h.listen_addr, "[fd00::12]:6000");
  bad |= nx_hello_encode(&h, &b, &n) || write_file(dir, "hello_v6", b, n);
  free(b);

  char addrs[3][NX_ADDR_MAX] = {"10.0.0.1:1000", "node-b.example:2000", "[::1]:3000"};
  char hosts[3][NX_HOST_MAX] = {"a", "", "c"};
  nx_welcome w = {.rank = 1,
                  .world_size = 3,
                  .ca_cert = blob,
                  .ca_len = 40,
                  .cert = blob + 40,
                  .cert_len = 30,
                  .addrs = addrs,
                  .hosts = hosts};
  memset(w.cluster_id, 0x5a, sizeof w.cluster_id);
  bad |= nx_welcome_encode(&w, &b, &n) || write_file(dir, "welcome3", b, n);
  free(b);
  w.world_size = 1;
  w.rank = 0;
  bad |= nx_welcome_encode(&w, &b, &n) || write_file(dir, "welcome1", b, n);
  free(b);

  nx_refuse r = {.code = NEXAR_ERR_AUTH};
  snprintf(r.reason, sizeof r.reason, "rank 2 already taken");
  bad |= nx_refuse_encode(&r, &b, &n) || write_file(dir, "refuse", b, n);
  free(b);
  bad |= nx_formed_encode(&b, &n) || write_file(dir, "formed", b, n);
  free(b);
  nx_lost l = {.rank = 5};
  snprintf(l.reason, sizeof l.reason, "rank 5 (10.0.0.5:4000) was lost during formation");
  bad |= nx_lost_encode(&l, &b, &n) || write_file(dir, "lost", b, n);
  free(b);
  /* elastic membership */
  bad |= nx_waiting_encode(&b, &n) || write_file(dir, "waiting", b, n);
  free(b);
  nx_member_addr ma[2] = {{.id = 0, .addr = "10.0.0.1:1000", .host = "a"},
                          {.id = 3, .addr = "[fd00::3]:7000", .host = ""}};
  nx_admit_req q = {
      .comm_id = 0x1122334455667788ull, .epoch = 2, .old_world = 3, .max_new = 4, .n = 2, .m = ma};
  bad |= nx_admit_req_encode(&q, &b, &n) || write_file(dir, "admit_req", b, n);
  free(b);
  nx_admit_list al = {.n = 2, .m = ma};
  bad |= nx_admit_list_encode(&al, &b, &n) || write_file(dir, "admit_list", b, n);
  free(b);
  al.n = 0;
  bad |= nx_admit_list_encode(&al, &b, &n) || write_file(dir, "admit_list0", b, n);
  free(b);
  uint32_t ids[4] = {0, 2, 5, 6};
  nx_view_msg v = {.comm_id = 7, .epoch = 3, .old_world = 3, .nstay = 2, .n = 4, .ids = ids};
  bad |= nx_view_encode(&v, &b, &n) || write_file(dir, "view", b, n);
  free(b);
  /* a joiner's welcome: ids outside the view have no address */
  snprintf(addrs[1], sizeof addrs[1], "%s", "");
  w.world_size = 3;
  w.rank = 2;
  bad |= nx_welcome_encode(&w, &b, &n) || write_file(dir, "welcome_gap", b, n);
  free(b);
  return bad;
}

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  size_t cap = 1 << 16, n = 0;
  uint8_t *b = malloc(cap);
  while (b) {
    n += fread(b + n, 1, cap - n, f);
    if (n < cap || cap >= (64u << 20)) break;
    uint8_t *nb = realloc(b, cap * 2);
    if (!nb) break;
    b = nb;
    cap *= 2;
  }
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
  printf("fuzz_bootmsg: ran %d path(s)%s\n", runs, bad ? ", some unreadable" : "");
  return bad;
}
#endif
