#include "graph/graph.h"

#include <sstream>

#include "engine/error.h"
#include "graph/op_table.h"

namespace te {

std::string Sharding::str() const {
  if (kind == Kind::replicated) return "replicated";
  if (kind == Kind::partial) return "partial";
  std::ostringstream os;  // (ostringstream, not "literal" + string: GCC 12 -Wrestrict false positive)
  os << "split(" << dim << ")";
  return os.str();
}

std::string ValueType::str() const {
  std::ostringstream os;
  os << shape_str(shape) << ' ';
  if (quant) os << quant_format_name(*quant) << '(' << usage_name(usages) << ") of ";
  os << dtype_name(dtype) << ' ' << device.str() << ' ' << sharding.str();
  return os.str();
}

Attrs::Attrs(std::initializer_list<std::pair<std::string, Attr>> items) {
  for (const auto& [k, v] : items) set(k, v);
}

Attrs& Attrs::set(std::string name, Attr value) {
  for (auto& [k, v] : items_)
    if (k == name) {
      v = std::move(value);
      return *this;
    }
  items_.emplace_back(std::move(name), std::move(value));
  return *this;
}

const Attr* Attrs::find(std::string_view name) const {
  for (const auto& [k, v] : items_)
    if (k == name) return &v;
  return nullptr;
}

namespace {
struct AttrPrinter {
  std::ostream& os;
  void operator()(int64_t v) const { os << v; }
  void operator()(double v) const { os << v; }
  void operator()(bool v) const { os << (v ? "true" : "false"); }
  void operator()(const std::string& v) const { os << '"' << v << '"'; }
  void operator()(const std::vector<int64_t>& v) const { os << shape_str(v); }
};
}  // namespace

std::string Attrs::str() const {
  std::ostringstream os;
  for (size_t i = 0; i < items_.size(); ++i) {
    if (i) os << ", ";
    os << items_[i].first << '=';
    std::visit(AttrPrinter{os}, items_[i].second);
  }
  return os.str();
}

const Value& Graph::value(int id) const {
  TE_CHECK(id >= 0 && id < num_values(), "value id " << id << " is not in this graph (" << num_values() << " values)");
  return values_[static_cast<size_t>(id)];
}

const Node& Graph::node(int id) const {
  TE_CHECK(id >= 0 && id < num_nodes(), "node id " << id << " is not in this graph (" << num_nodes() << " nodes)");
  return nodes_[static_cast<size_t>(id)];
}

std::vector<int> Graph::outputs() const {
  std::vector<int> out;
  for (const Value& v : values_)
    if (v.is_output) out.push_back(v.id);
  return out;
}

std::string Graph::value_label(int id) const {
  const Value& v = value(id);
  std::ostringstream os;
  os << '%' << id;
  if (!v.name.empty()) os << " '" << v.name << "'";
  os << ' ' << v.type.str();
  return os.str();
}

std::string Graph::node_label(int id) const {
  const Node& n = node(id);
  std::ostringstream os;
  os << "node " << id;
  if (!n.name.empty()) os << " '" << n.name << "'";
  os << " (" << (n.op ? n.op->name : std::string_view("?")) << ")";
  return os.str();
}

namespace detail {
namespace {
std::string node_label(const Node& node) {
  std::ostringstream os;
  os << "node " << node.id;
  if (!node.name.empty()) os << " '" << node.name << "'";
  os << " (" << (node.op ? node.op->name : std::string_view("?")) << ")";
  return os.str();
}
}  // namespace

void throw_attr_error(const Node& node, std::string_view attr_name, const char* expected, bool missing) {
  const std::string label = node_label(node);
  if (missing)
    TE_THROW(label << ": missing attribute '" << attr_name << "' (" << expected << ")",
             "set it in the Attrs passed to GraphBuilder::add");
  TE_THROW(label << ": attribute '" << attr_name << "' is not a " << expected << " (have " << node.attrs.str() << ")",
           "pass the attribute with the type the op expects");
}

void throw_state_error(const Node& node) {
  TE_THROW(node_label(node) << (node.state ? ": holds the state of another op kind" : ": has no state"),
           "build the node while GraphBuilder::set_node_state holds the state its kernel acts on");
}
}  // namespace detail

}  // namespace te
