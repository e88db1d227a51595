/* The C ABI of a tool in a shared library (tool class verlpp.tools.SharedLibrary), so that a
 * C or C++ team adds a tool without rebuilding verlpp. Version 1. The tool config entry names the
 * library and the symbol:
 *   - class_name: verlpp.tools.SharedLibrary
 *     config: {type: native, path: /abs/libmytool.so, symbol: my_tool, max_reply_bytes: 65536}
 *     tool_schema: {type: function, function: {name: my_tool, ...}}
 * and the library exports a function of type verlpp_tool_fn_v1. It is called from several
 * threads at once (the calls of one step run concurrently) and must be thread-safe. */
#ifndef VERLPP_AGENT_TOOL_ABI_H
#define VERLPP_AGENT_TOOL_ABI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One call. `name` is the schema's function name, `arguments_json` the call's arguments and
 * `create_kwargs_json` the sample's extra_info.tools_kwargs[name].create_kwargs ({} when absent),
 * both JSON text. Write the reply (UTF-8, NUL-terminated, at most `reply_size` bytes with the NUL;
 * verlpp cuts a reply that fills the buffer) and the call's reward, and return 0. A nonzero return
 * is a failure: `reply` then holds the error message, which the model reads as
 * "Error when executing tool: <message>". */
typedef int (*verlpp_tool_fn_v1)(const char* name, const char* arguments_json, const char* create_kwargs_json,
                                 char* reply, size_t reply_size, double* reward);

#ifdef __cplusplus
}
#endif

#endif /* VERLPP_AGENT_TOOL_ABI_H */
