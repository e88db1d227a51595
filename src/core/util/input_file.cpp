// User input files (see input_file.hpp). POSIX stat, not std::filesystem (files.hpp says why).
#include "input_file.hpp"

#include <verlpp/core/error.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

namespace verlpp::files {

void check_input_file(const std::string& path, const std::string& what) {
  if (path.empty()) throw Error(what, "no file name given");
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)
    throw Error(path, fmt::format("cannot read the {}: {}", what, std::strerror(errno)));
  if (S_ISDIR(info.st_mode)) throw Error(path, fmt::format("the {} is a directory, not a file", what));
  if (::access(path.c_str(), R_OK) != 0)
    throw Error(path, fmt::format("cannot read the {}: {}", what, std::strerror(errno)));
}

std::ifstream open_input(const std::string& path, const std::string& what) {
  check_input_file(path, what);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, fmt::format("cannot open the {}: {}", what, std::strerror(errno)));
  return in;
}

std::string read_input(const std::string& path, const std::string& what) {
  std::ifstream in = open_input(path, what);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw Error(path, fmt::format("reading the {} failed: {}", what, std::strerror(errno)));
  return text.str();
}

}  // namespace verlpp::files
