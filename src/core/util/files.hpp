// Small POSIX file helpers shared by the library (internal). std::filesystem is avoided here on
// purpose: PyTorch wheels' libtorch.so exports some std::filesystem symbols of its own, and a
// call bound to that copy crashed on the GPU host (docs/building.md); plain POSIX cannot.
#pragma once

#include <string>
#include <vector>

namespace verlpp::files {

bool is_dir(const std::string& path);
bool is_file(const std::string& path);
// "a/b" from ("a", "b"); `b` unchanged when absolute.
std::string join(const std::string& a, const std::string& b);
// mkdir -p; an error naming the path if it cannot be made.
void make_dirs(const std::string& path);
// Removes a file if present; an error if it exists and cannot be removed.
void remove_file(const std::string& path);
// Names of the entries of a folder (no "." or ".."), sorted.
std::vector<std::string> list_dir(const std::string& path);
// Copies a file byte for byte (replacing `to` as write_text does).
void copy_file(const std::string& from, const std::string& to);
// The whole file as a string (read_input: missing, a directory or unreadable is an error naming it).
std::string read_text(const std::string& path);
// Writes `text` to `path` with OutputFile (output_file.hpp): a regular file or a new path
// through a temporary file and a rename, a device or a FIFO in place; every write checked.
void write_text(const std::string& path, const std::string& text);
// Removes a file or a folder with everything in it (nothing if absent); an error naming what
// could not be removed.
void remove_tree(const std::string& path);
// rename(2): atomic within one file system; an error naming both paths.
void rename_path(const std::string& from, const std::string& to);

}  // namespace verlpp::files
