/*
 * nexar-info: what this libnexar is and what it would do here, like ucc_info
 * or ompi_info. Starts nothing (no seed, no socket, no launcher client).
 *
 *   nexar-info [--config] [--launcher] [--links] [--build]
 *
 * Without options, every section:
 *   version    library and header versions
 *   build      compiler, sanitizers, PMIx support (and whether libpmix loads
 *              here), device adapters (CUDA), SIMD reduction kernels
 *              available on this CPU and the one chosen
 *   links      network interfaces and their addresses, and the transports
 *              (QUIC/UDP, TCP bulk, same-host copy, same-host lane) with
 *              whether this host allows them
 *   launcher   the launcher nexar_init_from_env would use (precedence:
 *              NEXAR_SEED_ADDR, PMIx, PMI-1, Slurm, torchrun), the others it
 *              would ignore, the launcher variables it reads and the token's
 *              source (never the token)
 *   config     every NEXAR_* setting with its effective value and where it
 *              came from: default, environment or launcher
 * Exit status 0, or 1 when the environment holds a malformed NEXAR_*
 * variable (the sentence names it).
 */
#include "cluster/launch.h"
#include "core/config.h"
#include "core/hostlist.h"
#include "reduce/reduce.h"

#include <nexar/nexar.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define NX_INFO_ASAN 1
#else
#define NX_INFO_ASAN 0
#endif
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
#define NX_INFO_TSAN 1
#else
#define NX_INFO_TSAN 0
#endif

static void section(const char *name) {
  printf("\n[%s]\n", name);
}

static void show_version(void) {
  section("version");
  printf("library        %s\n", nexar_version());
  printf("header         %d.%d.%d\n", NEXAR_VERSION_MAJOR, NEXAR_VERSION_MINOR,
         NEXAR_VERSION_PATCH);
}

static void show_build(void) {
  section("build");
#if defined(__clang__)
  printf("compiler       %s\n", __VERSION__); /* "Clang 14.0.6" */
#elif defined(__GNUC__)
  printf("compiler       gcc %s\n", __VERSION__);
#endif
#ifdef NDEBUG
  printf("assertions     off (NDEBUG)\n");
#else
  printf("assertions     on\n");
#endif
  printf("sanitizers     %s%s%s\n", NX_INFO_ASAN ? "address+undefined " : "",
         NX_INFO_TSAN ? "thread " : "", NX_INFO_ASAN || NX_INFO_TSAN ? "" : "none");
  char why[300];
  int pmix = nx_pmix_probe(why, sizeof why);
  printf("PMIx           %s: %s\n", pmix ? "available" : "unavailable", why);
  printf("PMI-1          built in (MPICH Hydra, PMI_FD)\n");
  printf("CUDA adapter   not built: device adapters are not implemented yet (config.adapter "
         "must be NULL)\n");
  static const char *const impls[] = {"scalar", "avx2", "avx512"};
  printf("SIMD kernels   available:");
  for (size_t i = 0; i < sizeof impls / sizeof *impls; i++)
    if (nx_reduce_set_impl(impls[i]) == 0) printf(" %s", impls[i]);
  nx_reduce_set_impl(NULL); /* back to the automatic choice (NEXAR_REDUCE_IMPL, else the best) */
  const char *env = getenv("NEXAR_REDUCE_IMPL");
  printf("; chosen: %s (%s)\n", nx_reduce_impl_name(),
         env && *env ? "NEXAR_REDUCE_IMPL" : "the best this CPU has");
}

static void show_links(void) {
  section("links");
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) {
    printf("interfaces     (getifaddrs failed)\n");
  } else {
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr) continue;
      int fam = i->ifa_addr->sa_family;
      if (fam != AF_INET && fam != AF_INET6) continue;
      char a[INET6_ADDRSTRLEN] = "?";
      const void *src = fam == AF_INET
                            ? (const void *)&((struct sockaddr_in *)i->ifa_addr)->sin_addr
                            : (const void *)&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr;
      inet_ntop(fam, src, a, sizeof a);
      printf("interface      %-10s %-5s %-40s %s%s\n", i->ifa_name,
             fam == AF_INET ? "ipv4" : "ipv6", a, (i->ifa_flags & IFF_UP) ? "up" : "down",
             (i->ifa_flags & IFF_LOOPBACK) ? ", loopback" : "");
    }
    freeifaddrs(ifs);
  }
  printf("transport      QUIC over UDP (ngtcp2 + GnuTLS): every connection\n");
  printf("transport      TCP bulk stream, TLS 1.3 or plaintext: large messages between hosts\n");
  int scope = -1;
  FILE *f = fopen("/proc/sys/kernel/yama/ptrace_scope", "r");
  if (f) {
    if (fscanf(f, "%d", &scope) != 1) scope = -1;
    fclose(f);
  }
  if (scope < 0)
    printf("transport      same-host copy (process_vm_readv): no Yama; allowed for same-user "
           "processes\n");
  else
    printf("transport      same-host copy (process_vm_readv): Yama ptrace_scope=%d%s\n", scope,
           scope == 0   ? " (allowed)"
           : scope == 1 ? " (only towards descendants: peers fall back to QUIC unless they are)"
                        : " (refused: same-host ranks use QUIC)");
  printf("transport      same-host lane (AF_UNIX datagrams): small collective frames\n");
}

static void var(const char *name) {
  const char *v = getenv(name);
  if (v && *v) printf("  %-28s %s\n", name, v);
}

static void show_launcher(void) {
  section("launcher");
  char others[64];
  const char *l = nx_launch_detected(others, sizeof others);
  printf("used           %s\n", l ? l : "none (nexar_init_from_env would fail: no launcher)");
  printf("ignored        %s\n", *others ? others : "(none)");
  printf("precedence     NEXAR_SEED_ADDR, PMIx, PMI-1, Slurm, torchrun\n");
  static const char *const vars[] = {"NEXAR_SEED_ADDR",
                                     "NEXAR_RANK",
                                     "NEXAR_WORLD_SIZE",
                                     "NEXAR_SEED_PORT",
                                     "NEXAR_SEED_HOST",
                                     "NEXAR_PMIX_LIB",
                                     "PMIX_RANK",
                                     "PMIX_NAMESPACE",
                                     "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "PMI_FD",
                                     "PMI_RANK",
                                     "PMI_SIZE",
                                     "SLURM_PROCID",
                                     "SLURM_NTASKS",
                                     "SLURM_LOCALID",
                                     "SLURM_JOB_ID",
                                     "SLURM_STEP_ID",
                                     "SLURM_STEP_NODELIST",
                                     "SLURM_JOB_NODELIST",
                                     "SLURM_STEP_RESV_PORTS",
                                     "SLURMD_NODENAME",
                                     "MASTER_ADDR",
                                     "MASTER_PORT",
                                     "RANK",
                                     "WORLD_SIZE",
                                     "LOCAL_RANK",
                                     "TORCHELASTIC_USE_AGENT_STORE"};
  printf("variables      (launcher inputs that are set)\n");
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
    var(vars[i]);
  if (l && !strcmp(l, "Slurm")) {
    const char *nl = getenv("SLURM_STEP_NODELIST");
    const char *which = nl && *nl ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    char first[NX_HOSTLIST_NAME_MAX];
    size_t n = 0;
    if (nx_hostlist_count(getenv(which), which, &n) == 0 &&
        nx_hostlist_nth(getenv(which), which, 0, first, sizeof first) == 0)
      printf("seed host      %s (first of %zu nodes in %s)\n", first, n, which);
    else
      printf("seed host      (%s)\n", nexar_last_error());
    uint32_t job = 0, step = 0;
    nx_env_u32("SLURM_JOB_ID", &job, NULL);
    nx_env_u32("SLURM_STEP_ID", &step, NULL);
    const char *p = getenv("NEXAR_SEED_PORT");
    const char *r = getenv("SLURM_STEP_RESV_PORTS");
    if (p && *p)
      printf("seed port      %s (NEXAR_SEED_PORT)\n", p);
    else if (r && *r)
      printf("seed port      first of %s (SLURM_STEP_RESV_PORTS)\n", r);
    else
      printf(
          "seed port      %u (derived: %u + (SLURM_JOB_ID mod %u) * 16 + SLURM_STEP_ID mod 16)\n",
          nx_slurm_port(job, step), NX_SLURM_PORT_BASE, NX_SLURM_PORT_SPAN / 16);
  } else if (l && (!strcmp(l, "PMIx") || !strcmp(l, "PMI-1"))) {
    printf("seed address   published by rank 0 through %s (NEXAR_SEED_HOST, else its host name)\n",
           l);
  }
  char *tok = NULL;
  const char *src = NULL;
  if (nx_launch_token("nexar_init_from_env", &tok, &src) == 0)
    printf("token          from %s\n", src);
  else
    printf("token          %s\n", nexar_last_error());
  free(tok);
}

/* nx_config_print_all's NEXAR_X=value lines with where each value came from. */
static int show_config(void) {
  section("config");
  nexar_config cfg;
  int rc = nexar_config_default(&cfg);
  if (rc) {
    printf("error          %s\n", nexar_last_error());
    return 1;
  }
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream(&text, &len);
  if (!m) return 1;
  nx_config_print_all(m, &cfg);
  fclose(m);
  int bad = 0;
  for (char *line = text, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    char *eq = strchr(line, '=');
    if (line[0] == '#' || !eq) {
      printf("%s\n", line);
      bad |= line[0] == '#' && strstr(line, "error") != NULL;
      continue;
    }
    *eq = '\0';
    const char *env = getenv(line);
    const char *how = env && *env ? "environment" : "default";
    if (!strcmp(line, "NEXAR_CLUSTER_TOKEN")) {
      char *tok = NULL;
      const char *src = NULL;
      if (nx_launch_token("nexar-info", &tok, &src) == 0 &&
          !strcmp(src, "NEXAR_CLUSTER_TOKEN_FILE"))
        printf("%-38s %-28s %s\n", line, "(set)", "environment (NEXAR_CLUSTER_TOKEN_FILE)");
      else
        printf("%-38s %-28s %s\n", line, eq + 1, how);
      free(tok);
      continue;
    }
    printf("%-38s %-28s %s\n", line, eq + 1, how);
  }
  free(text);
  /* what a launcher decides rather than a variable of ours */
  char others[64];
  const char *l = nx_launch_detected(others, sizeof others);
  if (l && strcmp(l, "NEXAR_SEED_ADDR")) {
    const char *rank = !strcmp(l, "PMIx")    ? "PMIX_RANK"
                       : !strcmp(l, "PMI-1") ? "PMI_RANK"
                       : !strcmp(l, "Slurm") ? "SLURM_PROCID"
                                             : "RANK";
    const char *world = !strcmp(l, "PMIx")    ? "PMIx job size"
                        : !strcmp(l, "PMI-1") ? "PMI_SIZE"
                        : !strcmp(l, "Slurm") ? "SLURM_NTASKS"
                                              : "WORLD_SIZE";
    const char *rv = getenv(rank), *wv = getenv(world);
    printf("%-38s %-28s launcher (%s: %s)\n", "rank", rv ? rv : "(from the launcher)", l, rank);
    printf("%-38s %-28s launcher (%s: %s)\n", "world_size", wv ? wv : "(from the launcher)", l,
           world);
  }
  return bad;
}

int main(int argc, char **argv) {
  int want_cfg = 0, want_launch = 0, want_links = 0, want_build = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--config"))
      want_cfg = 1;
    else if (!strcmp(argv[i], "--launcher"))
      want_launch = 1;
    else if (!strcmp(argv[i], "--links"))
      want_links = 1;
    else if (!strcmp(argv[i], "--build"))
      want_build = 1;
    else {
      fprintf(stderr, "usage: nexar-info [--build] [--links] [--launcher] [--config]\n");
      return strcmp(argv[i], "--help") && strcmp(argv[i], "-h") ? 2 : 0;
    }
  }
  int all = !want_cfg && !want_launch && !want_links && !want_build;
  printf("nexar-info: libnexar %s\n", nexar_version());
  if (all) show_version();
  if (all || want_build) show_build();
  if (all || want_links) show_links();
  if (all || want_launch) show_launcher();
  int rc = 0;
  if (all || want_cfg) rc = show_config();
  return rc;
}
