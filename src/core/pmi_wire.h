/* The PMI-1 wire protocol of MPICH's Hydra (and of Slurm's PMI-1 plugins):
 * one line of space-separated key=value pairs per message, the first
 * "cmd=<name>". Pure encoding and decoding, no I/O: cluster/pmi.c talks to
 * the launcher over PMI_FD with these.
 *
 * Every reply is untrusted input: a line is at most NX_PMI_LINE_MAX bytes
 * before its '\n', a key at most NX_PMI_KEY_MAX bytes of [A-Za-z0-9_-], a
 * value printable ASCII without spaces or '=' (words without '=' that follow
 * a "msg=" value continue it: launchers put sentences there; Hydra puts
 * "msg=success" before other fields), at most NX_PMI_FIELDS_MAX
 * fields, no key twice, the first one cmd. Anything else is
 * NEXAR_ERR_PROTOCOL with a sentence naming what is wrong. */
#ifndef NX_CORE_PMI_WIRE_H
#define NX_CORE_PMI_WIRE_H

#include <stddef.h>

#define NX_PMI_LINE_MAX 2048 /* a message, '\n' excluded; Hydra's values are <= 1024 */
#define NX_PMI_KEY_MAX 64
#define NX_PMI_FIELDS_MAX 16

typedef struct nx_pmi_msg {
  char line[NX_PMI_LINE_MAX + 1]; /* the line, cut into NUL-terminated keys and values */
  size_t n;
  const char *key[NX_PMI_FIELDS_MAX];
  const char *val[NX_PMI_FIELDS_MAX];
} nx_pmi_msg;

/* Finds the end of the first message in buf[0..len): *linelen gets its
 * length without the '\n'. 1 when a whole line is there, 0 when more bytes
 * are needed, NEXAR_ERR_PROTOCOL when NX_PMI_LINE_MAX bytes came without a
 * '\n' or the line holds a NUL. */
int nx_pmi_line(const char *buf, size_t len, size_t *linelen);

/* Decodes one line (without its '\n'; a trailing '\r' is not allowed).
 * 0 or NEXAR_ERR_PROTOCOL (m->n = 0 then). */
int nx_pmi_decode(const char *line, size_t len, nx_pmi_msg *m);

/* The value of key, or NULL. */
const char *nx_pmi_get(const nx_pmi_msg *m, const char *key);

/* A reply that must be cmd=<cmd>, with rc=0 when it has an rc: 0; another
 * cmd: NEXAR_ERR_PROTOCOL; rc non-zero: NEXAR_ERR_IO with the launcher's msg.
 * what names the request in the sentence ("PMI get of nexar.seed"). */
int nx_pmi_expect(const nx_pmi_msg *m, const char *cmd, const char *what);

/* Encodes "cmd=<cmd> k1=v1 k2=v2 ...\n" from nkv pairs (kv[2i], kv[2i+1])
 * into out[cap]; *len gets its length. Keys and values must obey the rules
 * above (a value: no spaces, '=' or control characters, so a key cannot be
 * smuggled in). 0 or NEXAR_ERR_INVALID_ARGUMENT. */
int nx_pmi_encode(char *out, size_t cap, size_t *len, const char *cmd, const char *const *kv,
                  size_t nkv);

#endif
