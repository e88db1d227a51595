/* probe_plugin: opens one plugin .so the way the host does (dlopen, RTLD_LOCAL), finds both
 * ABI symbols and calls only the probe, printing "score <n> reason '<text>'". Exit 1 when the
 * file or a symbol is missing. Plain C with no verlpp library, so it shows what the .so itself
 * does, independent of the registry's bookkeeping. Usage: probe_plugin <path to .so>
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef int32_t (*probe_fn)(char* reason, size_t capacity);

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <plugin.so>\n", argv[0]);
    return 2;
  }
  void* handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (handle == NULL) {
    fprintf(stderr, "cannot open %s: %s\n", argv[1], dlerror());
    return 1;
  }
  probe_fn probe = (probe_fn)dlsym(handle, "verlpp_plugin_probe_v1");
  if (probe == NULL) {
    fprintf(stderr, "%s does not export verlpp_plugin_probe_v1\n", argv[1]);
    return 1;
  }
  if (dlsym(handle, "verlpp_plugin_get_api_v1") == NULL) {
    fprintf(stderr, "%s does not export verlpp_plugin_get_api_v1\n", argv[1]);
    return 1;
  }
  char reason[512];
  memset(reason, 'x', sizeof reason); /* a refusing probe must terminate what it writes */
  int32_t score = probe(reason, sizeof reason);
  if (score == 0 && memchr(reason, '\0', sizeof reason) == NULL) {
    fprintf(stderr, "probe returned %d and left the reason unterminated\n", (int)score);
    return 1;
  }
  if (score == 0 && reason[0] == '\0') {
    fprintf(stderr, "probe returned 0 without a reason\n");
    return 1;
  }
  printf("score %d reason '%s'\n", (int)score, score == 0 ? reason : "");
  return 0;
}
