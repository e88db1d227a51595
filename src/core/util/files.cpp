// POSIX implementations of the shared file helpers (see files.hpp for why not
// std::filesystem).
#include "files.hpp"
#include "input_file.hpp"

#include "output_file.hpp"

#include <verlpp/core/error.hpp>

#include <dirent.h>
#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace verlpp::files {

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string join(const std::string& a, const std::string& b) {
  if (a.empty() || (!b.empty() && b[0] == '/')) return b;
  return a.back() == '/' ? a + b : a + "/" + b;
}

void make_dirs(const std::string& path) {
  if (path.empty() || is_dir(path)) return;
  size_t slash = path.find_last_of('/');
  if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST)
    throw Error(path, fmt::format("cannot create the folder: {}", std::strerror(errno)));
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw Error(path, fmt::format("cannot remove: {}", std::strerror(errno)));
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) throw Error(path, fmt::format("cannot list the folder: {}", std::strerror(errno)));
  while (dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

void copy_file(const std::string& from, const std::string& to) { write_text(to, read_text(from)); }

std::string read_text(const std::string& path) { return read_input(path, "file"); }

void write_text(const std::string& path, const std::string& text) {
  OutputFile out(path);
  out.write(text);
  out.commit();
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return;  // absent
  if (S_ISDIR(st.st_mode)) {
    for (const std::string& name : list_dir(path)) remove_tree(join(path, name));
    if (rmdir(path.c_str()) != 0) throw Error(path, fmt::format("cannot remove the folder: {}", std::strerror(errno)));
    return;
  }
  if (unlink(path.c_str()) != 0) throw Error(path, fmt::format("cannot remove: {}", std::strerror(errno)));
}

void rename_path(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Error(from, fmt::format("cannot rename to {}: {}", to, std::strerror(errno)));
}

}  // namespace verlpp::files
