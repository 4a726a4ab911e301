#include "dspark/core/progress_bar.h"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace dspark {

ProgressBar::ProgressBar(std::FILE* out, std::string unit)
    : out_(out), unit_(std::move(unit)), tty_(::isatty(::fileno(out)) != 0) {}

void ProgressBar::update(int64_t items, int64_t items_total, int64_t bytes, int64_t bytes_total,
                         std::string_view detail) {
  const double frac =
      bytes_total > 0
          ? static_cast<double>(bytes) / static_cast<double>(bytes_total)
          : (items_total > 0 ? static_cast<double>(items) / static_cast<double>(items_total) : 1.0);
  const int tenth = std::clamp(static_cast<int>(frac * 10), 0, 10);
  const bool last = items_total > 0 ? items == items_total : bytes >= bytes_total;
  if (!tty_ && tenth == last_tenth_ && !last) return;
  last_tenth_ = tenth;
  constexpr int kWidth = 30;
  const int filled = std::clamp(static_cast<int>(frac * kWidth), 0, kWidth);
  const bool gb = bytes_total >= 1'000'000'000;
  const double unit = gb ? 1e9 : 1e6;
  const std::string count =
      items_total > 0 ? fmt::format("  {}/{} {}", items, items_total, unit_) : std::string();
  const std::string size =
      bytes_total > 0 ? fmt::format("  {:.2f}/{:.2f} {}", static_cast<double>(bytes) / unit,
                                    static_cast<double>(bytes_total) / unit, gb ? "GB" : "MB")
                      : std::string();
  const std::string line =
      fmt::format("[{}{}] {:3.0f}%{}{}  {}", std::string(filled, '#'),
                  std::string(kWidth - filled, '-'), frac * 100, count, size, detail);
  if (tty_) {
    // \x1b[K clears what a longer previous line left.
    fmt::print(out_, "\r{}\x1b[K", line);
  } else {
    fmt::print(out_, "{}\n", line);
  }
  std::fflush(out_);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (tty_ && drawn_) fmt::print(out_, "\n");
  std::fflush(out_);
  drawn_ = false;
}

}  // namespace dspark
