/* nexar_init_from_env: which launcher started this process, and forming the
 * world through it. Precedence (nexar.h): NEXAR_SEED_ADDR, PMIx, PMI-1,
 * Slurm, torchrun. Launchers with a key-value store (PMIx, PMI-1) let rank 0
 * publish its seed's address; the others agree on one by their variables. */
#include "cluster/launch.h"
#include "cluster/bootmsg.h"
#include "core/addr.h"
#include "core/config.h"
#include "core/hostlist.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WHO "init_from_env"

/* ------------------------------------------------------------------ token */

int nx_launch_token(const char *who, char **out, const char **src) {
  *out = NULL;
  const char *tok = getenv("NEXAR_CLUSTER_TOKEN"), *file = getenv("NEXAR_CLUSTER_TOKEN_FILE");
  if (tok && !*tok) tok = NULL;
  if (file && !*file) file = NULL;
  if (tok && file)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "%s: both NEXAR_CLUSTER_TOKEN and NEXAR_CLUSTER_TOKEN_FILE are set; set one",
                   who);
  if (!tok && !file)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "%s: no cluster token: set NEXAR_CLUSTER_TOKEN or NEXAR_CLUSTER_TOKEN_FILE (the "
                   "same on every process)",
                   who);
  if (tok) {
    if (strnlen(tok, 4097) > 4096)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                     "%s: NEXAR_CLUSTER_TOKEN: longer than 4096 characters", who);
    *src = "NEXAR_CLUSTER_TOKEN";
    return (*out = nx_strdup(tok)) ? 0 : nx_fail(NEXAR_ERR_NOMEM, "%s: no memory", who);
  }
  *src = "NEXAR_CLUSTER_TOKEN_FILE";
  int fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: NEXAR_CLUSTER_TOKEN_FILE='%.200s': %s", who,
                   file, strerror(errno));
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                 "%s: NEXAR_CLUSTER_TOKEN_FILE='%.200s' is not a regular file", who, file);
  else if (st.st_mode & (S_IRGRP | S_IWGRP | S_IROTH | S_IWOTH))
    rc = nx_fail(
        NEXAR_ERR_INVALID_ARGUMENT,
        "%s: NEXAR_CLUSTER_TOKEN_FILE='%.200s' is accessible by group or others (mode %04o); "
        "chmod 600 it",
        who, file, (unsigned)(st.st_mode & 07777));
  else if (st.st_size > 4097)
    rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                 "%s: NEXAR_CLUSTER_TOKEN_FILE='%.200s': longer than 4096 bytes", who, file);
  char buf[4099];
  size_t n = 0;
  while (!rc && n < sizeof buf - 1) {
    ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: NEXAR_CLUSTER_TOKEN_FILE='%.200s': %s", who,
                   file, strerror(errno));
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
    n--;
  buf[n] = '\0';
  if (!rc && (n == 0 || n > 4096 || memchr(buf, '\0', n)))
    rc = nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: NEXAR_CLUSTER_TOKEN_FILE='%.200s': %s", who, file,
                 n == 0     ? "empty"
                 : n > 4096 ? "longer than 4096 bytes"
                            : "holds a NUL byte");
  if (!rc && !(*out = nx_strdup(buf))) rc = nx_fail(NEXAR_ERR_NOMEM, "%s: no memory", who);
  memset(buf, 0, sizeof buf);
  __asm__ __volatile__("" : : "r"(buf) : "memory"); /* keep the wipe */
  return rc;
}

static void token_free(char *t) {
  if (!t) return;
  size_t n = strlen(t);
  memset(t, 0, n);
  __asm__ __volatile__("" : : "r"(t) : "memory");
  free(t);
}

/* ------------------------------------------------------------- detection */

enum { L_NONE, L_PMIX, L_PMI, L_SLURM, L_TORCHRUN };
static const char *const lname[] = {"none", "PMIx", "PMI-1", "Slurm", "torchrun"};

static int present(const char *v) {
  const char *s = getenv(v);
  return s && *s;
}

static int have_pmix(void) {
  return present("PMIX_RANK") && present("PMIX_NAMESPACE");
}
static int have_pmi(void) {
  return present("PMI_FD");
}
static int have_slurm(void) {
  return present("SLURM_PROCID") && present("SLURM_NTASKS") && present("SLURM_STEP_ID") &&
         (present("SLURM_STEP_NODELIST") || present("SLURM_JOB_NODELIST"));
}
static int have_torchrun(void) {
  return present("MASTER_ADDR");
}

static int detect(char *others, size_t cap) {
  int have[5] = {0, have_pmix(), have_pmi(), have_slurm(), have_torchrun()};
  int pick = L_NONE;
  size_t o = 0;
  others[0] = '\0';
  for (int k = L_PMIX; k <= L_TORCHRUN; k++) {
    if (!have[k]) continue;
    if (pick == L_NONE)
      pick = k;
    else
      o += (size_t)snprintf(others + o, cap > o ? cap - o : 0, "%s%s", o ? ", " : "", lname[k]);
  }
  return pick;
}

uint16_t nx_slurm_port(uint32_t job_id, uint32_t step_id) {
  return (uint16_t)(NX_SLURM_PORT_BASE + (job_id % (NX_SLURM_PORT_SPAN / 16)) * 16 + step_id % 16);
}

/* A variable that must match the launcher's value when it is set. */
static int agree(const char *var, uint32_t want, const char *launcher, const char *what) {
  uint32_t v;
  int have;
  int rc = nx_env_u32(var, &v, &have);
  if (rc) return rc;
  if (have && v != want)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   WHO ": inconsistent world: %s=%u but %s says the %s is %u", var, v, launcher,
                   what, want);
  return 0;
}

/* ------------------------------------------------------------ the seed */

/* Rank 0 of a launcher with a key-value store: a seed on an ephemeral (or
 * NEXAR_SEED_PORT) port, advertised as NEXAR_SEED_HOST, the bind host, or
 * this host's name. */
static int host_seed(const nexar_config *cfg, uint32_t world, nexar_seed **s, char *addr,
                     size_t cap) {
  char host[NX_ADDR_HOST_MAX] = "";
  uint16_t port = 0, bport;
  int have_port, rc;
  if ((rc = nx_env_u16("NEXAR_SEED_PORT", &port, &have_port))) return rc;
  const char *h = getenv("NEXAR_SEED_HOST");
  if (h && *h) {
    if (strlen(h) >= sizeof host)
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": NEXAR_SEED_HOST is too long");
    snprintf(host, sizeof host, "%s", h);
  } else if (cfg->bind_addr &&
             nx_addr_split(cfg->bind_addr, "NEXAR_BIND_ADDR", host, sizeof host, &bport) == 0 &&
             !nx_addr_is_wildcard(host)) {
    /* the host this process binds is the one peers reach */
  } else if (gethostname(host, sizeof host - 1) != 0 || !*host) {
    return nx_fail(NEXAR_ERR_IO, WHO ": gethostname: %s; set NEXAR_SEED_HOST", strerror(errno));
  }
  char listen[NX_ADDR_MAX];
  if ((rc = nx_addr_join(listen, sizeof listen, nx_addr_is_v6(host) ? "::" : "0.0.0.0", port)))
    return rc;
  if ((rc = nexar_seed_new(s, listen, world, cfg))) return rc;
  const char *bound = nexar_seed_addr(*s);
  char bh[NX_ADDR_HOST_MAX];
  if ((rc = nx_addr_split(bound, "seed address", bh, sizeof bh, &port)) ||
      (rc = nx_addr_join(addr, cap, host, port))) {
    nexar_seed_del(*s);
    *s = NULL;
  }
  return rc;
}

/* PMIx or PMI-1: rank 0 hosts the seed and publishes "host:port" (or "!",
 * its negated error code and why it could not host it), every rank reads it
 * after the launcher's barrier and fails with rank 0's code in that case. */
static int via_kvs(nx_kvs *kvs, const nexar_config *cfg, const char *others, nexar_client **out) {
  int rc = nx_join_check_rank_world(WHO, kvs->rank, kvs->world, kvs->name, kvs->name);
  if (!rc) rc = agree("NEXAR_WORLD_SIZE", kvs->world, kvs->name, "world size");
  if (!rc && !strcmp(kvs->name, "PMIx")) { /* Open MPI also sets these: they must agree */
    rc = agree("OMPI_COMM_WORLD_SIZE", kvs->world, kvs->name, "world size");
    if (!rc) rc = agree("OMPI_COMM_WORLD_RANK", kvs->rank, kvs->name, "rank");
  }
  char addr[NX_LAUNCH_VAL_MAX] = "";
  nexar_seed *s = NULL;
  if (kvs->rank == 0) {
    if (!rc) rc = host_seed(cfg, kvs->world, &s, addr, sizeof addr);
    if (rc) { /* a value every store carries: no spaces or '=' (PMI-1) */
      snprintf(addr, sizeof addr, "!%d rank 0: %.270s", -rc, nexar_last_error());
      for (char *p = addr; *p; p++)
        *p = *p == ' ' ? '+' : *p == '=' ? '~' : (*p < ' ' || *p > '~') ? '?' : *p;
    }
  }
  int own = rc;
  char own_err[512];
  snprintf(own_err, sizeof own_err, "%s", nexar_last_error());
  /* every rank takes part even after its own failure, so no one waits for it */
  int src =
      kvs->share(kvs, kvs->rank == 0 ? addr : NULL, addr, sizeof addr, cfg->connect_timeout_ms);
  uint32_t rank = kvs->rank, world = kvs->world, local = kvs->local_rank;
  const char *name = kvs->name;
  if (own) {
    kvs->close(kvs);
    nexar_seed_del(s);
    return nx_fail(own, "%s", own_err);
  }
  if (src) {
    char e[512];
    snprintf(e, sizeof e, "%s", nexar_last_error());
    kvs->close(kvs);
    nexar_seed_del(s);
    return nx_fail(src, WHO " (%s): %s", name, e);
  }
  kvs->close(kvs);
  if (addr[0] == '!') { /* rank 0 could not host the seed: its reason, spaces restored */
    for (char *p = addr; *p; p++)
      *p = *p == '+' ? ' ' : *p == '~' ? '=' : *p;
    char *why = NULL;
    long code = strtol(addr + 1, &why, 10); /* rank 0's error code, as rank 0 got it */
    if (code < 1 || code > 100 || *why != ' ') code = -NEXAR_ERR_PROTOCOL, why = addr;
    return nx_fail((int)-code, WHO " (%s): %s", name, why + 1);
  }
  NX_INFO(WHO ": launcher %s: rank %u of %u (local rank %u), seed %s%s%s", name, rank, world, local,
          addr, *others ? "; also present, ignored: " : "", others);
  rc = nx_join_ex(out, addr, cfg, rank, world, s);
  if (rc) nexar_seed_del(s);
  return rc;
}

/* ------------------------------------------------- Slurm and torchrun */

static int via_slurm(const nexar_config *cfg, const char *others, nexar_client **out) {
  uint32_t rank, world, local = 0, job = 0, step = 0, nnodes;
  int h, have_nn, rc;
  if ((rc = nx_env_u32("SLURM_PROCID", &rank, &h)) ||
      (rc = nx_env_u32("SLURM_NTASKS", &world, &h)) ||
      (rc = nx_env_u32("SLURM_LOCALID", &local, &h)) ||
      (rc = nx_env_u32("SLURM_JOB_ID", &job, &h)) ||
      (rc = nx_env_u32("SLURM_STEP_ID", &step, &h)) ||
      (rc = nx_env_u32("SLURM_STEP_NUM_NODES", &nnodes, &have_nn)))
    return rc;
  if (world == 0)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": SLURM_NTASKS=0; a world has a rank");
  if ((rc = nx_join_check_rank_world(WHO, rank, world, "SLURM_PROCID", "SLURM_NTASKS")) ||
      (rc = agree("NEXAR_WORLD_SIZE", world, "Slurm (SLURM_NTASKS)", "world size")) ||
      (rc = agree("SLURM_NPROCS", world, "SLURM_NTASKS", "world size")))
    return rc;
  const char *var = present("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  const char *list = getenv(var);
  size_t nhosts;
  char first[NX_HOSTLIST_NAME_MAX];
  if ((rc = nx_hostlist_count(list, var, &nhosts)) ||
      (rc = nx_hostlist_nth(list, var, 0, first, sizeof first)))
    return rc;
  if (have_nn && nnodes != nhosts)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   WHO ": inconsistent Slurm step: %s names %zu nodes, SLURM_STEP_NUM_NODES=%u",
                   var, nhosts, nnodes);
  if (nhosts > world)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   WHO ": inconsistent Slurm step: %zu nodes for %u tasks (SLURM_NTASKS)", nhosts,
                   world);
  const char *node = getenv("SLURMD_NODENAME");
  if (rank == 0 && node && *node && strcmp(node, first))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   WHO
                   ": Slurm task 0 runs on %.100s, not on the first node %.100s of %s, where the "
                   "others look for its seed (use srun --mpi=pmix, a block distribution, or "
                   "NEXAR_SEED_ADDR)",
                   node, first, var);
  const char *host = present("NEXAR_SEED_HOST") ? getenv("NEXAR_SEED_HOST") : first;
  uint16_t port = 0;
  int have_port;
  const char *port_src = "NEXAR_SEED_PORT";
  if ((rc = nx_env_u16("NEXAR_SEED_PORT", &port, &have_port))) return rc;
  const char *resv = getenv("SLURM_STEP_RESV_PORTS");
  if (!have_port && resv && *resv) { /* srun --resv-ports: "12000-12003" or "12000,..." */
    char first_port[8];
    size_t n = strspn(resv, "0123456789");
    if (n == 0 || n >= sizeof first_port || (resv[n] && resv[n] != '-' && resv[n] != ','))
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": SLURM_STEP_RESV_PORTS='%.40s' is malformed",
                     resv);
    memcpy(first_port, resv, n);
    first_port[n] = 0;
    if ((rc = nx_parse_u16("SLURM_STEP_RESV_PORTS", first_port, &port))) return rc;
    have_port = 1;
    port_src = "SLURM_STEP_RESV_PORTS";
  }
  if (!have_port) {
    port = nx_slurm_port(job, step);
    port_src = "derived from SLURM_JOB_ID and SLURM_STEP_ID";
  }
  char addr[NX_ADDR_MAX];
  if ((rc = nx_addr_join(addr, sizeof addr, host, port))) return rc;
  nexar_seed *s = NULL;
  if (rank == 0) {
    char listen[NX_ADDR_MAX];
    nx_addr_join(listen, sizeof listen, nx_addr_is_v6(host) ? "::" : "0.0.0.0", port);
    if ((rc = nexar_seed_new(&s, listen, world, cfg))) return rc;
  }
  NX_INFO(WHO ": launcher Slurm: rank %u of %u (local rank %u), seed %s (port %s)%s%s", rank, world,
          local, addr, port_src, *others ? "; also present, ignored: " : "", others);
  rc = nx_join_ex(out, addr, cfg, rank, world, s);
  if (rc) nexar_seed_del(s);
  return rc;
}

static int via_torchrun(const nexar_config *cfg, const char *others, nexar_client **out) {
  const char *maddr = getenv("MASTER_ADDR");
  uint32_t rank = 0, world = 0;
  int have_port, have_rank, have_world, rc;
  uint16_t mport = 0, sport = 0;
  if ((rc = nx_env_u16("MASTER_PORT", &mport, &have_port))) return rc;
  if ((rc = nx_env_u32("RANK", &rank, &have_rank))) return rc;
  if ((rc = nx_env_u32("WORLD_SIZE", &world, &have_world))) return rc;
  if (!have_port || !have_rank || !have_world)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": MASTER_ADDR is set but %s is not",
                   !have_port   ? "MASTER_PORT"
                   : !have_rank ? "RANK"
                                : "WORLD_SIZE");
  if (world == 0)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": WORLD_SIZE=0; a world has a rank");
  if ((rc = nx_join_check_rank_world(WHO, rank, world, "RANK", "WORLD_SIZE")) ||
      (rc = agree("NEXAR_WORLD_SIZE", world, "torchrun (WORLD_SIZE)", "world size")))
    return rc;
  if (strlen(maddr) > NX_ADDR_MAX - 10) /* room for brackets and ":port" */
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": MASTER_ADDR is longer than %d characters",
                   NX_ADDR_MAX - 10);
  int have_sport;
  const char *port_src = "NEXAR_SEED_PORT";
  if ((rc = nx_env_u16("NEXAR_SEED_PORT", &sport, &have_sport))) return rc;
  if (!have_sport) {
    const char *agent = getenv("TORCHELASTIC_USE_AGENT_STORE");
    int plus1 = agent && !strcmp(agent, "True");
    sport = plus1 ? (uint16_t)(mport + 1) : mport;
    port_src = plus1 ? "MASTER_PORT + 1: torchrun's agent store holds MASTER_PORT" : "MASTER_PORT";
  }
  char addr[NX_ADDR_MAX];
  if ((rc = nx_addr_join(addr, sizeof addr, maddr, sport))) return rc;
  nexar_seed *s = NULL;
  if (rank == 0) { /* rank 0 hosts the seed, as torchrun's store host does */
    char listen[NX_ADDR_MAX];
    nx_addr_join(listen, sizeof listen, nx_addr_is_v6(maddr) ? "::" : "0.0.0.0", sport);
    if ((rc = nexar_seed_new(&s, listen, world, cfg))) return rc;
  }
  NX_INFO(WHO ": launcher torchrun: rank %u of %u, seed %s (port %s)%s%s", rank, world, addr,
          port_src, *others ? "; also present, ignored: " : "", others);
  rc = nx_join_ex(out, addr, cfg, rank, world, s);
  if (rc) nexar_seed_del(s);
  return rc;
}

/* Open MPI without PMIx (libpmix missing, or a build without its headers):
 * the documented fallback, only when the user names the seed's place with
 * NEXAR_SEED_HOST and NEXAR_SEED_PORT; rank and world from
 * OMPI_COMM_WORLD_RANK/SIZE, and that rank 0 hosts the seed there. */
static int via_ompi_env(const nexar_config *cfg, const char *why, const char *others,
                        nexar_client **out) {
  uint32_t rank = 0, world = 0, local = 0;
  uint16_t port = 0;
  int h, rc;
  if ((rc = nx_env_u32("OMPI_COMM_WORLD_RANK", &rank, &h)) ||
      (rc = nx_env_u32("OMPI_COMM_WORLD_SIZE", &world, &h)) ||
      (rc = nx_env_u32("OMPI_COMM_WORLD_LOCAL_RANK", &local, &h)) ||
      (rc = nx_env_u16("NEXAR_SEED_PORT", &port, &h)))
    return rc;
  if (world == 0)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": OMPI_COMM_WORLD_SIZE=0; a world has a rank");
  if ((rc = nx_join_check_rank_world(WHO, rank, world, "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE")) ||
      (rc = agree("NEXAR_WORLD_SIZE", world, "Open MPI (OMPI_COMM_WORLD_SIZE)", "world size")))
    return rc;
  const char *host = getenv("NEXAR_SEED_HOST");
  char addr[NX_ADDR_MAX];
  if (strlen(host) > NX_ADDR_MAX - 10)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": NEXAR_SEED_HOST is too long");
  if ((rc = nx_addr_join(addr, sizeof addr, host, port))) return rc;
  nexar_seed *s = NULL;
  if (rank == 0) {
    char listen[NX_ADDR_MAX];
    nx_addr_join(listen, sizeof listen, nx_addr_is_v6(host) ? "::" : "0.0.0.0", port);
    if ((rc = nexar_seed_new(&s, listen, world, cfg))) return rc;
  }
  NX_INFO(WHO ": launcher Open MPI variables (PMIx unusable: %s): rank %u of %u (local rank %u), "
              "seed %s (NEXAR_SEED_HOST, NEXAR_SEED_PORT)%s%s",
          why, rank, world, local, addr, *others ? "; also present, ignored: " : "", others);
  rc = nx_join_ex(out, addr, cfg, rank, world, s);
  if (rc) nexar_seed_del(s);
  return rc;
}

/* ------------------------------------------------------------ the entry */

static int explicit_seed(const char *seed, const nexar_config *cfg, const char *others,
                         nexar_client **out) {
  uint32_t rank = NX_BOOT_ANY_RANK, world = 0;
  int rc;
  if ((rc = nx_env_u32("NEXAR_WORLD_SIZE", &world, NULL)) ||
      (rc = nx_env_u32("NEXAR_RANK", &rank, NULL)))
    return rc;
  if (strnlen(seed, NX_ADDR_MAX) >= NX_ADDR_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": NEXAR_SEED_ADDR is longer than %d characters",
                   NX_ADDR_MAX - 1);
  if ((rc = nx_join_check_rank_world(WHO, rank, world, "NEXAR_RANK", "NEXAR_WORLD_SIZE")))
    return rc;
  NX_INFO(WHO ": launcher NEXAR_SEED_ADDR: seed %s%s%s", seed,
          *others ? "; also present, ignored: " : "", others);
  return nx_join_ex(out, seed, cfg, rank, world, NULL);
}

int nexar_init_from_env(nexar_client **out) {
  if (!out) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, WHO ": NULL out");
  *out = NULL;
  nx_log_init();
  char others[64];
  const char *seed = getenv("NEXAR_SEED_ADDR");
  int kind = detect(others, sizeof others);
  if (seed && *seed && kind != L_NONE) { /* all the launchers are "others" */
    size_t o = strlen(others);
    char all[64];
    snprintf(all, sizeof all, "%s%s%s", lname[kind], o ? ", " : "", others);
    memcpy(others, all, sizeof others);
  }
  if ((!seed || !*seed) && kind == L_NONE)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   WHO ": no launcher found: set NEXAR_SEED_ADDR, or start under PMIx (mpirun, "
                       "srun --mpi=pmix), PMI-1 (PMI_FD: MPICH's mpiexec, srun --mpi=pmi2), srun "
                       "(SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_ID, SLURM_STEP_NODELIST) or "
                       "torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)");
  nexar_config cfg;
  int rc = nexar_config_default(&cfg);
  if (rc) return rc;
  char *token = NULL;
  const char *tsrc = NULL;
  if ((rc = nx_launch_token(WHO, &token, &tsrc))) return rc;
  cfg.cluster_token = token;
  NX_DEBUG(WHO ": cluster token from %s", tsrc);
  if (seed && *seed) {
    rc = explicit_seed(seed, &cfg, others, out);
  } else if (kind == L_PMIX || kind == L_PMI) {
    nx_kvs *kvs = NULL;
    rc = kind == L_PMIX ? nx_pmix_open(&kvs) : nx_pmi_open(&kvs, cfg.connect_timeout_ms);
    if (!rc) {
      rc = via_kvs(kvs, &cfg, others, out);
    } else if (rc == NEXAR_ERR_UNSUPPORTED && kind == L_PMIX && present("OMPI_COMM_WORLD_RANK") &&
               present("OMPI_COMM_WORLD_SIZE")) {
      char why[512];
      snprintf(why, sizeof why, "%s", nexar_last_error());
      if (present("NEXAR_SEED_HOST") && present("NEXAR_SEED_PORT"))
        rc = via_ompi_env(&cfg, why, others, out);
      else
        rc = nx_fail(rc,
                     "%s; or set NEXAR_SEED_HOST and NEXAR_SEED_PORT (the same on every rank) to "
                     "form the world from OMPI_COMM_WORLD_RANK/SIZE without PMIx",
                     why);
    }
  } else if (kind == L_SLURM) {
    rc = via_slurm(&cfg, others, out);
  } else {
    rc = via_torchrun(&cfg, others, out);
  }
  token_free(token);
  return rc;
}

/* For nexar-info: the launcher nexar_init_from_env would use here, without
 * starting anything. */
const char *nx_launch_detected(char *others, size_t cap) {
  const char *seed = getenv("NEXAR_SEED_ADDR");
  int kind = detect(others, cap);
  if (seed && *seed) return "NEXAR_SEED_ADDR";
  return kind == L_NONE ? NULL : lname[kind];
}
