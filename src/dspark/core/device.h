// Where memory lives and kernels run.
#pragma once

#include <cstdint>
#include <string>

namespace dspark {

enum class DeviceKind : uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;

  static constexpr Device cpu() { return Device{DeviceKind::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return Device{DeviceKind::cuda, index}; }
  constexpr bool is_cpu() const { return kind == DeviceKind::cpu; }
  constexpr bool is_cuda() const { return kind == DeviceKind::cuda; }
  friend constexpr bool operator==(Device, Device) = default;
  std::string name() const;  // "cpu", "cuda:0"
};

// Parses "cpu", "cuda", "cuda:N"; throws invalid_input otherwise.
Device parse_device(const std::string& text);

}  // namespace dspark
