/* Slurm hostlist expansion (see hostlist.h): checked in one pass, then
 * walked with an odometer over the bracket groups, so nothing is allocated
 * and a list of a million hosts costs no memory. */
#include "core/hostlist.h"
#include "core/common.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define NX_HL_GROUPS_MAX 16 /* bracket groups in one item */
#define NX_HL_DIGITS_MAX 9  /* so every bound fits a uint32_t */

typedef struct hl_range {
  uint32_t lo, hi;
  int width; /* zero-padded to this many digits (0: none) */
} hl_range;

typedef struct hl_group {
  const char *b, *e; /* the text between '[' and ']' */
  size_t count;      /* numbers it stands for */
  int maxw;          /* widest number it produces */
  /* odometer state */
  const char *next; /* the range after the current one (at e: none) */
  hl_range cur;
  uint32_t val;
} hl_group;

typedef struct hl_item {
  const char *b, *e; /* the item's text */
  int ngroups;
  hl_group g[NX_HL_GROUPS_MAX];
  size_t count;
} hl_item;

static int bad(const char *what, const char *list, const char *at, const char *why) {
  return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s '%.80s%s': %s at offset %zu",
                 what ? what : "hostlist", list, strlen(list) > 80 ? "..." : "", why,
                 (size_t)(at - list));
}

static int is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

/* One bound: 1..9 decimal digits. *p advances past it. */
static int scan_num(const char **p, const char *e, uint32_t *v, int *digits) {
  uint32_t x = 0;
  int n = 0;
  while (*p < e && **p >= '0' && **p <= '9') {
    if (++n > NX_HL_DIGITS_MAX) return -1;
    x = x * 10 + (uint32_t)(**p - '0');
    (*p)++;
  }
  if (n == 0) return -1;
  *v = x;
  *digits = n;
  return 0;
}

static int num_digits(uint32_t v) {
  int n = 1;
  while (v >= 10)
    v /= 10, n++;
  return n;
}

/* One range "lo" or "lo-hi" at *p, ending at ',' or e. Returns NULL or the
 * reason it is malformed. */
static const char *scan_range(const char **p, const char *e, hl_range *r) {
  int dl, dh;
  if (scan_num(p, e, &r->lo, &dl)) return "a range bound must be 1 to 9 decimal digits";
  r->hi = r->lo;
  if (*p < e && **p == '-') {
    (*p)++;
    if (scan_num(p, e, &r->hi, &dh)) return "a range bound must be 1 to 9 decimal digits";
    if (r->hi < r->lo) return "a range ends below its start";
  }
  if (*p < e && **p != ',') return "unexpected character in a bracket group";
  r->width = dl; /* as Slurm: the lower bound's written width ("01" pads to 2) */
  return NULL;
}

/* Checks item [b, e) and fills it; NULL or the reason, *at where. */
static const char *scan_item(const char *b, const char *e, hl_item *it, const char **at) {
  memset(it, 0, sizeof *it);
  it->b = b;
  it->e = e;
  it->count = 1;
  size_t namelen = 0;
  if (b == e) return *at = b, "empty host name";
  for (const char *p = b; p < e;) {
    if (*p == ']') return *at = p, "']' without '['";
    if (*p != '[') {
      if (!is_name_char(*p)) return *at = p, "character not allowed in a host name";
      namelen++, p++;
      continue;
    }
    if (it->ngroups == NX_HL_GROUPS_MAX) return *at = p, "too many bracket groups in one name";
    hl_group *g = &it->g[it->ngroups++];
    g->b = ++p;
    while (p < e && *p != ']') {
      if (*p == '[') return *at = p, "nested '['";
      p++;
    }
    if (p == e) return *at = g->b - 1, "'[' without ']'";
    g->e = p++;
    if (g->b == g->e) return *at = g->b, "empty bracket group";
    for (const char *q = g->b; q < g->e;) {
      hl_range r;
      const char *start = q;
      const char *why = scan_range(&q, g->e, &r);
      if (why) return *at = start, why;
      int w = NX_MAX(r.width, num_digits(r.hi));
      g->maxw = NX_MAX(g->maxw, w);
      g->count += (size_t)(r.hi - r.lo) + 1;
      if (g->count > NX_HOSTLIST_HOSTS_MAX) return *at = start, "too many hosts";
      if (q < g->e) { /* at ',' */
        if (++q == g->e) return *at = q, "empty range after ','";
      }
    }
    if (it->count > NX_HOSTLIST_HOSTS_MAX / g->count) return *at = g->b, "too many hosts";
    it->count *= g->count;
    namelen += (size_t)g->maxw;
  }
  if (namelen >= NX_HOSTLIST_NAME_MAX) return *at = b, "host name too long";
  return NULL;
}

/* The end of the item starting at p: the next ',' outside brackets. */
static const char *item_end(const char *p) {
  int depth = 0;
  for (; *p; p++) {
    if (*p == '[')
      depth++;
    else if (*p == ']' && depth)
      depth--;
    else if (*p == ',' && !depth)
      break;
  }
  return p;
}

static void group_reset(hl_group *g) {
  const char *q = g->b;
  scan_range(&q, g->e, &g->cur);
  g->next = q < g->e ? q + 1 : g->e;
  g->val = g->cur.lo;
}

/* Advances group g; 1 when it wrapped around to its first number. */
static int group_step(hl_group *g) {
  if (g->val < g->cur.hi) {
    g->val++;
    return 0;
  }
  if (g->next < g->e) {
    const char *q = g->next;
    scan_range(&q, g->e, &g->cur);
    g->next = q < g->e ? q + 1 : g->e;
    g->val = g->cur.lo;
    return 0;
  }
  group_reset(g);
  return 1;
}

static void item_name(const hl_item *it, char *out) {
  size_t o = 0;
  int gi = 0;
  for (const char *p = it->b; p < it->e;) {
    if (*p != '[') {
      out[o++] = *p++;
      continue;
    }
    const hl_group *g = &it->g[gi++];
    o += (size_t)snprintf(out + o, NX_HOSTLIST_NAME_MAX - o, "%0*u", g->cur.width, g->val);
    p = g->e + 1;
  }
  out[o] = '\0';
}

/* Checks the whole list; *total gets the host count. */
static int check(const char *list, const char *what, size_t *total) {
  if (!list) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: no list", what ? what : "hostlist");
  if (strnlen(list, NX_HOSTLIST_TEXT_MAX + 1) > NX_HOSTLIST_TEXT_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: longer than %d characters",
                   what ? what : "hostlist", NX_HOSTLIST_TEXT_MAX);
  if (!*list) return bad(what, list, list, "empty list");
  size_t n = 0;
  for (const char *p = list;;) {
    const char *e = item_end(p), *at = p;
    hl_item it;
    const char *why = scan_item(p, e, &it, &at);
    if (why) return bad(what, list, at, why);
    n += it.count;
    if (n > NX_HOSTLIST_HOSTS_MAX) return bad(what, list, p, "too many hosts");
    if (!*e) break;
    p = e + 1;
  }
  *total = n;
  return 0;
}

int nx_hostlist_walk(const char *list, const char *what,
                     int (*fn)(void *ctx, size_t i, const char *host), void *ctx) {
  size_t total, i = 0;
  int rc = check(list, what, &total);
  if (rc || !fn) return rc;
  char name[NX_HOSTLIST_NAME_MAX];
  for (const char *p = list;;) {
    const char *e = item_end(p), *at;
    hl_item it;
    scan_item(p, e, &it, &at);
    for (int g = 0; g < it.ngroups; g++)
      group_reset(&it.g[g]);
    for (size_t k = 0; k < it.count; k++) {
      item_name(&it, name);
      if ((rc = fn(ctx, i++, name))) return rc;
      for (int g = it.ngroups - 1; g >= 0 && group_step(&it.g[g]); g--) {
      }
    }
    if (!*e) break;
    p = e + 1;
  }
  return 0;
}

int nx_hostlist_count(const char *list, const char *what, size_t *n) {
  size_t total = 0;
  int rc = check(list, what, &total);
  if (!rc && n) *n = total;
  return rc;
}

typedef struct nth_ctx {
  size_t want;
  char *out;
  size_t cap;
  int found;
} nth_ctx;

static int nth_fn(void *ctx, size_t i, const char *host) {
  nth_ctx *c = ctx;
  if (i != c->want) return 0;
  if (strlen(host) >= c->cap) return 1;
  memcpy(c->out, host, strlen(host) + 1);
  c->found = 1;
  return 1;
}

int nx_hostlist_nth(const char *list, const char *what, size_t i, char *out, size_t cap) {
  if (!out || cap == 0) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "hostlist: no output buffer");
  out[0] = '\0';
  size_t total;
  int rc = check(list, what, &total);
  if (rc) return rc;
  if (i >= total)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: host %zu asked of a list of %zu",
                   what ? what : "hostlist", i, total);
  nth_ctx c = {i, out, cap, 0};
  nx_hostlist_walk(list, what, nth_fn, &c);
  if (!c.found)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "%s: host %zu does not fit %zu bytes",
                   what ? what : "hostlist", i, cap);
  return 0;
}
