/* A user's reward library, as custom_reward_function.path would name it: a plain C function. */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

__attribute__((visibility("default"))) double length_score(const char* data_source, const char* response,
                                                           const char* ground_truth_json, const char* extra_info_json) {
  (void)ground_truth_json;
  (void)extra_info_json;
  return (double)strlen(response) + (strcmp(data_source, "bonus") == 0 ? 100.0 : 0.0);
}

/* The batch manager's symbol: every response's length, doubled when the keyword arguments hold
   "double": true, plus 100 for the data source "bonus"; a response "fail" fails the call. */
__attribute__((visibility("default"))) int batch_length_score(
    int64_t n, const char* const* data_sources, const char* const* responses, const char* const* ground_truths_json,
    const char* const* extra_infos_json, const char* kwargs_json, double* scores, char* error, size_t error_size) {
  (void)ground_truths_json;
  (void)extra_infos_json;
  const double factor = strstr(kwargs_json, "\"double\":true") != NULL ? 2.0 : 1.0;
  for (int64_t i = 0; i < n; ++i) {
    if (strcmp(responses[i], "fail") == 0) {
      snprintf(error, error_size, "cannot score response %" PRId64, i);
      return 3;
    }
    scores[i] = factor * (double)strlen(responses[i]) + (strcmp(data_sources[i], "bonus") == 0 ? 100.0 : 0.0);
  }
  return 0;
}
