/* A hostile "device" for the adapter tests: device memory is a separate
 * mapping kept PROT_NONE, made readable and writable only inside the
 * adapter's callbacks (mprotect around the copy, under a lock since
 * callbacks may run concurrently). Any direct access by the library
 * faults. Optional: copies sleep sleep_us per call (overlap benchmark),
 * and the asynchronous fields (events completed by a later query). */
#ifndef NX_TESTS_POISON_DEV_H
#define NX_TESTS_POISON_DEV_H

#include <nexar/nexar.h>
#include <stddef.h>

void pd_init(size_t reserve_bytes);
void *pd_alloc(size_t bytes);
void pd_free(void *p, size_t bytes);
/* test-side access (the same protected copy the adapter does) */
void pd_put(void *dev, const void *host, size_t bytes);
void pd_get(void *host, const void *dev, size_t bytes);
/* adapter: async = 1 fills the asynchronous fields; sleep_us per copy */
void pd_adapter(nexar_device_adapter *a, int async, unsigned sleep_us);
/* calls made (copies) */
unsigned long pd_calls(void);
/* fail the n-th next copy (0: never) */
void pd_fail_after(unsigned long n);

/* A real device instead (gpu_check: dev_test with NEXAR_DEV_TEST_CUDA set):
 * pd_alloc, pd_free, pd_put, pd_get and pd_adapter then go to these. */
typedef struct pd_backend {
  void *(*alloc)(size_t bytes);
  void (*free)(void *p);
  void (*put)(void *dev, const void *host, size_t bytes);
  void (*get)(void *host, const void *dev, size_t bytes);
  void (*adapter)(nexar_device_adapter *a, int async);
} pd_backend;
void pd_use(const pd_backend *b);
/* tests/device/cuda_dev.c (built with libnexar-cuda): the backend on CUDA
 * device ordinal `device`, or NULL (a sentence on stderr) */
const pd_backend *pd_cuda_backend(int device);

#endif
