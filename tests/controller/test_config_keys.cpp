// The config path as data flows: only config/ knows key strings. Every other source of the
// library and the programs (src/, tasks/) is scanned for a string literal that is a config key
// (as a lookup or an error's location would write it), a key with "=<value>" after it, or a
// section prefix ("trainer.") a lookup would build keys from; any is a failure naming the file
// and line. Keys named in prose inside a longer message are fine; a location uses config/keys.hpp.
#include <verlpp/config/config_key_states.hpp>
#include <verlpp/config/keys.hpp>

#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace {

void collect_sources(const std::string& dir, std::vector<std::string>& out) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      collect_sources(path, out);
    } else {
      const auto ends = [&](const char* ext) {
        const std::string e2 = ext;
        return name.size() > e2.size() && name.compare(name.size() - e2.size(), e2.size(), e2) == 0;
      };
      if (ends(".cpp") || ends(".hpp")) out.push_back(path);
    }
  }
  closedir(d);
}

}  // namespace

TEST_CASE("config keys: no key string outside config/ (src/, tasks/)", "[config]") {
  const std::vector<std::string> leaves = verlpp::config::default_leaf_keys();
  REQUIRE(leaves.size() > 300);
  const std::set<std::string> keys(leaves.begin(), leaves.end());
  std::set<std::string> sections;
  for (const std::string& key : leaves)
    for (size_t dot = key.find('.'); dot != std::string::npos; dot = key.find('.', dot + 1))
      sections.insert(key.substr(0, dot + 1));

  const std::string root = VERLPP_SOURCE_DIR;
  std::vector<std::string> files;
  collect_sources(root + "/src", files);
  collect_sources(root + "/tasks", files);
  REQUIRE(files.size() > 100);
  const std::regex literal(R"re("((?:[^"\\]|\\.)*)")re");
  std::vector<std::string> found;
  size_t scanned = 0;
  for (const std::string& path : files) {
    if (path.find("/src/core/config/") != std::string::npos) continue;
    ++scanned;
    std::ifstream in(path);
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
      const size_t first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line.compare(first, 2, "//") == 0 || line.compare(first, 8, "#include") == 0)
        continue;
      for (std::sregex_iterator it(line.begin(), line.end(), literal), end; it != end; ++it) {
        const std::string text = (*it)[1];
        const size_t eq = text.find('=');
        const std::string head = eq == std::string::npos ? text : text.substr(0, eq);
        if (keys.count(head) || (eq == std::string::npos && sections.count(text)))
          found.push_back(path.substr(root.size() + 1) + ":" + std::to_string(number) + ": \"" + text + "\"");
      }
    }
  }
  CHECK(scanned > 100);
  std::string report;
  for (const std::string& f : found) report += f + "\n";
  INFO(report);
  CHECK(found.empty());
}

TEST_CASE("config keys: the names config/keys.hpp gives are keys of the default tree", "[config]") {
  const std::vector<std::string> leaves = verlpp::config::default_leaf_keys();
  const std::set<std::string> keys(leaves.begin(), leaves.end());
  namespace k = verlpp::config::keys;
  for (const char* key : {k::kModelPath, k::kDataTrainFiles, k::kTrainerDevice, k::kCustomRewardFunctionPath,
                          k::kCustomRewardFunctionName, k::kTrainerLogger, k::kRewardModelModelInputTokenizer}) {
    INFO(key);
    CHECK(keys.count(key) == 1);
  }
}
