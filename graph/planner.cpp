#include "graph/planner.h"

#include <algorithm>
#include <map>
#include <set>

#include "engine/error.h"
#include "engine/int_math.h"

namespace te {

const GatherPlan* Plan::gather_plan(int node) const {
  for (const auto& [n, d] : gathers)
    if (n == node) return &d;
  return nullptr;
}

namespace {

// The nodes that must run after each node: its outputs' consumers and the nodes ordered after it (Node::after).
std::vector<std::vector<int>> successors(const Graph& g) {
  std::vector<std::vector<int>> succ(static_cast<size_t>(g.num_nodes()));
  for (const Node& node : g.nodes()) {
    for (int out : node.outputs)
      for (int c : g.value(out).consumers) succ[static_cast<size_t>(node.id)].push_back(c);
    for (int a : node.after) succ[static_cast<size_t>(a)].push_back(node.id);
  }
  return succ;
}

// Topological order (Kahn). Among ready nodes, comm nodes go first so collectives are enqueued as early as their
// inputs allow and overlap the compute that follows; otherwise build order.
std::vector<int> topo_order(const Graph& g, const std::vector<std::vector<int>>& succ) {
  const int n = g.num_nodes();
  std::vector<int> indeg(static_cast<size_t>(n), 0);
  for (const auto& next : succ)
    for (int c : next) ++indeg[static_cast<size_t>(c)];
  std::set<std::pair<int, int>> ready;  // (0 comm / 1 other, node id)
  auto prio = [&](int id) { return g.node(id).op->stream == StreamClass::comm ? 0 : 1; };
  for (int i = 0; i < n; ++i)
    if (indeg[static_cast<size_t>(i)] == 0) ready.insert({prio(i), i});
  std::vector<int> order;
  while (!ready.empty()) {
    int id = ready.begin()->second;
    ready.erase(ready.begin());
    order.push_back(id);
    for (int c : succ[static_cast<size_t>(id)])
      if (--indeg[static_cast<size_t>(c)] == 0) ready.insert({prio(c), c});
  }
  TE_CHECK(static_cast<int>(order.size()) == n, "the graph has a cycle: only " << order.size() << " of " << n
                                                    << " nodes could be ordered");
  return order;
}

void check_types(const Graph& g) {
  for (const Node& node : g.nodes()) {
    std::vector<ValueType> in;
    for (int v : node.inputs) in.push_back(g.value(v).type);
    std::vector<ValueType> out = node.op->infer(node, in);
    TE_CHECK(out.size() == node.outputs.size(), g.node_label(node.id) << ": inference now gives " << out.size()
                                                                      << " outputs, the graph has " << node.outputs.size());
    for (size_t i = 0; i < out.size(); ++i)
      TE_CHECK_HINT(out[i] == g.value(node.outputs[i]).type,
                    g.node_label(node.id) << ": output " << i << " " << g.value_label(node.outputs[i])
                                          << " disagrees with inference (" << out[i].str() << ")",
                    "values must only be created through GraphBuilder");
  }
}

GatherPlan default_gather_plan(const Graph& g, const Node& node) {
  GatherPlan d;
  const ValueType& out = g.value(node.outputs.at(0)).type;
  if (!out.is_quantized()) {
    d.tensor = {GatherRoute::high_precision, "the gathered value is not quantized"};
    return d;
  }
  for (Usage u : {Usage::rowwise, Usage::columnwise})
    if (has_usage(out.usages, u))
      (u == Usage::rowwise ? d.rowwise : d.columnwise) = {GatherRoute::fallback,
                                                          "no gather hook set: planned the fallback (always valid)"};
  return d;
}

// Bitset of "a happens-before b" over step positions.
struct HappensBefore {
  int n = 0, words = 0;
  std::vector<uint64_t> bits;  // row a: the steps that a happens-before
  bool operator()(int a, int b) const {
    return (bits[static_cast<size_t>(a * words + b / 64)] >> (b % 64)) & 1u;
  }
};

HappensBefore happens_before(const std::vector<std::vector<int>>& node_succ, const std::vector<PlanStep>& steps,
                             const std::vector<int>& pos) {
  HappensBefore hb;
  hb.n = static_cast<int>(steps.size());
  hb.words = (hb.n + 63) / 64;
  hb.bits.assign(static_cast<size_t>(hb.n) * static_cast<size_t>(hb.words), 0);
  // Successors: data consumers and control edges, and the next step on the same stream (program order).
  std::vector<std::vector<int>> succ(static_cast<size_t>(hb.n));
  int last_on[kNumStreamClasses];
  std::fill(std::begin(last_on), std::end(last_on), -1);
  for (int s = 0; s < hb.n; ++s) {
    int& prev = last_on[static_cast<int>(steps[static_cast<size_t>(s)].stream)];
    if (prev >= 0) succ[static_cast<size_t>(prev)].push_back(s);
    prev = s;
    for (int c : node_succ[static_cast<size_t>(steps[static_cast<size_t>(s)].node)])
      succ[static_cast<size_t>(s)].push_back(pos[static_cast<size_t>(c)]);
  }
  // Every successor sits later in the order, so one reverse sweep closes the relation.
  for (int s = hb.n - 1; s >= 0; --s) {
    uint64_t* row = &hb.bits[static_cast<size_t>(s * hb.words)];
    for (int t : succ[static_cast<size_t>(s)]) {
      row[t / 64] |= uint64_t{1} << (t % 64);
      const uint64_t* trow = &hb.bits[static_cast<size_t>(t * hb.words)];
      for (int w = 0; w < hb.words; ++w) row[w] |= trow[w];
    }
  }
  return hb;
}

}  // namespace

int64_t quantized_value_bytes(const ValueType& type) {
  TE_CHECK(type.quant.has_value(), "quantized_value_bytes: " << type.str() << " is not quantized");
  const QuantFormatInfo& f = quant_format_info(*type.quant);
  const bool fp4 = nvfp4_format(*type.quant);
  const int64_t numel = shape_numel(type.shape);
  const int64_t k = type.shape.empty() ? 1 : type.shape.back();
  const int64_t m = k == 0 ? 0 : numel / k;
  const int64_t scale_bits = dtype_bits(f.scale_dtype);
  int64_t total = 16;  // amax / global scale
  for (Usage u : {Usage::rowwise, Usage::columnwise}) {
    if (!has_usage(type.usages, u)) continue;
    total += round_up(dtype_storage_bytes(fp4 ? DType::fp4_e2m1 : DType::fp8_e4m3, numel), 16);
    int64_t rows = 1, cols = 1;
    if (f.block == 0) {
      rows = cols = 1;
    } else if (f.two_d) {
      rows = ceil_div(m, f.block), cols = ceil_div(k, f.block);
    } else if (u == Usage::rowwise) {
      rows = m, cols = ceil_div(k, f.block);
    } else {
      rows = k, cols = ceil_div(m, f.block);
    }
    // Scale layouts for the GEMM pad to 128 x 4 tiles; padding every format that way keeps the estimate an upper bound.
    total += round_up(round_up(rows, 128) * round_up(cols, 4) * scale_bits / 8, 16);
  }
  return total;
}

Plan plan_graph(const Graph& g, const PlanOptions& options) {
  TE_CHECK(options.alignment > 0 && (options.alignment & (options.alignment - 1)) == 0,
           "PlanOptions::alignment must be a power of two, got " << options.alignment);
  Plan plan;
  plan.alignment = options.alignment;
  for (const Node& node : g.nodes())
    TE_CHECK(node.op != nullptr, g.node_label(node.id) << " has no op");
  check_types(g);

  // Order and streams.
  const std::vector<std::vector<int>> succ = successors(g);
  const std::vector<int> order = topo_order(g, succ);
  std::vector<int> pos(static_cast<size_t>(g.num_nodes()), -1);
  for (size_t s = 0; s < order.size(); ++s) {
    const Node& node = g.node(order[s]);
    pos[static_cast<size_t>(node.id)] = static_cast<int>(s);
    plan.steps.push_back({node.id, options.single_stream ? StreamClass::compute : node.op->stream});
  }
  auto stream_of = [&](int node) { return plan.steps[static_cast<size_t>(pos[static_cast<size_t>(node)])].stream; };

  // Gathers.
  for (const PlanStep& st : plan.steps) {
    const Node& node = g.node(st.node);
    if (!node.op->is_gather) continue;
    GatherPlan d = options.gather_hook ? options.gather_hook(g, node) : default_gather_plan(g, node);
    for (const UsagePath* u : {&d.rowwise, &d.columnwise, &d.tensor})
      TE_CHECK_HINT(u->path == GatherRoute::none || !u->reason.empty(),
                    g.node_label(node.id) << ": the gather plan's " << gather_route_name(u->path) << " path has no reason",
                    "the gather hook must say why it chose a path (printed by --explain)");
    plan.gathers.emplace_back(node.id, std::move(d));
  }

  const HappensBefore hb = happens_before(succ, plan.steps, pos);

  // Cross-stream events: one per (producer node, waiting stream), waited before the first consumer on that stream.
  std::set<std::pair<int, int>> have;
  for (const PlanStep& st : plan.steps) {
    for (int v : g.node(st.node).inputs) {
      const int p = g.value(v).producer;
      if (p < 0 || stream_of(p) == st.stream) continue;
      if (!have.insert({p, static_cast<int>(st.stream)}).second) continue;
      plan.events.push_back({v, p, st.node, stream_of(p), st.stream});
    }
    // A control edge needs no event of its own when `p` happens-before another of the node's predecessors, which
    // the node waits for anyway (the forward GEMM before its own dgrad, say).
    const Node& node = g.node(st.node);
    auto implied = [&](int p) {
      auto before = [&](int q) {
        return q >= 0 && q != p && hb(pos[static_cast<size_t>(p)], pos[static_cast<size_t>(q)]);
      };
      for (int v : node.inputs)
        if (before(g.value(v).producer)) return true;
      return std::any_of(node.after.begin(), node.after.end(), before);
    };
    for (int p : node.after) {
      if (stream_of(p) == st.stream || implied(p) || !have.insert({p, static_cast<int>(st.stream)}).second) continue;
      plan.events.push_back({-1, p, st.node, stream_of(p), st.stream});
    }
  }

  // Buffers.
  const int num_steps = static_cast<int>(plan.steps.size());
  plan.buffers.resize(static_cast<size_t>(g.num_values()));
  std::vector<int> arena_values;
  for (const Value& v : g.values()) {
    PlannedBuffer& b = plan.buffers[static_cast<size_t>(v.id)];
    b.value = v.id;
    if (options.held_by_binding && options.held_by_binding(g, v)) {  // a quantized param, an operand in flight
      b.held_by_binding = true;
      continue;
    }
    if (v.role != ValueRole::intermediate) continue;
    const int64_t raw = v.type.is_quantized()
                            ? (options.quantized_bytes ? options.quantized_bytes(v.type) : quantized_value_bytes(v.type))
                            : dtype_storage_bytes(v.type.dtype, shape_numel(v.type.shape));
    b.bytes = round_up(std::max<int64_t>(raw, 1), options.alignment);
    b.first_step = pos[static_cast<size_t>(v.producer)];
    b.last_step = b.first_step;
    for (int c : v.consumers) b.last_step = std::max(b.last_step, pos[static_cast<size_t>(c)]);
    if (v.is_output) b.last_step = num_steps;
    plan.naive_bytes += b.bytes;
    arena_values.push_back(v.id);
  }

  // a's every use happens-before b's producer (so b may overwrite a's bytes).
  auto ends_before = [&](int a, int b) {
    const Value& va = g.value(a);
    if (va.is_output) return false;
    const int pb = pos[static_cast<size_t>(g.value(b).producer)];
    if (!hb(pos[static_cast<size_t>(va.producer)], pb)) return false;
    for (int c : va.consumers)
      if (!hb(pos[static_cast<size_t>(c)], pb)) return false;
    return true;
  };
  auto can_share = [&](int a, int b) { return options.reuse_buffers && (ends_before(a, b) || ends_before(b, a)); };
  // b written in place over a (see planner.h): a's only use after b's producer is that producer itself.
  auto in_place_over = [&](int b, int a) {
    const Value& vb = g.value(b);
    const Value& va = g.value(a);
    if (!options.reuse_buffers || vb.producer < 0 || va.is_output || va.role != ValueRole::intermediate) return false;
    const Node& n = g.node(vb.producer);
    if (n.outputs.empty() || n.outputs[0] != b || !n.attrs.has("in_place")) return false;
    const int64_t i = n.attr<int64_t>("in_place");
    if (i < 0 || i >= static_cast<int64_t>(n.inputs.size()) || n.inputs[static_cast<size_t>(i)] != a) return false;
    const PlannedBuffer& ba = plan.buffers[static_cast<size_t>(a)];
    if (ba.bytes != plan.buffers[static_cast<size_t>(b)].bytes || ba.held_by_binding) return false;
    const int pb = pos[static_cast<size_t>(vb.producer)];
    if (!hb(pos[static_cast<size_t>(va.producer)], pb)) return false;
    for (int c : va.consumers)
      if (c != vb.producer && !hb(pos[static_cast<size_t>(c)], pb)) return false;
    return true;
  };
  std::vector<int> in_place_of(static_cast<size_t>(g.num_values()), -1);  // b → a
  for (int v : arena_values) {
    const Value& vb = g.value(v);
    if (vb.producer < 0) continue;
    for (int a : g.node(vb.producer).inputs)
      if (in_place_over(v, a)) in_place_of[static_cast<size_t>(v)] = a;
  }

  // Greedy by size: the largest buffers are placed first, each at the lowest offset that does not overlap a placed
  // buffer it cannot share with.
  std::vector<int> by_size = arena_values;
  std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) {
    const auto& ba = plan.buffers[static_cast<size_t>(a)];
    const auto& bb = plan.buffers[static_cast<size_t>(b)];
    return ba.bytes != bb.bytes ? ba.bytes > bb.bytes : ba.first_step < bb.first_step;
  });
  std::vector<int> placed;
  for (int v : by_size) {
    PlannedBuffer& b = plan.buffers[static_cast<size_t>(v)];
    // An in-place pair (v over a, or a value over v): its partner is either exactly shared or kept apart.
    auto partner = [&](int p) {
      return in_place_of[static_cast<size_t>(v)] == p || in_place_of[static_cast<size_t>(p)] == v;
    };
    auto conflicts = [&](int p) { return partner(p) ? true : !can_share(v, p); };
    std::vector<std::pair<int64_t, int64_t>> busy;  // [offset, end) of conflicting placed buffers
    for (int p : placed)
      if (conflicts(p)) {
        const PlannedBuffer& pb = plan.buffers[static_cast<size_t>(p)];
        busy.emplace_back(pb.offset, pb.offset + pb.bytes);
      }
    // First choice: the placed in-place partner's own offset, when nothing else there conflicts.
    int64_t offset = -1;
    for (int p : placed) {
      if (!partner(p)) continue;
      const PlannedBuffer& pb = plan.buffers[static_cast<size_t>(p)];
      bool free = true;
      for (int q : placed) {
        if (q == p || !conflicts(q)) continue;
        const PlannedBuffer& qb = plan.buffers[static_cast<size_t>(q)];
        free = free && (pb.offset + b.bytes <= qb.offset || qb.offset + qb.bytes <= pb.offset);
      }
      if (free) offset = pb.offset;
    }
    if (offset < 0) {
      std::sort(busy.begin(), busy.end());
      offset = 0;
      for (const auto& [lo, hi] : busy) {
        if (offset + b.bytes <= lo) break;
        offset = std::max(offset, hi);
      }
    }
    b.offset = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + b.bytes);
    placed.push_back(v);
  }
  return plan;
}

}  // namespace te
