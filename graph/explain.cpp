// explain(): the plan in words, for `teengine run --explain` and for debugging schedules.
#include <iomanip>
#include <sstream>

#include "graph/planner.h"

namespace te {

namespace {
std::string bytes_str(int64_t b) {
  std::ostringstream os;
  if (b >= (int64_t{1} << 20)) os << std::fixed << std::setprecision(2) << static_cast<double>(b) / (1 << 20) << " MiB";
  else if (b >= 1024) os << std::fixed << std::setprecision(1) << static_cast<double>(b) / 1024 << " KiB";
  else os << b << " B";
  return os.str();
}
}  // namespace

std::string explain(const Graph& g, const Plan& plan) {
  std::ostringstream os;
  int on[kNumStreamClasses] = {};
  for (const PlanStep& st : plan.steps) ++on[static_cast<int>(st.stream)];
  os << "plan: " << plan.steps.size() << " nodes (" << on[static_cast<int>(StreamClass::comm)] << " on comm";
  if (on[static_cast<int>(StreamClass::side)] > 0) os << ", " << on[static_cast<int>(StreamClass::side)] << " on side";
  os << "), " << plan.events.size() << " cross-stream events, " << plan.gathers.size() << " gathers\n";
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    const PlanStep& st = plan.steps[s];
    const Node& node = g.node(st.node);
    os << std::setw(4) << s << "  " << std::left << std::setw(8) << stream_class_name(st.stream) << std::right
       << g.node_label(node.id) << (node.is_backward ? " [backward]" : "");
    if (!node.attrs.items().empty()) os << " {" << node.attrs.str() << "}";
    os << "\n";
    for (size_t e = 0; e < plan.events.size(); ++e)
      if (plan.events[e].consumer == node.id)
        os << "        wait  event " << e << " (" << stream_class_name(plan.events[e].record_on) << " node "
           << plan.events[e].producer << ")\n";
    for (int a : node.after) os << "        after " << g.node_label(a) << "\n";
    for (int v : node.inputs) os << "        in    " << g.value_label(v) << "\n";
    for (int v : node.outputs) {
      const PlannedBuffer& b = plan.buffers[static_cast<size_t>(v)];
      os << "        out   " << g.value_label(v);
      if (b.held_by_binding) os << "  held by the op binding";
      else os << "  arena @" << b.offset << " +" << b.bytes;
      if (g.value(v).saved_for_backward) os << "  saved for backward";
      if (g.value(v).is_output) os << "  output";
      os << "\n";
    }
    if (const GatherPlan* d = plan.gather_plan(node.id)) {
      if (d->tensor.path != GatherRoute::none)
        os << "        gather: " << gather_route_name(d->tensor.path) << " — " << d->tensor.reason << "\n";
      for (Usage u : {Usage::rowwise, Usage::columnwise})
        if (d->of(u).path != GatherRoute::none)
          os << "        gather " << usage_name(u) << ": " << gather_route_name(d->of(u).path) << " — "
             << d->of(u).reason << "\n";
      os << "        producer writes " << (d->producer_writes_quantized ? "quantized" : "high precision") << "\n";
    }
    for (size_t e = 0; e < plan.events.size(); ++e)
      if (plan.events[e].producer == node.id)
        os << "        record event " << e << " for " << stream_class_name(plan.events[e].wait_on) << " node "
           << plan.events[e].consumer << "\n";
  }
  int64_t external = 0;
  for (const Value& v : g.values())
    if (v.role != ValueRole::intermediate)
      external += dtype_storage_bytes(v.type.dtype, shape_numel(v.type.shape));
  os << "memory: arena " << bytes_str(plan.arena_bytes) << " (planned peak) vs " << bytes_str(plan.naive_bytes)
     << " naive sum";
  if (plan.naive_bytes > 0)
    os << ", " << std::fixed << std::setprecision(1)
       << 100.0 * static_cast<double>(plan.naive_bytes - plan.arena_bytes) / static_cast<double>(plan.naive_bytes)
       << "% saved";
  os << "; caller-bound inputs and params " << bytes_str(external) << "\n";
  return os.str();
}

}  // namespace te
