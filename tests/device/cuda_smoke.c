/* libnexar-cuda smoke test (device.cuda_smoke). Without a CUDA device (or
 * runtime) the adapter must be NEXAR_ERR_UNSUPPORTED with a sentence, and
 * the test is skipped (77); a missing library forced through
 * NEXAR_CUDA_LIBRARY must be UNSUPPORTED too, never a crash. With a device:
 * an all_reduce of device buffers on 2 ranks as threads, checked. */
#include <dlfcn.h>
#include <nexar/nexar.h>
#include <nexar/nexar_cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N ((size_t)3 << 20) /* floats: several segments */

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
static malloc_fn dmalloc;
static free_fn dfree;
static nexar_device_adapter *ad;
static int bad;

typedef struct arg {
  nexar_client *c;
  int r;
} arg;

static void *rank_main(void *p) {
  arg *a = p;
  float *h = malloc(N * sizeof *h);
  void *d = NULL;
  if (!h || dmalloc(&d, N * sizeof *h)) {
    fprintf(stderr, "rank %d: no memory\n", a->r);
    bad = 1;
    free(h);
    return NULL;
  }
  for (size_t i = 0; i < N; i++)
    h[i] = (float)(i % 1000) + (float)a->r;
  int rc = ad->from_host(ad->ctx, d, h, N * sizeof *h);
  if (!rc) rc = nexar_all_reduce(a->c, d, N, NEXAR_F32, NEXAR_SUM);
  if (!rc) rc = ad->to_host(ad->ctx, h, d, N * sizeof *h);
  if (rc) {
    fprintf(stderr, "rank %d: all_reduce on the device: %d (%s)\n", a->r, rc, nexar_last_error());
    bad = 1;
  }
  for (size_t i = 0; !rc && i < N; i++)
    if (h[i] != 2.0f * (float)(i % 1000) + 1.0f) {
      fprintf(stderr, "rank %d: element %zu is %g\n", a->r, i, (double)h[i]);
      bad = 1;
      break;
    }
  dfree(d);
  free(h);
  return NULL;
}

int main(void) {
  /* the missing-library path: UNSUPPORTED, named, no crash */
  setenv("NEXAR_CUDA_LIBRARY", "/nonexistent/libcudart.so", 1);
  nexar_device_adapter *x = (nexar_device_adapter *)1;
  int rc = nexar_cuda_adapter_new(&x, 0);
  if (rc != NEXAR_ERR_UNSUPPORTED || x || !strstr(nexar_cuda_last_error(), "libcudart not found")) {
    fprintf(stderr, "forced missing libcudart: rc %d, adapter %p, '%s'\n", rc, (void *)x,
            nexar_cuda_last_error());
    return 1;
  }
  printf("missing library: %s\n", nexar_cuda_last_error());
  unsetenv("NEXAR_CUDA_LIBRARY");
  if (nexar_cuda_adapter_new(NULL, 0) != NEXAR_ERR_INVALID_ARGUMENT) {
    fprintf(stderr, "NULL out: not INVALID_ARGUMENT\n");
    return 1;
  }
  rc = nexar_cuda_adapter_new(&ad, 0);
  if (rc == NEXAR_ERR_UNSUPPORTED) {
    if (ad) return 1;
    printf("no CUDA device (skipped): %s\n", nexar_cuda_last_error());
    return 77;
  }
  if (rc) {
    fprintf(stderr, "nexar_cuda_adapter_new: %d (%s)\n", rc, nexar_cuda_last_error());
    return 1;
  }
  void *dl = NULL;
  const char *names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11"};
  for (size_t i = 0; !dl && i < 4; i++)
    dl = dlopen(names[i], RTLD_NOW);
  dmalloc = dl ? (malloc_fn)dlsym(dl, "cudaMalloc") : NULL;
  dfree = dl ? (free_fn)dlsym(dl, "cudaFree") : NULL;
  if (!dmalloc || !dfree) {
    fprintf(stderr, "cudaMalloc not found\n");
    return 1;
  }
  nexar_config cfg;
  nexar_config_default(&cfg);
  cfg.adapter = ad;
  nexar_client *c[2];
  if ((rc = nexar_bootstrap_local(c, 2, &cfg)) != 0) {
    fprintf(stderr, "bootstrap: %d (%s)\n", rc, nexar_last_error());
    return 1;
  }
  pthread_t t[2];
  arg a[2] = {{c[0], 0}, {c[1], 1}};
  for (int i = 0; i < 2; i++)
    pthread_create(&t[i], NULL, rank_main, &a[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  nexar_client_del(c[0]);
  nexar_client_del(c[1]);
  nexar_cuda_adapter_del(ad);
  printf("cuda_smoke: %s\n", bad ? "FAILED" : "ok");
  return bad;
}
