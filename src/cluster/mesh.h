/* Turning an identity (rank, cluster id, certificate) and the address table
 * into a connected root communicator: shared by bootstrap_local and join. */
#ifndef NX_CLUSTER_MESH_H
#define NX_CLUSTER_MESH_H

#include "runtime/engine.h"
#include "transport/pki.h"

/* Binds an endpoint for a future member: host from cfg->bind_addr (or
 * default_host), port from it (or ephemeral). When default_host is IPv6 (the
 * endpoint will advertise an IPv6 address), a wildcard bind host ("*",
 * "0.0.0.0") becomes "::", a dual-stack socket. */
int nx_mesh_bind(nx_ep **out, const nexar_config *cfg, const char *default_host);
/* Installs credentials (takes ownership of creds on success), starts the
 * progress thread, connects the full mesh before deadline and returns the
 * root communicator (which owns the endpoint reference). started (if not
 * NULL) runs once the endpoint knows its peers, before connecting: from then
 * on another thread may mark a peer dead, which fails the formation. */
int nx_mesh_form_ex(nx_ep *ep, uint32_t rank, uint32_t world, const uint8_t cluster_id[16],
                    gnutls_certificate_credentials_t creds, char (*addrs)[128], uint64_t deadline,
                    void (*started)(nx_ep *ep, void *arg), void *arg, nexar_client **out);
int nx_mesh_form(nx_ep *ep, uint32_t rank, uint32_t world, const uint8_t cluster_id[16],
                 gnutls_certificate_credentials_t creds, char (*addrs)[128], uint64_t deadline,
                 nexar_client **out);

#endif
