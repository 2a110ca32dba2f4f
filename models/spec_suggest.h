// Did-you-mean hints: the closest of a list of names to a misspelt one (edit distance), for spec keys, enum values
// and tensor names.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace te {

// Levenshtein distance (insert, delete, substitute; case-sensitive).
size_t edit_distance(std::string_view a, std::string_view b);
// The closest of `candidates` when it is plausibly a typo of `word` (distance ≤ max(2, |word|/3)); else empty.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates);
// "a | b | c"
std::string join_names(const std::vector<std::string>& names, std::string_view sep = " | ");

}  // namespace te
