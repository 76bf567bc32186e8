/* libnexar-cuda: a ready nexar_device_adapter for one CUDA device.
 *
 * A separate library (-lnexar-cuda, pkg-config nexar-cuda): libnexar never
 * links CUDA, and neither does this one at build time. It loads the CUDA
 * runtime with dlopen when an adapter is created: NEXAR_CUDA_LIBRARY when
 * set (that file only), else libcudart.so, libcudart.so.13, .so.12, .so.11.
 *
 * The adapter copies on non-blocking streams of the device's greatest
 * priority, through pinned host staging slots (NEXAR_CUDA_SLOTS slots of
 * NEXAR_CUDA_SLOT_BYTES bytes, default 4 of 4 MiB); host memory it gave out
 * itself (host_alloc, cudaHostAlloc) is copied directly. It fills both the
 * synchronous callbacks (to_host, from_host) and the asynchronous ones
 * (events: cudaEventRecord / cudaEventQuery), and host_alloc / host_free.
 * Every callback makes the adapter's device current on its thread
 * (cudaSetDevice), so callbacks may run on any thread. reduce is NULL.
 *
 * Thread-safe: an adapter may be used by several clients and threads at
 * once; nexar_cuda_adapter_del only once no client uses it. */
#ifndef NEXAR_CUDA_H
#define NEXAR_CUDA_H

#include <nexar/nexar.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define NEXAR_CUDA_EXTERN __attribute__((visibility("default")))
#else
#define NEXAR_CUDA_EXTERN
#endif

/** Creates an adapter for CUDA device ordinal `device` (set it as
 * nexar_config.adapter). Returns 0, or:
 *  NEXAR_ERR_UNSUPPORTED: the CUDA runtime is missing ("libcudart not found:
 *    ...", or a symbol it lacks), or there is no usable device ("no CUDA
 *    device: ..."; no driver counts as no device);
 *  NEXAR_ERR_INVALID_ARGUMENT: out is NULL, or device is not an ordinal of
 *    this machine;
 *  NEXAR_ERR_IO: a CUDA call failed (stream, event or pinned memory);
 *  NEXAR_ERR_NOMEM.
 * On failure *out is NULL and nexar_cuda_last_error() says why. */
NEXAR_CUDA_EXTERN int nexar_cuda_adapter_new(nexar_device_adapter **out, int device);
/** Frees an adapter (NULL: nothing), its streams and pinned slots. */
NEXAR_CUDA_EXTERN void nexar_cuda_adapter_del(nexar_device_adapter *a);
/** The device ordinal of an adapter made by nexar_cuda_adapter_new. */
NEXAR_CUDA_EXTERN int nexar_cuda_adapter_device(const nexar_device_adapter *a);
/** The calling thread's last failure of this library, as a sentence
 * (never NULL; "" when none). */
NEXAR_CUDA_EXTERN const char *nexar_cuda_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
