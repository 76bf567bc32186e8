/* Launchers: what nexar_init_from_env learns from the environment a launcher
 * set up (see nexar.h, nexar_init_from_env, for the precedence and every
 * variable), and the key-value exchanges some launchers offer (PMIx, PMI-1)
 * through which rank 0 publishes its seed's address. */
#ifndef NX_CLUSTER_LAUNCH_H
#define NX_CLUSTER_LAUNCH_H

#include "core/common.h"

#define NX_LAUNCH_SEED_KEY "nexar-seed" /* the key rank 0 publishes */
#define NX_LAUNCH_VAL_MAX 300           /* "host:port", or "!" + a reason */

/* A launcher's key-value store, opened by nx_pmix_open or nx_pmi_open.
 * share: rank 0 passes its value (val != NULL) and the others NULL; every
 * rank takes part (a fence or barrier), and the others get rank 0's value in
 * out[cap]. Waits at most timeout_ms (0: no limit where the launcher allows
 * one). close: finalizes the client and frees kvs (NULL is fine). */
typedef struct nx_kvs nx_kvs;
struct nx_kvs {
  const char *name; /* "PMIx", "PMI-1" */
  uint32_t rank, world, local_rank;
  int (*share)(nx_kvs *kvs, const char *val, char *out, size_t cap, uint32_t timeout_ms);
  void (*close)(nx_kvs *kvs);
};

/* PMIx (PMIX_RANK and PMIX_NAMESPACE set): loads libpmix.so.2 with dlopen
 * (never linked), PMIx_Init, and reads rank, job size and local rank. 0,
 * NEXAR_ERR_UNSUPPORTED (the library cannot be loaded, or this build has no
 * PMIx headers), NEXAR_ERR_IO (the launcher refused), NOMEM. */
int nx_pmix_open(nx_kvs **out);

/* For nexar-info: 1 when this build has the PMIx path and libpmix.so.2
 * loads here, else 0; why[cap] gets a sentence either way. Starts nothing. */
int nx_pmix_probe(char *why, size_t cap);

/* PMI-1 on PMI_FD (MPICH Hydra): init, get_maxes, get_my_kvsname; rank and
 * size from the server's answers and PMI_RANK/PMI_SIZE, which must agree.
 * 0, NEXAR_ERR_INVALID_ARGUMENT (a malformed variable), NEXAR_ERR_PROTOCOL
 * (a malformed reply), NEXAR_ERR_IO, NEXAR_ERR_TIMEOUT, NOMEM. */
int nx_pmi_open(nx_kvs **out, uint32_t timeout_ms);
/* PMI-1 serves one successful nx_pmi_open per process (after finalize PMI_FD
 * is closed; a second open is NEXAR_ERR_UNSUPPORTED). Unit tests that talk to
 * several fake launchers in one process forget the first with this. */
void nx_pmi_forget(void);

/* The cluster token every launcher path needs: NEXAR_CLUSTER_TOKEN, or the
 * contents of the file NEXAR_CLUSTER_TOKEN_FILE names (a regular file not
 * readable by group or others, at most 4096 bytes, trailing newline and
 * spaces dropped). Both set, neither set, an empty or unsafe file:
 * NEXAR_ERR_INVALID_ARGUMENT naming the variables. *out is malloc'd (the
 * caller wipes and frees it); *src gets the variable it came from. */
int nx_launch_token(const char *who, char **out, const char **src);

/* The port a Slurm step's seed uses when NEXAR_SEED_PORT is unset: derived
 * from the job and step ids so that concurrent steps differ, in
 * [NX_SLURM_PORT_BASE, NX_SLURM_PORT_BASE + NX_SLURM_PORT_SPAN). */
#define NX_SLURM_PORT_BASE 20000u
#define NX_SLURM_PORT_SPAN 20000u
uint16_t nx_slurm_port(uint32_t job_id, uint32_t step_id);

/* join.c: joins seed_addr asking for want_rank (NX_BOOT_ANY_RANK: any) in a
 * world of world_hint (0: the seed's); own_seed, if not NULL, is deleted
 * with the communicator (on failure the caller still owns it). */
int nx_join_ex(nexar_client **out, const char *seed_addr, const nexar_config *ucfg,
               uint32_t want_rank, uint32_t world_hint, nexar_seed *own_seed);
/* A requested rank and world that cannot work, named with where they came
 * from, before any socket is opened: 0 or NEXAR_ERR_INVALID_ARGUMENT. */
int nx_join_check_rank_world(const char *who, uint32_t rank, uint32_t world, const char *rank_src,
                             const char *world_src);

/* The launcher nexar_init_from_env would use in this environment ("PMIx",
 * "Slurm", ...; NULL: none), without starting anything; others[cap] gets
 * the other launchers present, which it would ignore. For nexar-info. */
const char *nx_launch_detected(char *others, size_t cap);

#endif
