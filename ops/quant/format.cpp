#include "ops/quant/format.h"

namespace te {

std::optional<QuantFormat> quant_format_from_name(std::string_view name) {
  for (const auto& f : kQuantFormats)
    if (f.name == name) return f.format;
  return std::nullopt;
}

std::string_view usage_name(Usage u) {
  switch (u) {
    case Usage::none: return "none";
    case Usage::rowwise: return "rowwise";
    case Usage::columnwise: return "columnwise";
    case Usage::both: return "both";
  }
  return "none";
}

}  // namespace te
