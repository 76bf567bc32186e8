/* Device vs host buffers on a real CUDA device (scripts/gpu_check.sh): a
 * 256 MiB f32 all_reduce at n = 2 (ranks as threads, one device) with
 * device buffers through libnexar-cuda vs host buffers, best of 3, and the
 * adapter's H2D / D2H rates (pageable and pinned host memory). Prints
 * "ratio device/host X" (target <= 1.25). Exit 77 without a device.
 *
 *   device_cuda_bench [MiB] [device] */
#include <dlfcn.h>
#include <nexar/nexar.h>
#include <nexar/nexar_cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct arg {
  nexar_client *c;
  void *buf;
  size_t n;
  double t;
  int rc;
} arg;

static void *one(void *p) {
  arg *a = p;
  nexar_barrier(a->c);
  double t0 = now_s();
  a->rc = nexar_all_reduce(a->c, a->buf, a->n, NEXAR_F32, NEXAR_SUM);
  a->t = now_s() - t0;
  return NULL;
}

static double timed(nexar_client **c, void **buf, size_t n, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    pthread_t t[2];
    arg a[2];
    for (int i = 0; i < 2; i++) {
      a[i] = (arg){c[i], buf[i], n, 0, 0};
      pthread_create(&t[i], NULL, one, &a[i]);
    }
    for (int i = 0; i < 2; i++)
      pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++)
      if (a[i].rc) {
        fprintf(stderr, "all_reduce: %d (%s)\n", a[i].rc, nexar_last_error());
        exit(1);
      }
    double w = a[0].t > a[1].t ? a[0].t : a[1].t;
    if (w < best) best = w;
  }
  return best;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 256;
  int dev = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 0;
  size_t bytes = mib << 20, n = bytes / 4;
  nexar_device_adapter *ad = NULL;
  int rc = nexar_cuda_adapter_new(&ad, dev);
  if (rc == NEXAR_ERR_UNSUPPORTED) {
    printf("device_cuda_bench: skipped: %s\n", nexar_cuda_last_error());
    return 77;
  }
  if (rc) {
    fprintf(stderr, "nexar_cuda_adapter_new: %s\n", nexar_cuda_last_error());
    return 1;
  }
  void *dl = dlopen("libcudart.so", RTLD_NOW);
  for (int v = 13; !dl && v >= 11; v--) {
    char nm[32];
    snprintf(nm, sizeof nm, "libcudart.so.%d", v);
    dl = dlopen(nm, RTLD_NOW);
  }
  int (*dmalloc)(void **, size_t) = dl ? (int (*)(void **, size_t))dlsym(dl, "cudaMalloc") : NULL;
  if (!dmalloc) return 1;
  float *h[2], *chk = malloc(bytes);
  void *d[2], *hb[2];
  for (int i = 0; i < 2; i++) {
    h[i] = malloc(bytes);
    if (!h[i] || !chk || dmalloc(&d[i], bytes)) return 1;
    for (size_t k = 0; k < n; k++)
      h[i][k] = (float)(k % 97) + (float)i;
    hb[i] = h[i];
  }
  /* adapter rates */
  double t0 = now_s();
  for (int i = 0; i < 2; i++)
    if (ad->from_host(ad->ctx, d[i], h[i], bytes)) return 1;
  double h2d = 2.0 * (double)bytes / (now_s() - t0) / 1e9;
  t0 = now_s();
  if (ad->to_host(ad->ctx, chk, d[0], bytes)) return 1;
  double d2h = (double)bytes / (now_s() - t0) / 1e9;
  void *pin = ad->host_alloc(ad->ctx, bytes);
  double ph2d = 0, pd2h = 0;
  if (pin) {
    memcpy(pin, h[0], bytes);
    t0 = now_s();
    ad->from_host(ad->ctx, d[0], pin, bytes);
    ph2d = (double)bytes / (now_s() - t0) / 1e9;
    t0 = now_s();
    ad->to_host(ad->ctx, pin, d[0], bytes);
    pd2h = (double)bytes / (now_s() - t0) / 1e9;
    ad->host_free(ad->ctx, pin);
  }
  nexar_config hc, dc;
  nexar_config_default(&hc);
  nexar_config_default(&dc);
  dc.adapter = ad;
  nexar_client *ch[2], *cd[2];
  if (nexar_bootstrap_local(ch, 2, &hc) || nexar_bootstrap_local(cd, 2, &dc)) {
    fprintf(stderr, "bootstrap: %s\n", nexar_last_error());
    return 1;
  }
  double th = timed(ch, hb, n, 3);
  double td = timed(cd, d, n, 3);
  /* correctness: one more on fresh device data */
  for (int i = 0; i < 2; i++) {
    for (size_t k = 0; k < n; k++)
      h[i][k] = (float)(k % 97) + (float)i;
    ad->from_host(ad->ctx, d[i], h[i], bytes);
  }
  timed(cd, d, n, 1);
  ad->to_host(ad->ctx, chk, d[1], bytes);
  int bad = 0;
  for (size_t k = 0; k < n && !bad; k += 4099)
    bad = chk[k] != 2.0f * (float)(k % 97) + 1.0f;
  printf("adapter H2D %.2f GB/s, D2H %.2f GB/s (pageable); pinned H2D %.2f, D2H %.2f GB/s\n", h2d,
         d2h, ph2d, pd2h);
  printf("all_reduce %zu MiB f32 n=2: host %.1f ms (%.2f GB/s), device %.1f ms (%.2f GB/s)\n", mib,
         th * 1e3, (double)bytes / th / 1e9, td * 1e3, (double)bytes / td / 1e9);
  printf("ratio device/host %.3f (target <= 1.25)%s\n", td / th, bad ? "; RESULT WRONG" : "");
  for (int i = 0; i < 2; i++)
    nexar_client_del(ch[i]), nexar_client_del(cd[i]);
  nexar_cuda_adapter_del(ad);
  return bad;
}
