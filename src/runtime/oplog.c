/* The per-communicator operation ring buffer (hang diagnostics). */
#include "runtime/oplog.h"

#include <stdlib.h>

uint64_t nx_oplog_begin(nx_oplog *l, uint64_t seq, const char *op, uint64_t bytes, uint32_t peer,
                        uint64_t tag) {
  uint64_t id = l->next++;
  nx_oplog_entry *e = &l->e[id % NX_OPLOG_SIZE];
  /* field by field: a memset of the whole entry (its detail text) costs as
   * much as the rest of a small call's bookkeeping */
  e->id = id;
  e->seq = seq;
  e->op = op;
  e->bytes = bytes;
  e->peer = peer;
  e->tag = tag;
  e->state = NX_OP_RUNNING;
  e->rc = 0;
  e->t_start = nx_coarse_ns(); /* ms matter here, and it runs per call */
  e->t_end = 0;
  e->detail[0] = 0;
  return id;
}

void nx_oplog_done(nx_oplog *l, uint64_t seq, const char *op, uint64_t bytes, uint32_t peer,
                   uint64_t tag) {
  uint64_t id = nx_oplog_begin(l, seq, op, bytes, peer, tag);
  nx_oplog_entry *e = &l->e[id % NX_OPLOG_SIZE];
  e->state = NX_OP_DONE;
  e->t_end = e->t_start;
}

void nx_oplog_end(nx_oplog *l, uint64_t id, int rc, const char *detail) {
  nx_oplog_entry *e = &l->e[id % NX_OPLOG_SIZE];
  if (e->id != id || e->state != NX_OP_RUNNING) return; /* overwritten since */
  e->state = rc ? NX_OP_FAILED : NX_OP_DONE;
  e->rc = rc;
  e->t_end = nx_coarse_ns();
  if (rc && detail) snprintf(e->detail, sizeof e->detail, "%s", detail);
}

void nx_oplog_dump(const nx_oplog *l, FILE *f, uint64_t comm_id, uint32_t rank) {
  static const char *states[] = {"running", "done", "failed"};
  uint64_t now = nx_now_ns();
  uint64_t first = l->next > NX_OPLOG_SIZE ? l->next - NX_OPLOG_SIZE : 0;
  fprintf(f, "nexar: recent operations of comm %llu on rank %u (oldest first):\n",
          (unsigned long long)comm_id, rank);
  for (uint64_t id = first; id < l->next; id++) {
    const nx_oplog_entry *e = &l->e[id % NX_OPLOG_SIZE];
    char peer[24] = "-";
    if (e->peer != UINT32_MAX) snprintf(peer, sizeof peer, "%u", e->peer);
    double age = (double)(now - e->t_start) / 1e6;
    double took = e->t_end ? (double)(e->t_end - e->t_start) / 1e6 : age;
    fprintf(f,
            "  #%-5llu %-20s seq %-6llu bytes %-12llu peer/root %-5s tag %-8llu %-7s "
            "started %.1f ms ago, %s %.1f ms%s%s\n",
            (unsigned long long)e->id, e->op ? e->op : "?", (unsigned long long)e->seq,
            (unsigned long long)e->bytes, peer, (unsigned long long)e->tag, states[e->state], age,
            e->t_end ? "took" : "running for", took, e->detail[0] ? ": " : "", e->detail);
  }
  fflush(f);
}
