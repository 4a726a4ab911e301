// A progress bar for long offline jobs (dspark quantize): on a terminal one line redrawn in place
// ("[#####-----]  52%  12/23 tensors  1.20/2.31 GB  name", MB below a GB), elsewhere (a log, a
// pipe) one line per tenth of the work and one for the last item, so that logs stay short.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace dspark {

class ProgressBar {
 public:
  // `out` (stderr in the CLI); `unit`: what the counted items are ("tensors").
  ProgressBar(std::FILE* out, std::string unit);
  // Items and bytes done of their totals (items_total <= 0: the item count is not shown;
  // bytes_total <= 0: the bytes are not shown and the items measure the progress); `detail` names
  // the current item.
  void update(int64_t items, int64_t items_total, int64_t bytes, int64_t bytes_total,
              std::string_view detail);
  // Ends the line (a terminal's bar is left at its last state).
  void finish();

 private:
  std::FILE* out_;
  std::string unit_;
  bool tty_;
  int last_tenth_ = -1;
  bool drawn_ = false;
};

}  // namespace dspark
