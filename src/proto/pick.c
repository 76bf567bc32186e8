/* Choosing between two ways by their measured times (pick.h). */
#include "proto/pick.h"

#include <string.h>

void nx_pick_init(nx_pick *p) {
  memset(p, 0, sizeof *p);
}

static nx_pick_class *class_of(nx_pick *p, uint64_t bytes) {
  unsigned k = 0;
  for (uint64_t b = bytes >> 11; b && k + 1 < NX_PICK_CLASSES; b >>= 1)
    k++;
  return &p->c[k];
}

static int try_way(nx_pick_class *c, int w) {
  c->tway = (uint8_t)w;
  c->tleft = NX_PICK_TRY;
  c->tmin = UINT64_MAX;
  return w;
}

int nx_pick_way(nx_pick *p, uint64_t bytes) {
  nx_pick_class *c = class_of(p, bytes);
  if (c->tleft) return c->tway;
  if (!c->est[0] || !c->est[1]) return try_way(c, c->est[0] ? 1 : 0);
  if (++c->since < c->every) return c->best;
  c->since = 0;
  return try_way(c, !c->best);
}

void nx_pick_done(nx_pick *p, uint64_t bytes, int way, uint64_t ns) {
  nx_pick_class *c = class_of(p, bytes);
  int w = way != 0;
  /* ns per MiB, at least 1 (0 means unmeasured); a call of an hour or more
   * counts as an hour */
  const uint64_t hour = 3600ull * 1000000000ull;
  uint64_t r = (ns < hour ? ns : hour) * (1ull << 20) / (bytes ? bytes : 1);
  r = r ? r : 1;
  if (c->tleft && w == c->tway) { /* a try's call: the fastest counts, at its end */
    c->tmin = r < c->tmin ? r : c->tmin;
    if (--c->tleft) return;
    r = c->tmin;
  }
  int first = !c->est[w];
  if (first || !c->est[!w] || w != c->best) {
    /* a first measurement, or a try: what the way takes now, whatever it
     * took before the machine may have changed */
    c->est[w] = r;
    if (!c->est[!w] || c->est[w] < c->est[!w]) {
      c->best = (uint8_t)w;
      c->since = 0;
      c->every = NX_PICK_EVERY_MIN;
    } else if (!first) { /* a try that lost: the next one later */
      c->every = c->every >= NX_PICK_EVERY_MAX / 2 ? NX_PICK_EVERY_MAX : 2 * c->every;
    }
    return;
  }
  /* the way taken: an eighth of each sample, and no sample above twice
   * the estimate, so one call slowed by a preemption moves it by an eighth
   * at most, and a way that became five times slower has grown by 40% in
   * three calls. Once it is slower than the other's last time, the other
   * is taken (and measured) again. */
  uint64_t e = c->est[w], s = r < 2 * e ? r : 2 * e;
  c->est[w] = e - e / 8 + s / 8;
  if (c->est[w] > c->est[!w]) {
    c->best = (uint8_t)!w;
    c->since = 0;
    c->every = NX_PICK_EVERY_MIN;
  }
}
