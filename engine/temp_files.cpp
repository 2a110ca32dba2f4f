#include "engine/temp_files.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

namespace te {
namespace {

constexpr int kSlots = 32;
constexpr size_t kPathMax = 4096;
struct Slot {
  std::atomic<bool> claimed{false};
  std::atomic<bool> live{false};  // the path is complete: the handler may unlink it
  char path[kPathMax] = {};
};
Slot g_slots[kSlots];

}  // namespace

int register_temp_file(const std::string& path) {
  if (path.size() + 1 > kPathMax) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_slots[i].claimed.compare_exchange_strong(expected, true)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].live.store(true);
    return i;
  }
  return -1;
}

void forget_temp_file(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  g_slots[slot].live.store(false);
  g_slots[slot].claimed.store(false);
}

void remove_temp_files_signal_safe() {
  for (Slot& s : g_slots)
    if (s.live.load()) ::unlink(s.path);
}

}  // namespace te
