/* A user's reward library, as custom_reward_function.path would name it: a plain C function. */
#include <string.h>

__attribute__((visibility("default"))) double length_score(const char* data_source, const char* response,
                                                           const char* ground_truth_json, const char* extra_info_json) {
  (void)ground_truth_json;
  (void)extra_info_json;
  return (double)strlen(response) + (strcmp(data_source, "bonus") == 0 ? 100.0 : 0.0);
}
