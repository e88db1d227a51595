// Plugin SDK: plugin_abi.h's kernel list (VERLPP_KERNEL_LIST) as C++ — an id, a name and the
// minor that added it for every kernel-table entry, generic access to an entry by id, and
// kernel_table<Impl>(), which fills a table by member name from the list's functions that Impl
// declares (static member functions of the entries' exact types; VERLPP_SDK_KERNEL declares
// one). The static_asserts below tie the list to verlpp_kernel_table field by field, so the
// two cannot drift apart; the host's gating and availability use the same list.
#pragma once

#include <verlpp/plugin_abi.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace verlpp::sdk {

// One value per kernel-table entry, in table order.
enum class KernelId : uint32_t {
#define VERLPP_SDK_KERNEL_ID(name, minor) name,
  VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_ID)
#undef VERLPP_SDK_KERNEL_ID
};

struct KernelInfo {
  KernelId id;
  const char* name;  // the field's name, e.g. "rms_norm"
  uint32_t minor;    // the ABI minor that appended it (the host calls it only for plugins of that minor or later)
  const char* call;  // "kernels.<name>", how errors name a call of it
};

inline constexpr KernelInfo kKernels[] = {
#define VERLPP_SDK_KERNEL_INFO(name, minor) {KernelId::name, #name, minor, "kernels." #name},
    VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_INFO)
#undef VERLPP_SDK_KERNEL_INFO
};
inline constexpr size_t kNumKernels = sizeof(kKernels) / sizeof(kKernels[0]);

inline constexpr const KernelInfo& kernel_info(KernelId id) { return kKernels[static_cast<uint32_t>(id)]; }

// Every list entry is the field at its index, and the list covers the whole table.
#define VERLPP_SDK_KERNEL_PLACE(name, minor)                                                                    \
  static_assert(offsetof(verlpp_kernel_table, name) == sizeof(size_t) + size_t(KernelId::name) * sizeof(void*), \
                "VERLPP_KERNEL_LIST: " #name " is not at its place in verlpp_kernel_table");
VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_PLACE)
#undef VERLPP_SDK_KERNEL_PLACE
static_assert(sizeof(verlpp_kernel_table) == sizeof(size_t) + kNumKernels * sizeof(void*),
              "VERLPP_KERNEL_LIST does not name every field of verlpp_kernel_table");

// The size of verlpp_kernel_table as ABI 1.`minor` defines it (sizeof(size_t) plus one pointer
// per entry of that minor or older): the struct_size a plugin built for that minor reports. A
// table shorter than its plugin's minor hides the entries past its end from the host.
inline constexpr size_t kernel_table_size(uint32_t minor) {
  size_t entries = 0;
  for (const KernelInfo& k : kKernels) entries += k.minor <= minor;
  return sizeof(size_t) + entries * sizeof(void*);
}
static_assert(kernel_table_size(0) == offsetof(verlpp_kernel_table, logprob_backward) &&
                  kernel_table_size(VERLPP_PLUGIN_ABI_MINOR) == sizeof(verlpp_kernel_table),
              "kernel_table_size disagrees with verlpp_kernel_table");

// The table field of kernel `id`: KernelSlot<id>::member points at it (typed calls by id).
template <KernelId id>
struct KernelSlot;
#define VERLPP_SDK_KERNEL_SLOT(name, minor)                    \
  template <>                                                  \
  struct KernelSlot<KernelId::name> {                          \
    static constexpr auto member = &verlpp_kernel_table::name; \
  };
VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_SLOT)
#undef VERLPP_SDK_KERNEL_SLOT

// Entry `id` of `table` as an untyped pointer (NULL when the plugin leaves it out).
inline const void* kernel_entry(const verlpp_kernel_table& table, KernelId id) {
  switch (id) {
#define VERLPP_SDK_KERNEL_GET(name, minor) \
  case KernelId::name:                     \
    return reinterpret_cast<const void*>(table.name);
    VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_GET)
#undef VERLPP_SDK_KERNEL_GET
  }
  return nullptr;
}

// Sets entry `id` of `table` to NULL.
inline void clear_kernel_entry(verlpp_kernel_table& table, KernelId id) {
  switch (id) {
#define VERLPP_SDK_KERNEL_CLEAR(name, minor) \
  case KernelId::name:                       \
    table.name = nullptr;                    \
    return;
    VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_CLEAR)
#undef VERLPP_SDK_KERNEL_CLEAR
  }
}

// The function type of entry `name`.
template <class Pointer>
using kernel_fn_t = std::remove_pointer_t<Pointer>;

// Declares a plugin's implementation of entry `name` inside its kernels struct, with the entry's
// exact type: `struct MyKernels { VERLPP_SDK_KERNEL(rms_norm); };`, defined in a .cpp as
// `verlpp_error* MyKernels::rms_norm(const DLTensor* x, ...) { ... }`.
#define VERLPP_SDK_KERNEL(name) static ::verlpp::sdk::kernel_fn_t<decltype(verlpp_kernel_table::name)> name
// Declares every kernel of the list, for a plugin that implements them all (a kernel added to
// the list then fails to link until the plugin defines it).
#define VERLPP_SDK_KERNEL_DECLARATION(name, minor) VERLPP_SDK_KERNEL(name);
#define VERLPP_SDK_EVERY_KERNEL VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_DECLARATION)

namespace detail {
#define VERLPP_SDK_KERNEL_DECLARED(name, minor) \
  template <class Impl, class = void>           \
  struct declares_##name : std::false_type {};  \
  template <class Impl>                         \
  struct declares_##name<Impl, std::void_t<decltype(&Impl::name)>> : std::true_type {};
VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_DECLARED)
#undef VERLPP_SDK_KERNEL_DECLARED
}  // namespace detail

// A table with every entry Impl declares (as a static member function of the entry's type) and
// NULL for the rest, struct_size set.
template <class Impl>
verlpp_kernel_table make_kernel_table() {
  verlpp_kernel_table t{};
  t.struct_size = sizeof(t);
#define VERLPP_SDK_KERNEL_FILL(name, minor) \
  if constexpr (detail::declares_##name<Impl>::value) t.name = &Impl::name;
  VERLPP_KERNEL_LIST(VERLPP_SDK_KERNEL_FILL)
#undef VERLPP_SDK_KERNEL_FILL
  return t;
}

// make_kernel_table<Impl>() made once, for a plugin's `static const verlpp_kernel_table* kernels()`.
template <class Impl>
const verlpp_kernel_table* kernel_table() {
  static const verlpp_kernel_table table = make_kernel_table<Impl>();
  return &table;
}

}  // namespace verlpp::sdk
