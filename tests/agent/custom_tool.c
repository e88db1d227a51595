/* A user's tool library, as a tool config's verlpp.tools.SharedLibrary entry names it: the reply
 * echoes the tool's name, its arguments and create_kwargs; a call whose arguments hold "fail"
 * fails with a message; one holding "long" writes more than the buffer holds. */
#include <verlpp/agent/tool_abi.h>

#include <stdio.h>
#include <string.h>

__attribute__((visibility("default"))) int echo_tool(const char* name, const char* arguments_json,
                                                     const char* create_kwargs_json, char* reply, size_t reply_size,
                                                     double* reward) {
  if (strstr(arguments_json, "fail") != NULL) {
    snprintf(reply, reply_size, "cannot run %s", name);
    return 2;
  }
  if (strstr(arguments_json, "long") != NULL) {
    memset(reply, 'x', reply_size); /* no NUL: verlpp cuts it */
    *reward = 0.5;
    return 0;
  }
  snprintf(reply, reply_size, "%s got %s with %s", name, arguments_json, create_kwargs_json);
  *reward = 1.25;
  return 0;
}
