// What the two halves of teengine::Engine share: libteengine.so builds an Engine from a validated ModelSpec; the
// YAML front end (engine_yaml.cpp, in the static teengine_yaml library with yaml-cpp) parses specs and calls it.
#pragma once
#include <teengine/teengine.h>

#include "engine/error.h"
#include "models/spec.h"

namespace teengine::detail {

Engine make_engine(te::ModelSpec spec);

// te::InputError → Error(input), te::Error → Error(runtime): the public API throws only teengine::Error.
template <class F>
auto translate(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const te::InputError& e) {
    throw Error(e.what(), true);
  } catch (const te::Error& e) {
    throw Error(e.what(), false);
  }
}

}  // namespace teengine::detail
