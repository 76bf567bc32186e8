/* The CUDA backend of the device tests (poison_dev.h, pd_cuda_backend):
 * device memory from cudaMalloc (libcudart opened here with dlopen), moved
 * by the libnexar-cuda adapter's own synchronous callbacks. One adapter
 * per process, made on first use (after fork in the process mode). */
#include <dlfcn.h>
#include <nexar/nexar_cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "poison_dev.h"

static int cd_dev;
static nexar_device_adapter *cd_ad;
static int (*cd_malloc)(void **, size_t);
static int (*cd_free)(void *);
static pthread_mutex_t cd_mu = PTHREAD_MUTEX_INITIALIZER;

static void cd_init(void) {
  pthread_mutex_lock(&cd_mu);
  if (!cd_ad) {
    int rc = nexar_cuda_adapter_new(&cd_ad, cd_dev);
    if (rc) {
      fprintf(stderr, "cuda backend: %d: %s\n", rc, nexar_cuda_last_error());
      exit(77);
    }
    static const char *names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                  "libcudart.so.11"};
    const char *forced = getenv("NEXAR_CUDA_LIBRARY");
    void *dl = forced ? dlopen(forced, RTLD_NOW) : NULL;
    for (size_t i = 0; !dl && i < 4; i++)
      dl = dlopen(names[i], RTLD_NOW);
    cd_malloc = dl ? (int (*)(void **, size_t))dlsym(dl, "cudaMalloc") : NULL;
    cd_free = dl ? (int (*)(void *))dlsym(dl, "cudaFree") : NULL;
    if (!cd_malloc || !cd_free) {
      fprintf(stderr, "cuda backend: cudaMalloc not found\n");
      exit(2);
    }
  }
  pthread_mutex_unlock(&cd_mu);
}

static void *cd_alloc_(size_t n) {
  cd_init();
  void *p = NULL;
  if (cd_malloc(&p, n ? n : 1)) {
    fprintf(stderr, "cuda backend: cudaMalloc(%zu) failed\n", n);
    exit(2);
  }
  return p;
}
static void cd_free_(void *p) {
  cd_init();
  cd_free(p);
}
static void cd_put(void *dev, const void *host, size_t n) {
  cd_init();
  if (cd_ad->from_host(cd_ad->ctx, dev, host, n)) {
    fprintf(stderr, "cuda backend: put: %s\n", nexar_cuda_last_error());
    exit(2);
  }
}
static void cd_get(void *host, const void *dev, size_t n) {
  cd_init();
  if (cd_ad->to_host(cd_ad->ctx, host, dev, n)) {
    fprintf(stderr, "cuda backend: get: %s\n", nexar_cuda_last_error());
    exit(2);
  }
}
static void cd_adapter(nexar_device_adapter *a, int async) {
  cd_init();
  *a = *cd_ad;
  if (!async) a->struct_size = offsetof(nexar_device_adapter, to_host_async);
}

const pd_backend *pd_cuda_backend(int device) {
  static const pd_backend b = {cd_alloc_, cd_free_, cd_put, cd_get, cd_adapter};
  cd_dev = device;
  return &b;
}
