/* A stand-in for the NVIDIA driver (libcuda.so.1), so that the cuda plugin's probe can be
 * tested on a machine without a GPU: it answers only the five driver calls the probe makes,
 * from environment variables, and lacks everything else (so the CUDA runtime refuses it and
 * the plugin's init fails with a message). Never installed; used through LD_LIBRARY_PATH.
 *   FAKE_CUDA_INIT     cuInit's result (default 0; 100 = no device, 34 = stub library)
 *   FAKE_CUDA_VERSION  cuDriverGetVersion's value (default 13000 = CUDA 13.0)
 *   FAKE_CUDA_CC       compute capabilities of the devices, comma-separated, e.g. "90,86"
 *                      (major * 10 + minor; empty or unset = no device) */
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static int env_int(const char* name, int fallback) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}

/* The compute capability of device `index`, or -1 when there is no such device. */
static int device_cc(int index) {
  const char* list = getenv("FAKE_CUDA_CC");
  int i = 0;
  while (list && *list) {
    if (i == index) return atoi(list);
    list = strchr(list, ',');
    if (list) ++list;
    ++i;
  }
  return -1;
}

EXPORT int cuInit(unsigned int flags) {
  (void)flags;
  return env_int("FAKE_CUDA_INIT", 0);
}

EXPORT int cuDriverGetVersion(int* version) {
  *version = env_int("FAKE_CUDA_VERSION", 13000);
  return 0;
}

EXPORT int cuDeviceGetCount(int* count) {
  int n = 0;
  while (device_cc(n) >= 0) ++n;
  *count = n;
  return 0;
}

EXPORT int cuDeviceGet(int* device, int ordinal) {
  if (device_cc(ordinal) < 0) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *device = ordinal;
  return 0;
}

EXPORT int cuDeviceGetAttribute(int* value, int attribute, int device) {
  int cc = device_cc(device);
  if (cc < 0) return 101;
  if (attribute == 75) {
    *value = cc / 10;
    return 0;
  } /* COMPUTE_CAPABILITY_MAJOR */
  if (attribute == 76) {
    *value = cc % 10;
    return 0;
  }         /* COMPUTE_CAPABILITY_MINOR */
  return 1; /* CUDA_ERROR_INVALID_VALUE */
}

EXPORT int cuGetErrorName(int error, const char** name) {
  *name = error == 100 ? "CUDA_ERROR_NO_DEVICE" : error == 34 ? "CUDA_ERROR_STUB_LIBRARY" : "CUDA_ERROR_FAKE";
  return 0;
}
