/* Configuration: defaults, NEXAR_* environment variables, validation.
 *
 * One table in config.c maps every nexar_config field to its variable
 * (NEXAR_ + the field name in upper case), its type and its default; the
 * defaults, the environment parser and nx_config_print all walk it.
 *
 * Variable syntax (strict: no sign, no spaces, base 10, overflow is an error):
 *   milliseconds, counts  digits, up to 4294967295
 *   byte sizes            digits + optional K|M|G|T or KiB|MiB|GiB|TiB (powers
 *                         of 1024, case-insensitive): "8M", "2MiB", "4g"
 *   booleans              0|1|true|false|yes|no|on|off (case-insensitive)
 *   NEXAR_RECOVERY_POLICY automatic|manual|abort
 *   NEXAR_TOPOLOGY        full_mesh|hypercube|k_regular[:K] (K even, >= 2; also
 *                         sets topology_degree, and must agree with
 *                         NEXAR_TOPOLOGY_DEGREE when both are set)
 *   strings               any text; the pointer points into the environment
 * A variable that is set but empty counts as unset. A malformed one, a number
 * outside the field's range, or a string over its length limit is
 * NEXAR_ERR_INVALID_ARGUMENT with a sentence naming it, its value and (for
 * numbers) the allowed range.
 *
 * Struct versions: nexar_config only grows at the end. A struct_size is valid
 * when it equals the size of a released layout (today only v1, the struct as
 * it is now); a caller built against an older header gets defaults (plus the
 * environment) for the fields it does not know, and nothing past its
 * struct_size is written. */
#ifndef NX_CORE_CONFIG_H
#define NX_CORE_CONFIG_H

#include "core/common.h"

#include <stdio.h>

/* Size of the first public layout: adapter is its last field, forever. */
#define NX_CONFIG_SIZE_V1 (offsetof(nexar_config, adapter) + sizeof(void *))
/* V2 adds unexpected_budget_bytes. */
#define NX_CONFIG_SIZE_V2 (offsetof(nexar_config, unexpected_budget_bytes) + sizeof(size_t))
/* V3 adds recovery_quorum (the struct's padding may follow it). */
#define NX_CONFIG_SIZE_V3 sizeof(nexar_config)

/* 1 if size is the struct_size of a released nexar_config layout. */
int nx_config_size_known(size_t size);

/* The work behind nexar_config_default_sized, without the version check:
 * writes defaults, then the environment, into the first nbytes of cfg
 * (sizeof(size_t) <= nbytes <= sizeof(nexar_config)) and sets
 * cfg->struct_size = nbytes. Never writes past nbytes. On a malformed
 * variable cfg holds the plain defaults and the error is returned. */
int nx_config_fill_default(nexar_config *cfg, size_t nbytes);

/* Checks and copies a caller's config into out, a full-size internal copy.
 * in == NULL: defaults plus environment. Otherwise in->struct_size must be a
 * released layout size ("config.struct_size not set by nexar_config_default"
 * if not); fields past it get defaults plus environment. Then validates
 * (errors name the field, "config.heartbeat_timeout_ms must exceed ...") and
 * duplicates cluster_token and bind_addr ("" becomes NULL) so in need not
 * outlive the call; booleans become 0/1. adapter is copied as a pointer.
 * out must not alias in; on failure out is zeroed (nx_config_release on it is
 * a no-op). To inherit a config (sub-communicators), resolve the parent's
 * resolved copy into the child. Every numeric field must lie in its range
 * (config.c's table, README "Configuration"): "config.pipeline_segment_bytes
 * = 1 is out of range: allowed 16384 (16 KiB)..1073741824 (1 GiB)
 * (NEXAR_PIPELINE_SEGMENT_BYTES)"; strings have a length limit. A valid but
 * unimplemented setting (a topology other than full_mesh, a non-NULL
 * adapter) is NEXAR_ERR_UNSUPPORTED with a sentence saying so, never a
 * silent full mesh or host-memory path. 0, INVALID_ARGUMENT, UNSUPPORTED or
 * NOMEM. */
int nx_config_resolve(const nexar_config *in, nexar_config *out);

/* Frees the strings nx_config_resolve duplicated and sets them to NULL. NULL
 * and repeated calls are fine. */
void nx_config_release(nexar_config *c);

/* Writes every field as a NEXAR_X=value line (byte sizes in plain bytes,
 * enums by name, the cluster token only as "(set)" or "(unset)", NULL
 * bind_addr as "(unset)", adapter as "(none)" or "(set)"). */
void nx_config_print(FILE *f, const nexar_config *c);
/* As nx_config_print, then the internal knobs from the environment (or a
 * comment line with their error). What nexar-seed --print-config shows. */
void nx_config_print_all(FILE *f, const nexar_config *c);

/* Internal knobs: the environment-only extension of the table (knobs.c), for
 * settings outside the public nexar_config (logging, tuning, test hooks).
 * The same rules: strict parsing, a range for every number, a length limit
 * for every string, errors naming the variable, printed by nx_config_print.
 * nx_config_resolve parses them too, so a malformed knob fails the call that
 * takes a config; each endpoint keeps its parsed copy (ep->knobs) and call
 * sites read that, not getenv. NEXAR_TEST_IMPAIR is only checked for length
 * here; udp.c parses its syntax when it opens the socket. */
#define NX_KNOB_AUTO UINT32_MAX                    /* a u32 knob left to the library */
#define NX_KNOB_AUTO_SIZE SIZE_MAX                 /* a byte-size knob left to the library */
enum { NX_BIND_AUTO, NX_BIND_CORE, NX_BIND_NONE }; /* nx_knobs.cpu_bind */
typedef struct nx_knobs {
  int debug;               /* NEXAR_DEBUG: off|error|warn|info|debug|trace (0 off, 1 debug) */
  const char *debug_file;  /* NEXAR_DEBUG_FILE: template with %h %p %r %%, < PATH_MAX */
  int dump_on_timeout;     /* NEXAR_DUMP_ON_TIMEOUT: bool, 0 */
  int lane;                /* NEXAR_LANE: bool, 1 (0: no same-host datagram lane) */
  int shm;                 /* NEXAR_SHM: bool, 1 (0: no same-host shared-memory rings) */
  int shm_coll;            /* NEXAR_SHM_COLL: bool, 1 (0: small collectives never use a segment) */
  uint32_t yield_us;       /* NEXAR_YIELD_US: 0..1000000 or auto */
  uint32_t spin_us;        /* NEXAR_SPIN_US: 0..1000000 or auto */
  int cpu_bind;            /* NEXAR_CPU_BIND: auto|core|none (core/cpubind.h) */
  const char *quic_cc;     /* NEXAR_QUIC_CC: "bbr2" (default), "bbr", "cubic", "reno" */
  const char *reduce_impl; /* NEXAR_REDUCE_IMPL: "auto" (default), "scalar", "avx2", "avx512" */
  int bulk_tcp_local;      /* NEXAR_BULK_TCP_LOCAL: bool, 0 */
  size_t bulk_min_bytes;   /* NEXAR_BULK_MIN_BYTES: 0..1 TiB or auto */
  /* device staging (nexar_device_adapter): segment size (pure function of
   * offset and length; 4 KiB..1 GiB, 1 MiB), segments copied out ahead of
   * their first use (1..1024, 8), copy threads for synchronous adapters,
   * process-wide (1..16, 2; the first endpoint's value counts) */
  size_t device_segment_bytes;  /* NEXAR_DEVICE_SEGMENT_BYTES */
  uint32_t device_prefetch;     /* NEXAR_DEVICE_PREFETCH */
  uint32_t device_copy_threads; /* NEXAR_DEVICE_COPY_THREADS */
  const char *test_impair;      /* NEXAR_TEST_IMPAIR: at most 512 characters */
  /* NEXAR_TEST_AGREE_EXIT (test hook): collect | accept:K | commit:K makes the
   * process _exit(9) after sending COLLECT, or ACCEPT / COMMIT to K members;
   * promise: after its first PROMISE; ready: once its connections to a
   * prospective view are up (elastic.c) */
  const char *test_agree_exit;
} nx_knobs;
/* Defaults only. */
void nx_knobs_defaults(nx_knobs *k);
/* Defaults plus the environment; on a malformed variable, k holds the
 * defaults and INVALID_ARGUMENT names the variable. */
int nx_knobs_from_env(nx_knobs *k);
/* NEXAR_X=value lines (auto, names for enums, "(unset)" strings). */
void nx_knobs_print(FILE *f, const nx_knobs *k);

/* "automatic", "manual", "abort"; "?" for an invalid value. */
const char *nx_recovery_policy_name(nexar_recovery_policy p);
/* "full_mesh", "k_regular", "hypercube"; "?" for an invalid value. */
const char *nx_topology_name(nexar_topology t);

/* Strict parsers. `what` names the source in the error sentence (a variable
 * such as "NEXAR_RANK", or a command-line flag): "NEXAR_RANK='x': expected
 * ...". *out is written only on success. 0 or NEXAR_ERR_INVALID_ARGUMENT. */
int nx_parse_u32(const char *what, const char *s, uint32_t *out);
int nx_parse_u16(const char *what, const char *s, uint16_t *out);
int nx_parse_bytes(const char *what, const char *s, size_t *out);
int nx_parse_bool(const char *what, const char *s, int *out);

/* Environment variables with the parsers above. A variable that is unset or
 * empty leaves *out untouched and sets *present = 0; a set one sets
 * *present = 1 and *out, or fails naming the variable and its value (then
 * *present = 0). present may be NULL. nx_env_str's *out points into the
 * environment. 0 or NEXAR_ERR_INVALID_ARGUMENT. */
int nx_env_u32(const char *name, uint32_t *out, int *present);
int nx_env_u16(const char *name, uint16_t *out, int *present);
int nx_env_bytes(const char *name, size_t *out, int *present);
int nx_env_bool(const char *name, int *out, int *present);
int nx_env_str(const char *name, const char **out, int *present);

#endif
