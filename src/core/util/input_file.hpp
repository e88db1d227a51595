// Opening a user's input file (config, dataset, tokenizer, prompts) with one kind of error: the
// path, what the file was meant to be, and why it cannot be read (missing, a directory, no
// permission), before any of it is parsed. Internal to the library.
#pragma once

#include <fstream>
#include <string>

namespace verlpp::files {

// Throws Error(path, "<what>: <reason>") unless `path` names a readable file (regular, or a
// device/FIFO such as /dev/stdin): missing, a directory and unreadable are refused by name.
void check_input_file(const std::string& path, const std::string& what);
// check_input_file, then the file opened for binary reading.
std::ifstream open_input(const std::string& path, const std::string& what);
// The whole file; a read error part-way is an error naming the file.
std::string read_input(const std::string& path, const std::string& what);

}  // namespace verlpp::files
