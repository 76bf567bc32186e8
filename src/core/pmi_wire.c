/* PMI-1 wire codec (see pmi_wire.h). */
#include "core/pmi_wire.h"
#include "core/common.h"

#include <string.h>

static int key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

static int val_char(char c) {
  return c > ' ' && c < 127 && c != '='; /* printable, no space */
}

int nx_pmi_line(const char *buf, size_t len, size_t *linelen) {
  size_t n = NX_MIN(len, (size_t)NX_PMI_LINE_MAX + 1);
  for (size_t i = 0; i < n; i++) {
    if (buf[i] == '\n') {
      *linelen = i;
      return 1;
    }
    if (buf[i] == '\0') return nx_fail(NEXAR_ERR_PROTOCOL, "PMI: a NUL byte in a reply");
  }
  if (len > NX_PMI_LINE_MAX)
    return nx_fail(NEXAR_ERR_PROTOCOL, "PMI: a reply longer than %d bytes", NX_PMI_LINE_MAX);
  return 0;
}

static int bad(nx_pmi_msg *m, const char *why, size_t at) {
  m->n = 0;
  return nx_fail(NEXAR_ERR_PROTOCOL, "PMI: malformed reply: %s at byte %zu", why, at);
}

int nx_pmi_decode(const char *line, size_t len, nx_pmi_msg *m) {
  m->n = 0;
  if (!line) return bad(m, "no line", 0);
  if (len > NX_PMI_LINE_MAX) return bad(m, "too long", NX_PMI_LINE_MAX);
  memcpy(m->line, line, len);
  m->line[len] = '\0';
  char *p = m->line, *end = m->line + len;
  char *msg_end = NULL; /* the NUL after the last value, when that value is msg's */
  while (p < end) {
    while (p < end && *p == ' ')
      p++;
    if (p == end) break;
    char *k = p;
    while (p < end && key_char(*p))
      p++;
    if (msg_end && (p == end || *p != '=')) {
      /* a word without '=' after msg=: the launcher's sentence goes on */
      for (p = k; p < end && val_char(*p);)
        p++;
      if (p < end && *p != ' ') return bad(m, "bad character in msg", (size_t)(p - m->line));
      *msg_end = ' ';
      msg_end = p < end ? p : NULL;
      if (p < end) *p++ = '\0';
      continue;
    }
    msg_end = NULL;
    if (p == k) return bad(m, "expected a key", (size_t)(p - m->line));
    if (p - k > NX_PMI_KEY_MAX) return bad(m, "key too long", (size_t)(k - m->line));
    if (p == end || *p != '=') return bad(m, "expected '=' after a key", (size_t)(p - m->line));
    *p++ = '\0';
    char *v = p;
    while (p < end && val_char(*p))
      p++;
    if (p < end && *p != ' ') return bad(m, "bad character in a value", (size_t)(p - m->line));
    if (m->n == NX_PMI_FIELDS_MAX) return bad(m, "too many fields", (size_t)(k - m->line));
    for (size_t i = 0; i < m->n; i++)
      if (!strcmp(m->key[i], k)) return bad(m, "a key given twice", (size_t)(k - m->line));
    if (m->n == 0 && strcmp(k, "cmd")) return bad(m, "the first key is not cmd", 0);
    if (p < end) {
      if (!strcmp(k, "msg")) msg_end = p;
      *p++ = '\0';
    }
    m->key[m->n] = k;
    m->val[m->n] = v;
    m->n++;
  }
  if (m->n == 0) return bad(m, "empty line", 0);
  if (!*m->val[0]) return bad(m, "empty cmd", 4);
  return 0;
}

const char *nx_pmi_get(const nx_pmi_msg *m, const char *key) {
  for (size_t i = 0; i < m->n; i++)
    if (!strcmp(m->key[i], key)) return m->val[i];
  return NULL;
}

int nx_pmi_expect(const nx_pmi_msg *m, const char *cmd, const char *what) {
  const char *c = nx_pmi_get(m, "cmd");
  if (!c || strcmp(c, cmd))
    return nx_fail(NEXAR_ERR_PROTOCOL, "%s: the launcher answered cmd=%.64s, expected cmd=%s", what,
                   c ? c : "(none)", cmd);
  const char *rc = nx_pmi_get(m, "rc");
  if (rc && strcmp(rc, "0")) {
    const char *msg = nx_pmi_get(m, "msg");
    return nx_fail(NEXAR_ERR_IO, "%s: the launcher answered rc=%.16s%s%.200s", what, rc,
                   msg ? ": " : "", msg ? msg : "");
  }
  return 0;
}

static int check_token(const char *s, int value) {
  if (!s || !*s) return value ? 0 : -1; /* an empty value is fine, an empty key not */
  size_t n = strnlen(s, NX_PMI_LINE_MAX + 1);
  if (!value && n > NX_PMI_KEY_MAX) return -1;
  for (size_t i = 0; i < n; i++)
    if (value ? !val_char(s[i]) : !key_char(s[i])) return -1;
  return 0;
}

int nx_pmi_encode(char *out, size_t cap, size_t *len, const char *cmd, const char *const *kv,
                  size_t nkv) {
  if (!out || cap == 0 || check_token(cmd, 1) || !cmd || !*cmd)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "PMI: bad command");
  size_t cap1 = NX_MIN(cap, (size_t)NX_PMI_LINE_MAX + 2);
  size_t o = (size_t)snprintf(out, cap1, "cmd=%s", cmd);
  for (size_t i = 0; i < nkv && o < cap1; i++) {
    if (check_token(kv[2 * i], 0) || check_token(kv[2 * i + 1], 1))
      return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                     "PMI: key or value '%.64s' not allowed on the wire",
                     kv[2 * i] ? kv[2 * i] : "(null)");
    o += (size_t)snprintf(out + o, cap1 - o, " %s=%s", kv[2 * i], kv[2 * i + 1]);
  }
  if (o + 1 >= cap1) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "PMI: message too long");
  out[o++] = '\n';
  out[o] = '\0';
  *len = o;
  return 0;
}
