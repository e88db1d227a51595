// Progress on stderr: a redrawn bar on a terminal, occasional plain lines otherwise (logs and
// CI keep a readable record without carriage returns).
#pragma once

#include <cstdint>
#include <string>

namespace verlpp::apps {

class Progress {
 public:
  Progress();
  // Shows `done` of `total` for `phase`; finishing a phase ends its line.
  void update(const std::string& phase, int64_t done, int64_t total);
  // Prints a full line (clearing a bar in progress first).
  void line(const std::string& text);

 private:
  bool tty_;
  bool bar_open_ = false;
  std::string phase_;
  int64_t last_percent_ = -1;
  double phase_start_ = 0;
};

}  // namespace verlpp::apps
