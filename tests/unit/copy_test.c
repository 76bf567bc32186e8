/* core/copy: the non-temporal copy gives memcpy's bytes for every
 * alignment of either end and every length around its 16-byte head and
 * 64-byte body, and writes nothing outside [dst, dst + len). */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "core/copy.h"

#define SPAN 4096

int main(void) {
  static uint8_t src[SPAN + 64], dst[SPAN + 192], want[SPAN + 192];
  const size_t lens[] = {0, 1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 1000, 4095, SPAN};
  for (size_t i = 0; i < sizeof src; i++)
    src[i] = (uint8_t)(i * 7 + 3);
  for (size_t sa = 0; sa < 64; sa += 3)
    for (size_t da = 0; da < 64; da += 5)
      for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        size_t len = lens[k];
        memset(dst, 0xa5, sizeof dst);
        memset(want, 0xa5, sizeof want);
        memcpy(want + 64 + da, src + sa, len);
        nx_copy_nt(dst + 64 + da, src + sa, len);
        CHECK(!memcmp(dst, want, sizeof dst), "copy of %zu bytes, source +%zu, destination +%zu",
              len, sa, da);
      }
  return 0;
}
