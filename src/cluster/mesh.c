/* Mesh formation and nexar_bootstrap_local (all ranks in this process). */
#include "cluster/mesh.h"

#include <stdlib.h>
#include <string.h>

#include "core/addr.h"
#include "core/config.h"
#include "core/cpubind.h"
#include "runtime/comm.h"

int nx_mesh_bind(nx_ep **out, const nexar_config *cfg, const char *default_host) {
  char host[NX_ADDR_HOST_MAX];
  uint16_t port = 0;
  snprintf(host, sizeof host, "%s", default_host ? default_host : "0.0.0.0");
  if (cfg->bind_addr && *cfg->bind_addr) {
    int rc = nx_addr_split(cfg->bind_addr, "config.bind_addr (NEXAR_BIND_ADDR)", host, sizeof host,
                           &port);
    if (rc) return rc;
    /* every interface, for an endpoint that advertises IPv6: the dual-stack wildcard */
    if (nx_addr_is_wildcard(host) && nx_addr_is_v6(default_host)) snprintf(host, sizeof host, "::");
  }
  return nx_ep_new(out, cfg, host, port);
}

int nx_mesh_form_ex(nx_ep *ep, uint32_t rank, uint32_t world, const uint8_t cluster_id[16],
                    gnutls_certificate_credentials_t creds, char (*addrs)[128], uint64_t deadline,
                    void (*started)(nx_ep *ep, void *arg), void *arg, nexar_client **out) {
  *out = NULL;
  int rc = nx_ep_start(ep, rank, world, cluster_id, creds, addrs);
  if (rc) {
    if (ep->creds != creds) gnutls_certificate_free_credentials(creds); /* else ep frees them */
    return rc;
  }
  if (started) started(ep, arg);
  rc = nx_ep_connect_mesh(ep, deadline);
  if (rc) return rc;
  uint32_t *members = malloc(world * sizeof *members);
  if (!members) return nx_fail(NEXAR_ERR_NOMEM, "communicator");
  for (uint32_t i = 0; i < world; i++)
    members[i] = i;
  rc = nx_comm_new(ep, 0, members, world, rank, &ep->cfg, 0, 0, out);
  free(members);
  /* Every rank's connections are up on both ends once all have entered this
   * barrier, so a rank that returns and closes at once cannot break another
   * rank's formation. */
  if (!rc && world > 1 && (rc = nexar_barrier(*out)) != 0) {
    char err[256];
    snprintf(err, sizeof err, "forming the mesh: final barrier: %s", nexar_last_error());
    nexar_client_del(*out);
    *out = NULL;
    rc = nx_fail(rc, "%s", err);
  }
  if (!rc) {
    pthread_mutex_lock(&ep->mu);
    ep->formed = 1;
    pthread_mutex_unlock(&ep->mu);
  }
  return rc;
}

int nx_mesh_form(nx_ep *ep, uint32_t rank, uint32_t world, const uint8_t cluster_id[16],
                 gnutls_certificate_credentials_t creds, char (*addrs)[128], uint64_t deadline,
                 nexar_client **out) {
  return nx_mesh_form_ex(ep, rank, world, cluster_id, creds, addrs, deadline, NULL, NULL, out);
}

/* Credentials for one rank: a key generated here, a CSR, a certificate from
 * the CA naming the rank. */
static int local_creds(nx_ca *ca, const uint8_t *ca_der, size_t ca_len, uint32_t rank,
                       gnutls_certificate_credentials_t *out) {
  nx_key *key = NULL;
  uint8_t *csr = NULL, *cert = NULL;
  size_t csr_len = 0, cert_len = 0;
  int rc = nx_key_new(&key);
  if (!rc) rc = nx_csr_new(key, &csr, &csr_len);
  if (!rc) rc = nx_ca_sign(ca, csr, csr_len, rank, &cert, &cert_len);
  if (!rc) rc = nx_tls_creds_new(out, key, cert, cert_len, ca_der, ca_len);
  free(csr);
  free(cert);
  nx_key_del(key);
  return rc;
}

typedef struct form_arg {
  nx_ep *ep;
  uint32_t rank, world;
  const uint8_t *cid;
  gnutls_certificate_credentials_t creds;
  char (*addrs)[128];
  uint64_t deadline;
  nexar_client *out;
  int rc;
  char err[256];
} form_arg;

static void *form_thread(void *arg) {
  form_arg *a = arg;
  a->rc = nx_mesh_form(a->ep, a->rank, a->world, a->cid, a->creds, a->addrs, a->deadline, &a->out);
  if (a->rc) snprintf(a->err, sizeof a->err, "%s", nexar_last_error());
  return NULL;
}

int nexar_bootstrap_local(nexar_client **clients, uint32_t n, const nexar_config *cfg) {
  if (!clients) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "bootstrap_local: NULL clients");
  if (n == 0) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "bootstrap_local: world_size is 0");
  if (n > 4096) return nx_fail(NEXAR_ERR_INVALID_ARGUMENT, "bootstrap_local: world_size %u", n);
  for (uint32_t i = 0; i < n; i++)
    clients[i] = NULL;
  nexar_config rc_cfg;
  int rc = nx_config_resolve(cfg, &rc_cfg);
  if (rc) return rc;
  uint8_t cid[16];
  nx_ca *ca = NULL;
  uint8_t *ca_der = NULL;
  size_t ca_len = 0;
  nx_ep **eps = nx_calloc(n, sizeof *eps);
  char(*addrs)[128] = nx_calloc(n, sizeof *addrs);
  form_arg *args = nx_calloc(n, sizeof *args);
  pthread_t *thr = nx_calloc(n, sizeof *thr);
  if (!eps || !addrs || !args || !thr) {
    rc = nx_fail(NEXAR_ERR_NOMEM, "bootstrap_local");
    goto out;
  }
  if ((rc = nx_random(cid, sizeof cid)) || (rc = nx_ca_new(&ca, cid)) ||
      (rc = nx_ca_cert(ca, &ca_der, &ca_len)))
    goto out;
  for (uint32_t i = 0; i < n; i++) {
    if ((rc = nx_mesh_bind(&eps[i], &rc_cfg, "127.0.0.1"))) goto out;
    /* the bind host, a wildcard as the loopback address of its family */
    char host[NX_ADDR_HOST_MAX] = "127.0.0.1";
    uint16_t port;
    if (rc_cfg.bind_addr) nx_addr_split(rc_cfg.bind_addr, NULL, host, sizeof host, &port);
    if (nx_addr_is_wildcard(host))
      snprintf(host, sizeof host, "%s", strcmp(host, "::") ? "127.0.0.1" : "::1");
    if ((rc = nx_addr_join(addrs[i], sizeof addrs[i], host, nx_ep_port(eps[i])))) goto out;
  }
  uint64_t t = rc_cfg.connect_timeout_ms;
  uint64_t deadline = t ? nx_now_ns() + t * 1000000ull : 0;
  for (uint32_t i = 0; i < n; i++) {
    args[i] = (form_arg){
        .ep = eps[i], .rank = i, .world = n, .cid = cid, .addrs = addrs, .deadline = deadline};
    if ((rc = local_creds(ca, ca_der, ca_len, i, &args[i].creds))) goto out;
  }
  uint32_t started = 0;
  for (; started < n; started++)
    if (nx_thread_create(&thr[started], NULL, form_thread, &args[started])) break;
  for (uint32_t i = 0; i < started; i++)
    pthread_join(thr[i], NULL);
  rc = started < n ? nx_fail(NEXAR_ERR_IO, "bootstrap_local: cannot start threads") : 0;
  for (uint32_t i = 0; i < n; i++) {
    if (i >= started && args[i].creds) gnutls_certificate_free_credentials(args[i].creds);
    if (!rc && args[i].rc) {
      rc = args[i].rc;
      nx_set_error_text(args[i].err);
    }
  }
  for (uint32_t i = 0; i < n; i++) {
    clients[i] = args[i].out;
    pthread_mutex_lock(&eps[i]->mu);
    eps[i]->world_inproc = 1;
    pthread_mutex_unlock(&eps[i]->mu);
    nx_ep_unref(eps[i]); /* the communicator holds its own reference */
    eps[i] = NULL;
  }
  if (rc) {
    char err[256];
    snprintf(err, sizeof err, "%s", nexar_last_error());
    for (uint32_t i = 0; i < n; i++) {
      nexar_client_del(clients[i]);
      clients[i] = NULL;
    }
    nx_set_error_text(err);
  }
out:
  for (uint32_t i = 0; eps && i < n; i++)
    nx_ep_unref(eps[i]);
  free(eps);
  free(addrs);
  free(args);
  free(thr);
  free(ca_der);
  nx_ca_del(ca);
  nx_config_release(&rc_cfg);
  return rc;
}
