/* A complete verlpp plugin in plain C99 against the raw ABI header (no C++ SDK): host memory as
 * one device of torch type "cpu", the required functions only, every optional group left NULL so
 * the host uses its fallbacks. It passes verlpp-plugin-check. Start from it when your toolchain
 * has no C++17; otherwise the C++ template (share/verlpp/plugin_template) is shorter. Rules the
 * code follows (docs/plugin-abi.md): every bad argument is an error value, never a crash; output
 * structs are written only up to the caller's struct_size; errors own their message. */
#define _POSIX_C_SOURCE 200112L /* posix_memalign: C99 has no aligned allocation */

#include <verlpp/plugin_abi.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define C99_CAPACITY ((uint64_t)1 << 30) /* a pretend 1 GiB device */

/* ---- errors: allocated here, freed by the host through error_free */

static verlpp_error* make_error(int32_t code, const char* message) {
  verlpp_error* e = (verlpp_error*)malloc(sizeof(verlpp_error));
  char* copy = (char*)malloc(strlen(message) + 1);
  if (e == NULL || copy == NULL) {
    free(e);
    free(copy);
    return NULL; /* cannot even report: the caller sees success, as the ABI allows no better */
  }
  strcpy(copy, message);
  e->struct_size = sizeof(verlpp_error);
  e->code = code;
  e->message = copy;
  return e;
}

static void error_free(verlpp_error* e) {
  if (e == NULL) return;
  free((void*)e->message);
  free(e);
}

#define BAD(message) make_error(VERLPP_STATUS_INVALID_ARGUMENT, message)

/* ---- lifecycle and devices */

static verlpp_error* init(const verlpp_host_api* host) {
  (void)host;
  return NULL;
}

static void shutdown_plugin(void) {}

static verlpp_error* device_count(int32_t* out_count) {
  if (out_count == NULL) return BAD("device_count: out_count is NULL");
  *out_count = 1;
  return NULL;
}

static verlpp_error* device_get_properties(int32_t device, verlpp_device_properties* out) {
  verlpp_device_properties full;
  size_t n;
  if (out == NULL) return BAD("device_get_properties: out is NULL");
  if (out->struct_size < sizeof(size_t)) return BAD("device_get_properties: struct_size is too small");
  if (device != 0) return BAD("device_get_properties: device index out of range");
  memset(&full, 0, sizeof(full));
  strcpy(full.name, "c99 example host device");
  strcpy(full.torch_device_type, "cpu");
  full.dl_device_type = kDLCPU;
  full.total_memory_bytes = C99_CAPACITY;
  full.free_memory_bytes = C99_CAPACITY;
  full.capabilities = VERLPP_DEVICE_CAP_HOST_ADDRESSABLE;
  full.multiprocessor_count = 1;
  /* An older host passes a smaller struct: write only what it has room for. */
  n = out->struct_size < sizeof(full) ? out->struct_size : sizeof(full);
  full.struct_size = n;
  memcpy(out, &full, n);
  return NULL;
}

static verlpp_error* device_memory_info(int32_t device, uint64_t* out_free, uint64_t* out_total) {
  if (device != 0) return BAD("device_memory_info: device index out of range");
  if (out_free == NULL || out_total == NULL) return BAD("device_memory_info: NULL output");
  *out_free = C99_CAPACITY;
  *out_total = C99_CAPACITY;
  return NULL;
}

/* ---- memory */

static verlpp_error* mem_alloc(int32_t device, size_t bytes, size_t alignment, void** out_ptr) {
  size_t align = alignment == 0 ? 64 : alignment, rounded;
  if (device != 0) return BAD("mem_alloc: device index out of range");
  if (out_ptr == NULL) return BAD("mem_alloc: out_ptr is NULL");
  if ((align & (align - 1)) != 0) return BAD("mem_alloc: alignment is not a power of two");
  if (align < sizeof(void*)) align = sizeof(void*);
  if (bytes > C99_CAPACITY) return make_error(VERLPP_STATUS_OUT_OF_MEMORY, "mem_alloc: more than the device holds");
  rounded = (bytes / align + 1) * align; /* a zero-byte request still gets a unique pointer */
  if (posix_memalign(out_ptr, align, rounded) != 0) {
    *out_ptr = NULL;
    return make_error(VERLPP_STATUS_OUT_OF_MEMORY, "mem_alloc: posix_memalign failed");
  }
  return NULL;
}

static verlpp_error* mem_free(int32_t device, void* ptr) {
  if (device != 0) return BAD("mem_free: device index out of range");
  free(ptr);
  return NULL;
}

/* The NULL stream is the only one; copies are synchronous. */
static verlpp_error* memcpy_async(void* dst, const void* src, size_t bytes, int32_t kind, verlpp_stream stream) {
  if (kind < VERLPP_COPY_HOST_TO_DEVICE || kind > VERLPP_COPY_HOST_TO_HOST) return BAD("memcpy_async: bad kind");
  if (stream != NULL) return BAD("memcpy_async: this plugin has no streams");
  if (bytes == 0) return NULL;
  if (dst == NULL || src == NULL) return BAD("memcpy_async: NULL pointer");
  memmove(dst, src, bytes);
  return NULL;
}

static verlpp_error* memset_async(void* dst, int32_t byte_value, size_t bytes, verlpp_stream stream) {
  if (stream != NULL) return BAD("memset_async: this plugin has no streams");
  if (bytes == 0) return NULL;
  if (dst == NULL) return BAD("memset_async: NULL pointer");
  memset(dst, byte_value, bytes);
  return NULL;
}

/* ---- the table and the two exported entry points */

static verlpp_plugin_api table;

VERLPP_PLUGIN_EXPORT_ATTR int32_t verlpp_plugin_probe_v1(char* reason, size_t capacity) {
  /* Cheap: no device context. Return 0 and a reason where the device is absent. */
  if (reason != NULL && capacity > 0) reason[0] = '\0';
  return 1;
}

VERLPP_PLUGIN_EXPORT_ATTR const verlpp_plugin_api* verlpp_plugin_get_api_v1(uint32_t host_minor) {
  (void)host_minor; /* the table is append-only: an older host reads its prefix */
  memset(&table, 0, sizeof(table));
  table.struct_size = sizeof(verlpp_plugin_api);
  table.abi_major = VERLPP_PLUGIN_ABI_MAJOR;
  table.abi_minor = VERLPP_PLUGIN_ABI_MINOR;
  table.name = "c99_example"; /* must match the file name: libverlpp-plugin-c99_example.so */
  table.variant = "";
  table.version = "1.0.0";
  table.torch_device_type = "cpu";
  table.init = init;
  table.shutdown = shutdown_plugin;
  table.error_free = error_free;
  table.device_count = device_count;
  table.device_get_properties = device_get_properties;
  table.device_memory_info = device_memory_info;
  table.mem_alloc = mem_alloc;
  table.mem_free = mem_free;
  table.memcpy_async = memcpy_async;
  table.memset_async = memset_async;
  /* kernels: NULL here. To offer some, point this at a static verlpp_kernel_table with
   * struct_size = sizeof(verlpp_kernel_table) (never a smaller one: the host would not see the
   * entries past it) and the entries you implement; silu_mul only with silu_mul_backward. */
  return &table;
}
