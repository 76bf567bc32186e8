// Forms a group's nexar communicator through the c10d store torch hands the
// backend, so no port or variable beyond torch's own is needed:
//  - group rank 0 draws a fresh 32-byte token from the OS CSPRNG, starts a
//    seed on an ephemeral port of every interface and publishes
//    "<host>:<port>" and the token under the store keys nexar/seed and
//    nexar/token (torch prefixes the store per group, so every group,
//    dist.new_group ones included, has its own keys and its own seed);
//  - every rank reads them (the store waits for rank 0), joins, and the
//    joined world is split with key = group rank, so nexar's rank order is
//    torch's (the seed assigns ranks in arrival order).
// A group made by dist.new_group is a fresh formation of its members only (the
// creator runs only on them; a split of the default group would need every
// rank). The host published is NEXAR_SEED_HOST, else MASTER_ADDR, else this
// host's first non-loopback IPv4 address, else 127.0.0.1. Anyone who can read
// the store can read the token: the store is the group's trust root, as it is
// for every torch backend.
#include "nexar_pg.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/random.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace nexar_torch {
namespace {

std::string fresh_token() {
  unsigned char raw[32];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("nexar: getrandom for the group token: ") +
                               strerror(errno));
    }
    got += (size_t)n;
  }
  std::string hex;
  char b[3];
  for (unsigned char c : raw) {
    snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  return hex;
}

std::string seed_host() {
  const char *h = getenv("NEXAR_SEED_HOST");
  if (h && *h) return h;
  h = getenv("MASTER_ADDR");
  if (h && *h) return h;
  std::string found = "127.0.0.1";
  struct ifaddrs *ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      if ((i->ifa_flags & IFF_LOOPBACK) || !(i->ifa_flags & IFF_UP)) continue;
      char buf[INET_ADDRSTRLEN];
      auto *sin = reinterpret_cast<struct sockaddr_in *>(i->ifa_addr);
      if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) {
        found = buf;
        break;
      }
    }
    freeifaddrs(ifs);
  }
  return found;
}

std::string join_host_port(const std::string &host, const std::string &port) {
  if (host.find(':') != std::string::npos && host.front() != '[')
    return "[" + host + "]:" + port; // IPv6
  return host + ":" + port;
}

std::string to_string(const std::vector<uint8_t> &v) {
  return std::string(v.begin(), v.end());
}
std::vector<uint8_t> to_bytes(const std::string &s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

uint32_t clamp_ms(std::chrono::milliseconds t) {
  long long ms = t.count();
  if (ms <= 0) return 0;                 // no limit
  if (ms > 86400000LL) return 86400000u; // the config table's maximum (1 day)
  return (uint32_t)ms;
}

[[noreturn]] void fail(const char *what, int rank, int size, int rc) {
  throw std::runtime_error(std::string("nexar: forming the process group (rank ") +
                           std::to_string(rank) + " of " + std::to_string(size) + "): " + what +
                           " failed (" + nexar_strerror(rc) + "): " + nexar_last_error());
}

} // namespace

std::shared_ptr<Comm> form_comm(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                                std::chrono::milliseconds timeout) {
  auto comm = std::make_shared<Comm>();
  comm->rank = rank;
  comm->size = size;
  nexar_config cfg;
  int rc = nexar_config_default(&cfg);
  if (rc) fail("reading the NEXAR_* environment", rank, size, rc);
  // torch's group timeout is the no-progress limit of every operation
  cfg.collective_timeout_ms = clamp_ms(timeout);
  cfg.barrier_timeout_ms = clamp_ms(timeout);
  if (cfg.connect_timeout_ms == 0 || cfg.connect_timeout_ms > clamp_ms(timeout))
    cfg.connect_timeout_ms = clamp_ms(timeout);

  std::string addr, token;
  if (rank == 0) {
    token = fresh_token();
    cfg.cluster_token = token.c_str();
    std::string host = seed_host();
    std::string listen = host.find(':') != std::string::npos ? "[::]:0" : "0.0.0.0:0";
    rc = nexar_seed_new(&comm->seed, listen.c_str(), (uint32_t)size, &cfg);
    if (rc) fail("starting the group's seed", rank, size, rc);
    std::string bound = nexar_seed_addr(comm->seed);
    std::string port = bound.substr(bound.rfind(':') + 1);
    addr = join_host_port(host, port);
    store->set("nexar/token", to_bytes(token));
    store->set("nexar/seed", to_bytes(addr)); // written last: its presence means both are there
  } else {
    addr = to_string(store->get("nexar/seed"));
    token = to_string(store->get("nexar/token"));
  }
  cfg.cluster_token = token.c_str();
  nexar_client *world = nullptr;
  rc = nexar_join(&world, addr.c_str(), &cfg);
  if (rc) fail(("joining through the seed at " + addr).c_str(), rank, size, rc);
  uint32_t got = nexar_world_size(world);
  if ((int)got != size) {
    nexar_client_del(world);
    throw std::runtime_error("nexar: the group's world has " + std::to_string(got) +
                             " ranks, torch says " + std::to_string(size));
  }
  rc = nexar_split(world, 0, (uint32_t)rank, &comm->c);
  nexar_client_del(world); // the child holds its own reference to the connections
  if (rc) fail("ordering the ranks (split)", rank, size, rc);
  if ((rc = nexar_split(comm->c, 0, (uint32_t)rank, &comm->ctl)))
    fail("making the control communicator (split)", rank, size, rc);
  if ((int)nexar_rank(comm->c) != rank)
    throw std::runtime_error("nexar: rank order after the split is " +
                             std::to_string(nexar_rank(comm->c)) + ", expected " +
                             std::to_string(rank));
  return comm;
}

} // namespace nexar_torch
