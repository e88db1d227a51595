// A plain-text table for terminal output: columns sized to their widest cell.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace verlpp::apps {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : header_(std::move(header)) {}
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& out) const {
    std::vector<size_t> width(header_.size(), 0);
    auto measure = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
    };
    measure(header_);
    for (const auto& r : rows_) measure(r);
    auto line = [&](const std::vector<std::string>& r) {
      for (size_t i = 0; i < width.size(); ++i) {
        std::string cell = i < r.size() ? r[i] : "";
        out << cell;
        if (i + 1 < width.size()) out << std::string(width[i] - cell.size() + 2, ' ');
      }
      out << '\n';
    };
    line(header_);
    std::vector<std::string> rule;
    for (size_t w : width) rule.push_back(std::string(w, '-'));
    line(rule);
    for (const auto& r : rows_) line(r);
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace verlpp::apps
