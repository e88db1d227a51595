/* Compiled with -std=c99 -Wall -Wextra -pedantic -Werror and no C++ or torch: the plugin ABI
 * header must stay plain C. The size checks pin the v1.0 layout and what 1.1 to 1.6 appended after it. */
#include <verlpp/plugin_abi.h>

#include <stddef.h>

typedef char check_error_first_field[offsetof(verlpp_error, struct_size) == 0 ? 1 : -1];
typedef char check_api_first_field[offsetof(verlpp_plugin_api, struct_size) == 0 ? 1 : -1];
#if defined(__x86_64__) || defined(__aarch64__)
/* LP64 layout of ABI 1.0; a change here is an ABI break unless it only appends. */
typedef char check_api_min_size[VERLPP_PLUGIN_API_MIN_SIZE == 40 ? 1 : -1];
typedef char check_api_10_end[offsetof(verlpp_plugin_api, trainer_override) + sizeof(void*) == 344 ? 1 : -1];
/* 1.1 appended stream_from_native and stream_native_handle. */
typedef char check_api_11_first[offsetof(verlpp_plugin_api, stream_from_native) == 344 ? 1 : -1];
/* 1.6 appended torch_backend_library. */
typedef char check_api_16_first[offsetof(verlpp_plugin_api, torch_backend_library) == 360 ? 1 : -1];
typedef char check_api_size[sizeof(verlpp_plugin_api) == 368 ? 1 : -1];
typedef char check_props_size[sizeof(verlpp_device_properties) == 216 ? 1 : -1];
/* The kernel table of 1.0 ended at byte 48; 1.2 appended logprob_backward, silu_mul and
 * silu_mul_backward (to byte 72); 1.3 add_rms_norm and rotary_kv_store (to 88); 1.4 adamw_update (to
 * 96); 1.5 rotary_paged_attention_decode. */
typedef char check_kernels_10_end[offsetof(verlpp_kernel_table, sample) + sizeof(void*) == 48 ? 1 : -1];
typedef char check_kernels_12_end[offsetof(verlpp_kernel_table, silu_mul_backward) + sizeof(void*) == 72 ? 1 : -1];
typedef char check_kernels_13_end[offsetof(verlpp_kernel_table, rotary_kv_store) + sizeof(void*) == 88 ? 1 : -1];
typedef char check_kernels_14_end[offsetof(verlpp_kernel_table, adamw_update) + sizeof(void*) == 96 ? 1 : -1];
typedef char check_kernels_size[sizeof(verlpp_kernel_table) == 104 ? 1 : -1];
typedef char check_adamw_options_size[sizeof(verlpp_adamw_options) == 56 ? 1 : -1];
typedef char check_comm_config_size[sizeof(verlpp_comm_config) == 48 ? 1 : -1];
#endif

int verlpp_abi_c99_check(void) { return VERLPP_PLUGIN_ABI_MAJOR; }
