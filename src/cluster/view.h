/* View changes shared by recovery (membership.c), the elastic checkpoint
 * (elastic.c) and a joiner's admission (join.c). Internal to src/cluster. */
#ifndef NX_CLUSTER_VIEW_H
#define NX_CLUSTER_VIEW_H

#include <stdint.h>

#include "runtime/comm.h"

/* The id of the view after comm pred_id with these member ids (rank order)
 * at epoch: every member, old or joining, derives the same one. Never 0. */
uint64_t nx_view_id(uint64_t pred_id, uint64_t epoch, const uint32_t *ids, uint32_t n);
/* nx_view_id for members given as comm ranks of c; 0 on NOMEM. */
uint64_t nx_view_successor_id(const nexar_client *c, uint64_t epoch, const uint32_t *members,
                              uint32_t m);
/* Copies c's RPC handlers and failure callback to its successor. */
void nx_view_inherit(nexar_client *c, nexar_client *child);
/* The two-phase change to the prospective view *pp, on every member of it
 * (old and new): opens and authenticates the connections it lacks until
 * deadline_ns, then agrees on it with its readiness, then passes one barrier
 * on it. 0: committed, *pp is the view (if a member died between its
 * readiness and the barrier, *pp was replaced by the survivors' recovery of
 * it). Otherwise *pp must be deleted: PEER_LOST (a member failed before the
 * commit; the error names it), TIMEOUT (someone could not connect in time,
 * or no agreement), ABORTED (the others declared this member failed). */
int nx_view_commit(nexar_client **pp, uint64_t deadline_ns);

#endif
