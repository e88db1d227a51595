/* A plugin written against the raw C ABI (no SDK), compiled several times with different
 * defines to make the broken plugins the loader tests need:
 *   RAW_NAME "..."      the name in the table (default "raw")
 *   RAW_MAJOR n         abi_major in the table (default 1)
 *   RAW_SMALL_TABLE     declare a table that ends before the communicator slots, as an older
 *                       plugin would: the host must load it with those slots NULL
 *   RAW_NO_GET_API      export only the probe symbol
 *   RAW_V2_ONLY         export only verlpp_plugin_get_api_v2 / probe_v2 (a future major)
 *   RAW_PROBE_SEGV, RAW_PROBE_ABORT, RAW_PROBE_EXIT, RAW_PROBE_HANG, RAW_PROBE_UNTERMINATED,
 *   RAW_PROBE_OVERFLOW  a probe that crashes, aborts, ends the process, never returns, fills
 *                       the reason without a NUL, or writes past the capacity it was given
 *   RAW_LOAD_SEGV       a static initialiser that crashes when the file is opened
 * It is also the proof that a plugin can be written in C99. */
#include <verlpp/plugin_abi.h>

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef RAW_NAME
#define RAW_NAME "raw"
#endif
#ifndef RAW_MAJOR
#define RAW_MAJOR 1
#endif

static verlpp_error* make_error(int32_t code, const char* message) {
  verlpp_error* e = (verlpp_error*)malloc(sizeof(verlpp_error));
  e->struct_size = sizeof(verlpp_error);
  e->code = code;
  e->message = message; /* static strings only in this plugin */
  return e;
}
static void error_free(verlpp_error* e) { free(e); }
static verlpp_error* init(const verlpp_host_api* host) {
  (void)host;
  return NULL;
}
static void shutdown_plugin(void) {}
static verlpp_error* device_count(int32_t* n) {
  if (!n) return make_error(VERLPP_STATUS_INVALID_ARGUMENT, "out_count is NULL");
  *n = 1;
  return NULL;
}
static verlpp_error* device_get_properties(int32_t device, verlpp_device_properties* out) {
  verlpp_device_properties full;
  size_t n;
  if (!out || out->struct_size < sizeof(size_t)) return make_error(VERLPP_STATUS_INVALID_ARGUMENT, "bad out");
  if (device != 0) return make_error(VERLPP_STATUS_INVALID_ARGUMENT, "device index out of range");
  memset(&full, 0, sizeof(full));
  strcpy(full.name, "raw C device");
  strcpy(full.torch_device_type, "cpu");
  full.dl_device_type = kDLCPU;
  full.total_memory_bytes = 1u << 20;
  full.free_memory_bytes = 1u << 20;
  n = out->struct_size < sizeof(full) ? out->struct_size : sizeof(full);
  full.struct_size = n;
  memcpy(out, &full, n);
  return NULL;
}
static verlpp_error* device_memory_info(int32_t device, uint64_t* f, uint64_t* t) {
  if (device != 0 || !f || !t) return make_error(VERLPP_STATUS_INVALID_ARGUMENT, "bad argument");
  *f = 1u << 20;
  *t = 1u << 20;
  return NULL;
}
static verlpp_error* mem_alloc(int32_t device, size_t bytes, size_t alignment, void** out) {
  (void)alignment;
  if (device != 0 || !out) return make_error(VERLPP_STATUS_INVALID_ARGUMENT, "bad argument");
  *out = malloc(bytes ? bytes : 1);
  return *out ? NULL : make_error(VERLPP_STATUS_OUT_OF_MEMORY, "malloc failed");
}
static verlpp_error* mem_free(int32_t device, void* p) {
  (void)device;
  free(p);
  return NULL;
}
static verlpp_error* memcpy_async(void* dst, const void* src, size_t bytes, int32_t kind, verlpp_stream s) {
  (void)kind;
  (void)s;
  memmove(dst, src, bytes);
  return NULL;
}

static verlpp_plugin_api table;

#ifdef RAW_LOAD_SEGV
__attribute__((constructor)) static void crash_on_load(void) { raise(SIGSEGV); }
#endif

static const verlpp_plugin_api* build_table(void) {
  memset(&table, 0, sizeof(table));
#ifdef RAW_SMALL_TABLE
  /* A pretend older plugin: its table ends where the communicator slots begin. */
  table.struct_size = offsetof(verlpp_plugin_api, comm_create);
#else
  table.struct_size = sizeof(verlpp_plugin_api);
#endif
  table.abi_major = RAW_MAJOR;
  table.abi_minor = 0;
  table.name = RAW_NAME;
  table.variant = "";
  table.version = "0.0.1";
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
#ifdef RAW_SMALL_TABLE
  /* Past the declared size: a correct host never reads this, so a non-NULL poison value here
   * would crash a host that did. */
  table.comm_create = (verlpp_error * (*)(const verlpp_comm_config*, verlpp_comm*))(uintptr_t)0x1;
  table.kernels = (const verlpp_kernel_table*)(uintptr_t)0x1;
#endif
#ifdef RAW_MINOR0_NATIVE_POISON
  /* A 1.0 plugin whose table has room for the 1.1 slots but holds junk there: the host must not
   * call them, because abi_minor says 0. */
  table.stream_from_native = (verlpp_error * (*)(int32_t, void*, verlpp_stream*))(uintptr_t)0x1;
  table.stream_native_handle = (verlpp_error * (*)(verlpp_stream, void**))(uintptr_t)0x1;
#endif
  return &table;
}

#ifdef RAW_V2_ONLY
VERLPP_PLUGIN_EXPORT_ATTR int32_t verlpp_plugin_probe_v2(char* reason, size_t cap) {
  (void)reason;
  (void)cap;
  return 1;
}
VERLPP_PLUGIN_EXPORT_ATTR const void* verlpp_plugin_get_api_v2(uint32_t host_minor) {
  (void)host_minor;
  return build_table();
}
#else
VERLPP_PLUGIN_EXPORT_ATTR int32_t verlpp_plugin_probe_v1(char* reason, size_t cap) {
  (void)reason;
  (void)cap;
#if defined(RAW_PROBE_SEGV)
  raise(SIGSEGV);
#elif defined(RAW_PROBE_ABORT)
  abort();
#elif defined(RAW_PROBE_EXIT)
  _exit(7);
#elif defined(RAW_PROBE_HANG)
  for (;;) pause();
#elif defined(RAW_PROBE_UNTERMINATED)
  memset(reason, 'x', cap);
  return 0;
#elif defined(RAW_PROBE_OVERFLOW)
  memset(reason, 'x', cap + 16);
  return 0;
#endif
  return 1;
}
#ifndef RAW_NO_GET_API
VERLPP_PLUGIN_EXPORT_ATTR const verlpp_plugin_api* verlpp_plugin_get_api_v1(uint32_t host_minor) {
  (void)host_minor;
  return build_table();
}
#endif
#endif
