/* Gradient compression: top-k and random-k sparsification with error
 * feedback, reduced as an allgather of (index, value) pairs that every rank
 * sums in rank order, so all ranks end with bit-identical results. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collective/coll.h"
#include "reduce/reduce.h"
#include "runtime/comm.h"
#include "runtime/devcopy.h"

struct nexar_compressor {
  int random;
  double ratio;
  uint64_t seed;
};

static int new_comp(nexar_compressor **out, double ratio, int random, uint64_t seed) {
  if (!out) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "compressor: NULL out");
  *out = NULL;
  if (!(ratio > 0.0 && ratio <= 1.0))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "compressor: ratio %g is not in (0, 1]", ratio);
  nexar_compressor *c = nx_calloc(1, sizeof *c);
  if (!c) return nx_fail(NEXAR_ERR_NOMEM, "compressor");
  c->random = random, c->ratio = ratio, c->seed = seed;
  *out = c;
  return 0;
}

int nexar_compressor_topk_new(nexar_compressor **out, double ratio) {
  return new_comp(out, ratio, 0, 0);
}
int nexar_compressor_randomk_new(nexar_compressor **out, double ratio, uint64_t seed) {
  return new_comp(out, ratio, 1, seed);
}
void nexar_compressor_del(nexar_compressor *c) {
  free(c);
}

/* Element i as a double (exact for every float type). */
static double get(const void *p, size_t i, nexar_dtype dt) {
  switch (dt) {
  case NEXAR_F32:
    return ((const float *)p)[i];
  case NEXAR_F64:
    return ((const double *)p)[i];
  case NEXAR_F16:
    return nx_f16_to_f32(((const uint16_t *)p)[i]);
  default:
    return nx_bf16_to_f32(((const uint16_t *)p)[i]);
  }
}

static uint64_t mix(uint64_t x) { /* splitmix64 */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

typedef struct {
  double mag;
  uint32_t idx;
} cand;
static int by_mag(const void *a, const void *b) { /* larger first, ties by index */
  const cand *x = a, *y = b;
  if (x->mag != y->mag) return x->mag < y->mag ? 1 : -1;
  return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int nexar_all_reduce_compressed(nexar_client *c, void *buf, size_t count, nexar_dtype dt,
                                nexar_op op, const nexar_compressor *comp, void *residual) {
  int rc = nx_comm_check(c, "all_reduce_compressed");
  if (rc) return rc;
  if (!comp || (count && (!buf || !residual)))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "all_reduce_compressed: NULL argument");
  if (!nx_dtype_valid(dt) || !nx_op_valid(op))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "all_reduce_compressed: bad dtype or op");
  if (!nx_op_dtype_valid(dt, op))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "all_reduce_compressed: op %s needs an integer dtype, not %s", nexar_op_name(op),
                   nexar_dtype_name(dt));
  if ((op != NEXAR_SUM && op != NEXAR_AVG) ||
      (dt != NEXAR_F32 && dt != NEXAR_F64 && dt != NEXAR_F16 && dt != NEXAR_BF16))
    return nx_fail(NEXAR_ERR_UNSUPPORTED,
                   "all_reduce_compressed: needs sum or avg over a float type");
  if (count > UINT32_MAX)
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "all_reduce_compressed: count above 2^32");
  size_t es = nexar_dtype_size(dt), n = c->size;
  size_t k = count ? (size_t)ceil(comp->ratio * (double)count) : 0;
  if (count && k == 0) k = 1;
  size_t rec = 4 + es, chunk = k * rec;
  size_t limit = c->cfg.compressed_allreduce_max_bytes;
  if (limit && (chunk * n > limit || count * es > limit))
    return nx_fail(NEXAR_ERR_INVALID_ARGUMENT,
                   "all_reduce_compressed: %zu bytes exceed "
                   "compressed_allreduce_max_bytes (%zu)",
                   chunk * n, limit);
  size_t total = chunk * n, dense = count * es;
  uint8_t *mine = malloc(chunk ? chunk : 1), *all = malloc(total ? total : 1);
  void *acc = malloc(dense ? dense : 1);
  cand *cands = malloc((count ? count : 1) * sizeof *cands);
  if (!mine || !all || !acc || !cands) {
    free(mine), free(all), free(acc), free(cands);
    return nx_fail(NEXAR_ERR_NOMEM, "all_reduce_compressed");
  }
  /* error feedback: what was not sent last time is added back now. With an
   * adapter buf is device memory: copied out here, the result copied back
   * below; the residual is host memory (API.md). */
  const nexar_device_adapter *ad = c->cfg.adapter;
  size_t segb = c->ep->knobs.device_segment_bytes;
  if (!ad) {
    if (count) memcpy(acc, buf, count * es); /* buf may be NULL at count 0 */
  } else if ((rc = nx_dev_copy(ad, 0, acc, buf, count * es, segb, "all_reduce_compressed")) != 0) {
    free(mine), free(all), free(acc), free(cands);
    return rc;
  }
  nx_reduce(acc, residual, count, dt, NEXAR_SUM);
  pthread_mutex_lock(&c->ep->mu);
  uint64_t call = c->next_seq; /* equal on every rank: same draw everywhere */
  pthread_mutex_unlock(&c->ep->mu);
  for (size_t i = 0; i < count; i++) {
    cands[i].idx = (uint32_t)i;
    cands[i].mag = comp->random ? (double)(mix(comp->seed ^ mix(call) ^ mix(c->id + i)) >> 11)
                                : fabs(get(acc, i, dt));
  }
  if (count) qsort(cands, count, sizeof *cands, by_mag);
  /* the residual keeps the unsent part; the k chosen leave it */
  if (count) memcpy(residual, acc, count * es);
  for (size_t j = 0; j < k; j++) {
    uint32_t idx = cands[j].idx;
    memcpy(mine + j * rec, &idx, 4);
    memcpy(mine + j * rec + 4, (uint8_t *)acc + (size_t)idx * es, es);
    memset((uint8_t *)residual + (size_t)idx * es, 0, es);
  }
  rc = nx_all_gather_host(c, mine, all, chunk, NEXAR_U8);
  void *out = ad ? acc : buf; /* acc is free again */
  if (!rc) {
    if (count) memset(out, 0, count * es);
    for (size_t r = 0; r < n; r++) /* rank order: identical sums everywhere */
      for (size_t j = 0; j < k; j++) {
        uint32_t idx;
        memcpy(&idx, all + (r * k + j) * rec, 4);
        if (idx >= count) {
          rc = nx_fail(NEXAR_ERR_PROTOCOL, "all_reduce_compressed: rank %zu sent index %u", r, idx);
          break;
        }
        nx_reduce((uint8_t *)out + (size_t)idx * es, all + (r * k + j) * rec + 4, 1, dt, NEXAR_SUM);
      }
    if (!rc && op == NEXAR_AVG) nx_avg_div(out, count, dt, (uint32_t)n); /* once, on the sum */
    if (!rc && ad) rc = nx_dev_copy(ad, 1, buf, out, count * es, segb, "all_reduce_compressed");
  }
  free(mine), free(all), free(acc), free(cands);
  return rc;
}
