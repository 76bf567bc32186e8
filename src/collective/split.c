/* nexar_split: allgather every rank's (color, key), then each rank derives the
 * child of its color, ranked by (key, parent rank). */
#include "collective/coll.h"

#include <stdlib.h>
#include <string.h>

/* FNV-1a 64 over parent id, this split's sequence number and the color (all
 * little-endian), as in nexar; 0 is the root communicator, so never 0. */
static uint64_t split_comm_id(uint64_t parent, uint64_t seq, uint32_t color) {
  uint8_t b[20];
  for (int i = 0; i < 8; i++)
    b[i] = (uint8_t)(parent >> (8 * i));
  for (int i = 0; i < 8; i++)
    b[8 + i] = (uint8_t)(seq >> (8 * i));
  for (int i = 0; i < 4; i++)
    b[16 + i] = (uint8_t)(color >> (8 * i));
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < sizeof b; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h ? h : 1;
}

typedef struct member {
  uint32_t key, rank;
} member;

static int member_cmp(const void *a, const void *b) {
  const member *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* After the allgather (scratch 0: everyone's (color, key)): derive the child. */
static int split_finish(void *job) {
  nx_job *j = job;
  uint32_t n = j->world;
  uint8_t *all = j->scratch[0];
  member *m = j->scratch[1];
  if (j->color == NEXAR_COLOR_NONE) return 0;
  uint32_t cnt = 0;
  for (uint32_t i = 0; i < n; i++) {
    const uint8_t *p = all + (size_t)i * 8;
    uint32_t color = 0, key = 0;
    for (int b = 0; b < 4; b++) {
      color |= (uint32_t)p[b] << (8 * b);
      key |= (uint32_t)p[4 + b] << (8 * b);
    }
    if (color == j->color) m[cnt++] = (member){key, i};
  }
  qsort(m, cnt, sizeof(member), member_cmp);
  uint32_t *members = (uint32_t *)all; /* reuse: n * 8 bytes >= cnt * 4 */
  for (uint32_t i = 0; i < cnt; i++)
    members[i] = m[i].rank;
  uint64_t id = split_comm_id(nexar_comm_id(j->c), nx_coll_seq(j->k), j->color);
  return nx_comm_derive(j->c, id, members, cnt, j->out);
}

int nx_run_split(nx_job *j) {
  uint32_t n = j->world;
  /* scratch 0: everyone's (color, key), then ours (sent from there, so it
   * lives as long as the schedule); scratch 1: the members */
  uint8_t *all = nx_job_alloc(j, (size_t)n * 8 + 8);
  member *m = nx_job_alloc(j, (size_t)n * sizeof(member));
  if (!all || !m) return NEXAR_ERR_NOMEM;
  if (all != j->scratch[0]) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "split: scratch in use");
  /* Little-endian (color, key) so ranks of any byte order agree. */
  uint8_t *mine = all + (size_t)n * 8;
  for (int i = 0; i < 4; i++) {
    mine[i] = (uint8_t)(j->color >> (8 * i));
    mine[4 + i] = (uint8_t)(j->key >> (8 * i));
  }
  int rc = nx_allgather_raw(j, mine, all, 8, 1);
  if (rc) return rc;
  nx_j_call(j, split_finish);
  return 0;
}
