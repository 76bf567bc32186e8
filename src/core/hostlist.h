/* Slurm hostlists ("node[01-04,07],gpu-a[1-2]"), as SLURM_STEP_NODELIST and
 * SLURM_JOB_NODELIST hold them. Pure functions: no I/O, no allocation.
 *
 * Syntax: items separated by commas at the top level; an item is a host name
 * in which bracket groups "[a-b,c,...]" stand for numbers (several groups in
 * one item expand as their product: "r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2).
 * A range keeps the width of its lower bound when that has a leading zero
 * ("[08-10]" is 08 09 10, "[8-10]" is 8 9 10). Names are letters, digits,
 * '-', '.' and '_'. Refused (NEXAR_ERR_INVALID_ARGUMENT with a sentence
 * naming the offset and the reason): an empty list or item, unbalanced or
 * nested brackets, an empty group, a bound that is not decimal digits or has
 * more than 9 of them, a range whose upper bound is below its lower bound, a
 * host name of NX_HOSTLIST_NAME_MAX bytes or more, more than
 * NX_HOSTLIST_HOSTS_MAX hosts, another character. Hosts are produced in the
 * order written (Slurm's order: the first is where task 0 of a block
 * distribution runs). */
#ifndef NX_CORE_HOSTLIST_H
#define NX_CORE_HOSTLIST_H

#include <stddef.h>

#define NX_HOSTLIST_NAME_MAX 256       /* a host name is shorter than this */
#define NX_HOSTLIST_HOSTS_MAX 1048576u /* the most hosts one list may expand to */
#define NX_HOSTLIST_TEXT_MAX 65536     /* the longest list text accepted */

/* Calls fn(ctx, i, host) for each host in order (host is NUL-terminated and
 * valid during the call); a non-zero return from fn stops the walk and is
 * returned. The whole list is checked before fn is first called, so a
 * malformed list never delivers a partial result. what names the source in
 * error sentences ("SLURM_STEP_NODELIST"; NULL: "hostlist"). 0,
 * NEXAR_ERR_INVALID_ARGUMENT, or fn's value. */
int nx_hostlist_walk(const char *list, const char *what,
                     int (*fn)(void *ctx, size_t i, const char *host), void *ctx);
/* The number of hosts; 0 or NEXAR_ERR_INVALID_ARGUMENT. */
int nx_hostlist_count(const char *list, const char *what, size_t *n);
/* Host i (from 0) into out[cap]; 0, or NEXAR_ERR_INVALID_ARGUMENT (malformed,
 * i past the end, or the name does not fit cap). */
int nx_hostlist_nth(const char *list, const char *what, size_t i, char *out, size_t cap);

#endif
