/*
 * A third process that writes garbage into the shared-memory segments of a
 * libnexar rank (shm_proc_test.sh): what a process of the same user, or root,
 * could do to the rings.
 *
 *   shm_forger PID MS [ring|coll|bcast|how]
 *
 * ring (default): finds PID's mappings of "/memfd:nexar-shm" (/proc/PID/maps),
 * opens each through /proc/PID/map_files (root only) and, for MS
 * milliseconds, keeps filling both rings' data with 0x5a and announcing a
 * record where each reader is (core/ring.h: the record's first word is the
 * complement of the index it starts at; tail = head + 4096 too): every
 * reader must find a malformed record. Layout as in runtime/shm.c: control
 * blocks at 1024 and 2048 (tail, then head one cache line on), data from
 * 4096, two rings of equal size (a power of two).
 * bcast: the same segments' small-broadcast entries (after the data
 * buffers: BDEPTH entries of BENT bytes per rank): every entry's sequence
 * word claims a broadcast far ahead, which no root can have begun.
 * coll: the communicators' collective segments ("/memfd:nexar-cseg",
 * runtime/cseg.h): every rank's four arrival words (control blocks of 320 bytes
 * from 4096, the rank count at byte 24 of the header) claim a sequence far
 * ahead, which no rank that follows the protocol can write.
 * how: the same arrivals' way byte (nx_cseg_sig.how: byte 3 of the
 * signature, 8 bytes into each 64-byte arrival), which a two-rank copy's
 * decider sets to 0 or 1: 0xff, without pause (a reader reads it a few
 * microseconds after the decider wrote it).
 * Exit 0 having forged at least one segment, 77 if none could be opened (not
 * root: skip).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define CTL 320    /* sizeof(nx_cseg_ctl), as cseg.c asserts */
#define BENT 1152  /* sizeof(nx_cseg_bent) */
#define BDEPTH 128 /* NX_CSEG_BDEPTH */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 4) return 64;
  int bcast = argc == 4 && !strcmp(argv[3], "bcast");
  int how = argc == 4 && !strcmp(argv[3], "how");
  int coll = bcast || how || (argc == 4 && !strcmp(argv[3], "coll"));
  const char *name = coll ? "/memfd:nexar-cseg" : "/memfd:nexar-shm";
  char path[128];
  snprintf(path, sizeof path, "/proc/%s/maps", argv[1]);
  FILE *f = fopen(path, "r");
  if (!f) return 77;
  char line[512];
  uint8_t *seg[64];
  size_t len[64], n = 0;
  while (n < 64 && fgets(line, sizeof line, f)) {
    if (!strstr(line, name)) continue;
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    snprintf(path, sizeof path, "/proc/%s/map_files/%lx-%lx", argv[1], lo, hi);
    int fd = open(path, O_RDWR);
    if (fd < 0) continue;
    void *m = mmap(NULL, hi - lo, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) continue;
    seg[n] = m, len[n++] = hi - lo;
  }
  fclose(f);
  if (!n) {
    printf("shm_forger: no segment of pid %s could be opened\n", argv[1]);
    return 77;
  }
  double t0 = now_ms(), ms = atof(argv[2]);
  while (now_ms() - t0 < ms) {
    for (size_t i = 0; i < n; i++) {
      if (coll) {
        uint32_t ranks, slot;
        memcpy(&ranks, seg[i] + 24, sizeof ranks);
        memcpy(&slot, seg[i] + 28, sizeof slot);
        if (bcast) { /* every broadcast entry's sequence word */
          size_t at =
              4096 + (((size_t)ranks * CTL + 4095) & ~(size_t)4095) + (size_t)ranks * 2 * slot;
          for (size_t e = 0; e < (size_t)ranks * BDEPTH && at + (e + 1) * BENT <= len[i]; e++)
            *(volatile uint64_t *)(seg[i] + at + e * BENT) = 1ull << 40;
          continue;
        }
        for (uint32_t r = 0; r < ranks && 4096 + (r + 1) * CTL <= len[i]; r++) {
          volatile uint64_t *arrive = (volatile uint64_t *)(seg[i] + 4096 + CTL * r);
          if (how) {
            for (int a = 0; a < 4; a++)
              *((volatile uint8_t *)arrive + 64 * a + 8 + 3) = 0xff;
            continue;
          }
          arrive[0] = arrive[1] = arrive[2] = arrive[3] = 1ull << 40;
        }
        continue;
      }
      size_t ring = (len[i] - 4096) / 2;
      for (int r = 0; r < 2; r++) {
        volatile uint64_t *ctl = (volatile uint64_t *)(seg[i] + 1024 + 1024 * r);
        uint8_t *data = seg[i] + 4096 + ring * r;
        uint64_t head = ctl[8];
        memset(data, 0x5a, ring);
        /* a record announced where the reader is (its first word ~head),
         * its lengths 0x5a5a5a5a; and a tail that says it was published */
        *(volatile uint64_t *)(data + (head & (ring - 1))) = ~head;
        ctl[0] = head + 4096;
      }
    }
    if (!how) usleep(1000);
  }
  printf("shm_forger: forged %zu segment(s) of pid %s\n", n, argv[1]);
  return 0;
}
