/* Network addresses as text, one parser and one printer for every place an
 * address is read (a user's variable or field, a peer's boot message) or
 * printed. The form is "host:port": the host a DNS name, an IPv4 address or
 * a bracketed IPv6 address ("[::1]:29500", "[fe80::1%eth0]:0"). A bare IPv6
 * address ("::1:29500") is ambiguous and refused with a sentence showing the
 * bracketed form. Port 0 means ephemeral where a caller binds. */
#ifndef NX_CORE_ADDR_H
#define NX_CORE_ADDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define NX_ADDR_TEXT_MAX 256 /* longest accepted "host:port", NUL excluded */
#define NX_ADDR_HOST_MAX 256 /* a host buffer that any accepted address fits */

/* Splits addr into host (without brackets) and port: 0, or
 * NEXAR_ERR_INVALID_ARGUMENT with a sentence that starts with what (the
 * variable or field, e.g. "NEXAR_BIND_ADDR"; NULL: "address"), shows the
 * input (bounded) and says what is wrong. */
int nx_addr_split(const char *addr, const char *what, char *host, size_t hostcap, uint16_t *port);
/* "host:port", or "[host]:port" when host is an IPv6 address; 0, or
 * NEXAR_ERR_INVALID_ARGUMENT when it does not fit cap (out holds "?"). */
int nx_addr_join(char *out, size_t cap, const char *host, uint16_t port);
/* Numeric text of a socket address: "ip" or, with_port, "ip:port" /
 * "[v6]:port". An IPv4-mapped IPv6 address prints as plain IPv4. 0, or -1
 * (out holds "?") when it is not printable or does not fit. */
int nx_addr_format(const struct sockaddr *sa, socklen_t len, char *out, size_t cap, int with_port);

/* 1 for a host that means every interface: "", "*", "0.0.0.0" or "::". */
int nx_addr_is_wildcard(const char *host);
/* 1 when host is written as an IPv6 address (it holds a ':'). */
int nx_addr_is_v6(const char *host);

/* The port of an AF_INET/AF_INET6 address (host order), and setting it. */
uint16_t nx_sockaddr_port(const struct sockaddr *sa);
void nx_sockaddr_set_port(struct sockaddr *sa, uint16_t port);
/* Rewrites an AF_INET address as its IPv4-mapped AF_INET6 form (for a
 * dual-stack socket); other families are left alone. */
void nx_sockaddr_map_v4(struct sockaddr_storage *ss, socklen_t *len);
/* The reverse: an IPv4-mapped AF_INET6 address becomes AF_INET. */
void nx_sockaddr_unmap_v4(struct sockaddr_storage *ss, socklen_t *len);
/* 1: same IP address and port (IPv4, IPv6, IPv4-mapped IPv6); 2: same port,
 * the other family (a dual-stack member of a mixed IPv4/IPv6 world reaches
 * the other family from its port but not from the address it advertised);
 * else 0 (also for a family other than AF_INET/AF_INET6). */
int nx_sockaddr_same(const struct sockaddr *a, const struct sockaddr *b);

#endif
