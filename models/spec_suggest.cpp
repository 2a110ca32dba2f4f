#include "models/spec_suggest.h"

#include <algorithm>

namespace te {

size_t edit_distance(std::string_view a, std::string_view b) {
  // One row of the DP table; the names compared are short (keys, enum values, tensor names).
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string closest_name(std::string_view word, const std::vector<std::string>& candidates) {
  // Very long words (hostile input) are not worth a quadratic comparison and are never typos of short keys.
  if (word.size() > 256) return {};
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string join_names(const std::vector<std::string>& names, std::string_view sep) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += sep;
    s += names[i];
  }
  return s;
}

}  // namespace te
