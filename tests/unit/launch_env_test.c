/* Launcher inputs without a launcher: the cluster token from
 * NEXAR_CLUSTER_TOKEN or NEXAR_CLUSTER_TOKEN_FILE (permissions, size,
 * trailing newline, both or neither set), the Slurm port derivation, and
 * nexar_init_from_env's refusals that come before any socket (no launcher,
 * malformed or inconsistent Slurm variables, a missing token). */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cluster/launch.h"
#include "check.h"

static char dir[] = "/tmp/nxlaunchenv.XXXXXX";

static void write_tok(const char *name, const char *text, mode_t mode) {
  char p[256];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "write %s", p);
  close(fd);
  CHECK(chmod(p, mode) == 0, "chmod");
  setenv("NEXAR_CLUSTER_TOKEN_FILE", p, 1);
}

static void tok_bad(const char *why) {
  char *t = (char *)1;
  const char *src;
  CHECK(nx_launch_token("t", &t, &src) == NEXAR_ERR_INVALID_ARGUMENT, "accepted (%s)", why);
  CHECK(t == NULL, "out set on failure");
  CHECK(strstr(nexar_last_error(), why), "error lacks '%s': %s", why, nexar_last_error());
}

static void tok_ok(const char *want, const char *want_src) {
  char *t = NULL;
  const char *src = NULL;
  CHECK(nx_launch_token("t", &t, &src) == 0, "refused");
  CHECK(!strcmp(t, want) && !strcmp(src, want_src), "token '%s' from %s", t, src);
  free(t);
}

static void init_bad(const char *why) {
  nexar_client *c = (nexar_client *)1;
  int rc = nexar_init_from_env(&c);
  CHECK(rc == NEXAR_ERR_INVALID_ARGUMENT && c == NULL, "rc %d (%s)", rc, why);
  CHECK(strstr(nexar_last_error(), why), "error lacks '%s': %s", why, nexar_last_error());
}

int main(void) {
  CHECK(mkdtemp(dir), "mkdtemp");
  unsetenv("NEXAR_CLUSTER_TOKEN");
  unsetenv("NEXAR_CLUSTER_TOKEN_FILE");
  tok_bad("set NEXAR_CLUSTER_TOKEN or NEXAR_CLUSTER_TOKEN_FILE");
  setenv("NEXAR_CLUSTER_TOKEN", "s3cret", 1);
  tok_ok("s3cret", "NEXAR_CLUSTER_TOKEN");
  write_tok("a", "filetok\n", 0600);
  tok_bad("both NEXAR_CLUSTER_TOKEN and NEXAR_CLUSTER_TOKEN_FILE");
  unsetenv("NEXAR_CLUSTER_TOKEN");
  tok_ok("filetok", "NEXAR_CLUSTER_TOKEN_FILE");
  write_tok("b", "x y \r\n", 0400);
  tok_ok("x y", "NEXAR_CLUSTER_TOKEN_FILE");
  write_tok("c", "t\n", 0640);
  tok_bad("accessible by group or others (mode 0640)");
  write_tok("d", "t\n", 0604);
  tok_bad("mode 0604");
  write_tok("e", "\n\n", 0600);
  tok_bad("empty");
  static char big[5000];
  memset(big, 'k', sizeof big - 1);
  write_tok("f", big, 0600);
  tok_bad("longer than 4096");
  setenv("NEXAR_CLUSTER_TOKEN_FILE", dir, 1);
  tok_bad("not a regular file");
  setenv("NEXAR_CLUSTER_TOKEN_FILE", "/nonexistent/tok", 1);
  tok_bad("No such file");
  unsetenv("NEXAR_CLUSTER_TOKEN_FILE");

  for (uint32_t j = 0; j < 5000; j += 7)
    for (uint32_t s = 0; s < 40; s++) {
      uint16_t p = nx_slurm_port(j, s);
      CHECK(p >= NX_SLURM_PORT_BASE && p < NX_SLURM_PORT_BASE + NX_SLURM_PORT_SPAN, "port %u", p);
      if (s < 15)
        CHECK(nx_slurm_port(j, s + 1) != p, "steps %u and %u of job %u share a port", s, s + 1, j);
    }
  CHECK(nx_slurm_port(UINT32_MAX, UINT32_MAX - 1) >= NX_SLURM_PORT_BASE, "batch step");

  /* nexar_init_from_env, refusing before any socket */
  unsetenv("NEXAR_SEED_ADDR");
  unsetenv("MASTER_ADDR");
  unsetenv("PMIX_RANK");
  unsetenv("PMI_FD");
  unsetenv("SLURM_PROCID");
  init_bad("no launcher found");
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_JOB_ID", "5", 1);
  setenv("SLURM_STEP_NODELIST", "n[1-2]", 1);
  init_bad("no cluster token: set NEXAR_CLUSTER_TOKEN or NEXAR_CLUSTER_TOKEN_FILE");
  setenv("NEXAR_CLUSTER_TOKEN", "t", 1);
  setenv("SLURM_NTASKS", "x", 1);
  init_bad("SLURM_NTASKS='x'");
  setenv("SLURM_NTASKS", "1", 1);
  init_bad("2 nodes for 1 tasks");
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_STEP_NODELIST", "n[2-1]", 1);
  init_bad("SLURM_STEP_NODELIST 'n[2-1]': a range ends below its start");
  setenv("SLURM_STEP_NODELIST", "n[1-2]", 1);
  setenv("SLURMD_NODENAME", "n2", 1);
  init_bad("Slurm task 0 runs on n2, not on the first node n1");
  unsetenv("SLURMD_NODENAME");
  setenv("SLURM_STEP_RESV_PORTS", "abc", 1);
  init_bad("SLURM_STEP_RESV_PORTS='abc' is malformed");
  unsetenv("SLURM_STEP_RESV_PORTS");
  setenv("NEXAR_WORLD_SIZE", "3", 1);
  init_bad(
      "inconsistent world: NEXAR_WORLD_SIZE=3 but Slurm (SLURM_NTASKS) says the world size is 2");
  unsetenv("NEXAR_WORLD_SIZE");
  unsetenv("SLURM_PROCID");
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "1", 1);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("NEXAR_WORLD_SIZE", "2", 1);
  init_bad("inconsistent world: NEXAR_WORLD_SIZE=2 but torchrun (WORLD_SIZE)");
  unsetenv("NEXAR_WORLD_SIZE");
  setenv("WORLD_SIZE", "0", 1);
  init_bad("WORLD_SIZE=0");
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0, "cleanup");
  printf("launch_env ok\n");
  return 0;
}
