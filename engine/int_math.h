// Integer rounding for blocks, tiles and padding, shared by host and device code.
#pragma once
#include <cstdint>

#include "engine/hd.h"

namespace te {

TE_HD constexpr int64_t ceil_div(int64_t x, int64_t m) { return (x + m - 1) / m; }  // x, m > 0
TE_HD constexpr int64_t round_up(int64_t x, int64_t m) { return ceil_div(x, m) * m; }

}  // namespace te
