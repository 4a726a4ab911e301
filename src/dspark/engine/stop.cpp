#include "dspark/engine/stop.h"

#include <algorithm>

#include "dspark/core/error.h"

namespace dspark {

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_) {
    DSPARK_CHECK_KIND(invalid_input, !s.empty(), "stop strings must not be empty");
  }
}

std::string StopStringMatcher::push(std::string_view text) {
  if (stopped_) return {};
  pending_.append(text);
  // Earliest full match (emitted text never held a partial match, so any match starts here).
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos < best || (pos == best && pos != std::string::npos && s.size() > matched_.size())) {
      best = pos;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringMatcher::flush() {
  std::string out;
  out.swap(pending_);
  return stopped_ ? std::string{} : out;
}

}  // namespace dspark
