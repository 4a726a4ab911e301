// Stop strings matched on decoded text, across token boundaries: text that might be the start of a
// stop string is held back until it is known not to be; when a stop string appears, the text before
// it is released and the stop string and everything after it are dropped.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dspark {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends decoded text; returns the part that is now safe to emit. Once a stop string has been
  // seen, stopped() is true and later calls return "".
  std::string push(std::string_view text);
  // End of generation: releases the held-back text (empty after a stop).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched ("" when none).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: a suffix that is a prefix of some stop string
  std::string matched_;
  bool stopped_ = false;
};

}  // namespace dspark
