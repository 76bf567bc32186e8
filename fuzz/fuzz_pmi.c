/* libFuzzer target: the PMI-1 reply decoder (core/pmi_wire.c), which reads
 * what a launcher writes on PMI_FD. Whatever decodes must obey the rules the
 * decoder promises (keys of key characters, bounded, no duplicates, cmd
 * first, values without spaces except msg's), and re-encode (msg aside) to
 * a line that decodes to the same fields.
 *
 * Build: clang -fsanitize=fuzzer,address -DNX_FUZZ -Iinclude -Isrc fuzz/fuzz_pmi.c
 *        src/core/{pmi_wire,error,util,log,config,knobs,addr}.c
 * Smoke run without libFuzzer: add -DNX_FUZZ_STANDALONE and pass corpus files or directories;
 * "--write-seeds DIR" writes the seed corpus. */
#include "core/common.h"
#include "core/pmi_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_msg(const nx_pmi_msg *m) {
  if (m->n == 0 || m->n > NX_PMI_FIELDS_MAX || strcmp(m->key[0], "cmd") || !*m->val[0]) abort();
  for (size_t i = 0; i < m->n; i++) {
    size_t kl = strlen(m->key[i]);
    if (kl == 0 || kl > NX_PMI_KEY_MAX) abort();
    for (size_t j = 0; j < kl; j++)
      if (m->key[i][j] == '=' || m->key[i][j] == ' ') abort();
    for (size_t j = 0; j < i; j++)
      if (!strcmp(m->key[i], m->key[j])) abort();
    int is_msg = !strcmp(m->key[i], "msg");
    for (const char *v = m->val[i]; *v; v++)
      if ((unsigned char)*v < ' ' || (unsigned char)*v >= 127 || *v == '=' ||
          (*v == ' ' && !is_msg))
        abort();
    if (nx_pmi_get(m, m->key[i]) != m->val[i]) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *buf = (const char *)data;
  size_t linelen = 0;
  int got = nx_pmi_line(buf, size, &linelen);
  if (got == 1 && (linelen >= size || buf[linelen] != '\n')) abort();
  nx_pmi_msg *m = malloc(sizeof *m), *m2 = malloc(sizeof *m2);
  if (!m || !m2) abort();
  /* the first line when framed, else the whole input as one line */
  const char *nul = memchr(buf, '\0', size);
  size_t len = got == 1 ? linelen : nul ? (size_t)(nul - buf) : size;
  if (nx_pmi_decode(buf, len, m) == 0) {
    check_msg(m);
    nx_pmi_expect(m, "get_result", "fuzz"); /* any outcome, no crash */
    const char *kv[2 * NX_PMI_FIELDS_MAX];
    size_t n = 0;
    for (size_t i = 1; i < m->n; i++) {
      if (!strcmp(m->key[i], "msg")) continue;
      kv[2 * n] = m->key[i];
      kv[2 * n + 1] = m->val[i];
      n++;
    }
    char line[NX_PMI_LINE_MAX + 2];
    size_t ol;
    if (nx_pmi_encode(line, sizeof line, &ol, m->val[0], kv, n) == 0) {
      if (ol == 0 || line[ol - 1] != '\n') abort();
      if (nx_pmi_decode(line, ol - 1, m2) != 0 || m2->n != n + 1) abort();
      for (size_t i = 0; i < n; i++)
        if (strcmp(m2->key[i + 1], kv[2 * i]) || strcmp(m2->val[i + 1], kv[2 * i + 1])) abort();
    }
  } else if (m->n != 0) {
    abort(); /* a refused line leaves no fields */
  }
  free(m);
  free(m2);
  return 0;
}

#ifdef NX_FUZZ_STANDALONE
#include <dirent.h>

static int write_file(const char *dir, const char *name, const char *s) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(s, 1, strlen(s), f) != strlen(s)) {
    if (f) fclose(f);
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  return fclose(f) != 0;
}

/* What MPICH's Hydra answers (captured from mpiexec.mpich 4.0), and a few
 * refusals. */
static int write_seeds(const char *dir) {
  int bad = 0;
  bad |= write_file(dir, "init", "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n");
  bad |= write_file(dir, "maxes", "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n");
  bad |= write_file(dir, "kvsname", "cmd=my_kvsname kvsname=kvs_24474_0_1669323314_vm\n");
  bad |= write_file(dir, "put", "cmd=put_result rc=0 msg=success\n");
  bad |= write_file(dir, "barrier", "cmd=barrier_out\n");
  bad |= write_file(dir, "get", "cmd=get_result rc=0 msg=success value=vm:46631\n");
  bad |= write_file(dir, "get_missing", "cmd=get_result rc=-1 msg=key nexar-seed not found\n");
  bad |= write_file(dir, "finalize", "cmd=finalize_ack\n");
  return bad;
}

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 1;
  static uint8_t b[1 << 16];
  size_t n = fread(b, 1, sizeof b, f);
  fclose(f);
  LLVMFuzzerTestOneInput(b, n);
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
  printf("fuzz_pmi: ran %d path(s)%s\n", runs, bad ? ", some unreadable" : "");
  return bad;
}
#endif
