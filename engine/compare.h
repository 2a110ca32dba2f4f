// Relative L2 error ‖got − ref‖ / ‖ref‖ in double (‖got − ref‖ when ref is all zero): the one accuracy measure the
// tests and the benchmarks' validation steps quote (tolerances in docs/NUMERICS.md §7).
#pragma once
#include <cmath>
#include <cstddef>

namespace te {

template <class Got, class Ref>
double rel_l2(const Got& got, const Ref& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(ref[i]);
    num += d * d;
    den += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace te
