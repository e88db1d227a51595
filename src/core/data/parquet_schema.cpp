// Schema tree building (see parquet_schema.hpp).
#include "parquet_schema.hpp"

#include "parquet_error.hpp"

#include <fmt/format.h>

namespace verlpp::data::parquet {
namespace {

constexpr int kMaxDepth = 64;

class Builder {
 public:
  explicit Builder(const std::vector<SchemaElement>& elements) : elements_(elements) {}

  Schema build() {
    const SchemaElement& root = elements_.at(0);
    if (root.type) format_error("the schema's root is a primitive, not a group");
    schema_.nodes.push_back(SchemaNode{});
    schema_.nodes[0].name = root.name;
    schema_.nodes[0].role = NodeRole::root;
    next_ = 1;
    add_children(0, root.num_children, 1);
    if (next_ != elements_.size())
      format_error(fmt::format("the schema lists {} elements but its tree holds {}", elements_.size(), next_));
    if (schema_.leaves.empty()) format_error("the schema has no columns");
    return std::move(schema_);
  }

 private:
  void add_children(size_t parent, int32_t count, int depth) {
    if (count < 0 || size_t(count) > elements_.size() - next_)
      format_error(fmt::format("schema element '{}' claims {} children, {} elements are left",
                               schema_.nodes[parent].name, count, elements_.size() - next_));
    if (depth > kMaxDepth) format_error(fmt::format("the schema nests deeper than {}", kMaxDepth));
    for (int32_t i = 0; i < count; ++i) add_node(parent, depth);
  }

  void add_node(size_t parent, int depth) {
    // The children counts above this node were checked one level at a time; together they may
    // still claim more elements than the list has.
    if (next_ >= elements_.size())
      format_error(fmt::format("schema element '{}' claims more children than the schema lists ({} elements)",
                               schema_.nodes[parent].name, elements_.size()));
    const SchemaElement& e = elements_[next_++];
    const size_t index = schema_.nodes.size();
    schema_.nodes.push_back(SchemaNode{});
    {
      SchemaNode& n = schema_.nodes[index];
      const SchemaNode& p = schema_.nodes[parent];
      n.name = e.name;
      n.repetition = e.repetition;
      n.parent = parent;
      n.kind = e.kind;
      n.def_level = p.def_level + (e.repetition != Repetition::required ? 1 : 0);
      n.rep_level = p.rep_level + (e.repetition == Repetition::repeated ? 1 : 0);
      n.role = e.repetition == Repetition::repeated ? NodeRole::repeated_field : NodeRole::field;
      if (e.kind == ValueKind::list) n.role = NodeRole::list;
      if (e.kind == ValueKind::map) n.role = NodeRole::map;
    }
    schema_.nodes[parent].children.push_back(index);
    if (e.type) {
      if (e.num_children > 0)
        format_error(fmt::format("column '{}' has a type and {} children", e.name, e.num_children));
      SchemaNode& n = schema_.nodes[index];
      n.leaf = int(schema_.leaves.size());
      n.type = LeafType{*e.type, e.type_length, e.kind, e.scale, e.logical_name};
      schema_.leaves.push_back(index);
      if (n.role == NodeRole::list || n.role == NodeRole::map)
        format_error(fmt::format("column '{}' is annotated {} but is not a group", e.name, e.logical_name));
      return;
    }
    if (e.num_children <= 0) format_error(fmt::format("group '{}' has no fields", e.name));
    add_children(index, e.num_children, depth + 1);
    const NodeRole role = schema_.nodes[index].role;
    if (role == NodeRole::list) mark_list(index);
    if (role == NodeRole::map) mark_map(index);
  }

  // LogicalTypes.md: a LIST group has one repeated child; that child is the element itself when
  // it is a primitive, a group of several fields, or a one-field group named "array" or
  // "<list>_tuple" (two-level lists of older writers); otherwise its one child is the element.
  void mark_list(size_t index) {
    SchemaNode& list = schema_.nodes[index];
    if (list.repetition == Repetition::repeated || list.children.size() != 1 ||
        schema_.nodes[list.children[0]].repetition != Repetition::repeated)
      format_error(
          fmt::format("LIST group '{}' must be optional or required with exactly one repeated child", list.name));
    SchemaNode& repeated = schema_.nodes[list.children[0]];
    const bool self = !repeated.is_group() || repeated.children.size() > 1 || repeated.name == "array" ||
                      repeated.name == list.name + "_tuple";
    repeated.role = self ? NodeRole::list_element_self : NodeRole::list_repeated;
    if (!self) {
      SchemaNode& element = schema_.nodes[repeated.children[0]];
      if (element.role == NodeRole::repeated_field)
        format_error(fmt::format("the element '{}' of LIST '{}' is itself repeated", element.name, list.name));
      element.in_slot = true;  // a struct, a primitive, or a LIST or MAP of its own
    }
  }

  void mark_map(size_t index) {
    SchemaNode& map = schema_.nodes[index];
    if (map.repetition == Repetition::repeated || map.children.size() != 1) {
      format_error(fmt::format("MAP group '{}' must have exactly one repeated key_value child", map.name));
    }
    SchemaNode& entry = schema_.nodes[map.children[0]];
    if (entry.repetition != Repetition::repeated || !entry.is_group() || entry.children.empty() ||
        entry.children.size() > 2)
      format_error(fmt::format("MAP group '{}' must hold a repeated group of key and value", map.name));
    entry.role = NodeRole::map_entry;
    schema_.has_map = true;
  }

  const std::vector<SchemaElement>& elements_;
  Schema schema_;
  size_t next_ = 0;
};

}  // namespace

std::vector<size_t> Schema::path(size_t leaf) const {
  std::vector<size_t> out;
  for (size_t n = leaves.at(leaf); n != 0; n = nodes[n].parent) out.insert(out.begin(), n);
  return out;
}

std::vector<std::string> Schema::leaf_path(size_t leaf) const {
  std::vector<std::string> out;
  for (size_t n : path(leaf)) out.push_back(nodes[n].name);
  return out;
}

std::string Schema::leaf_name(size_t leaf) const {
  std::string out;
  for (const std::string& part : leaf_path(leaf)) out += (out.empty() ? "" : ".") + part;
  return out;
}

Schema build_schema(const std::vector<SchemaElement>& elements) {
  if (elements.empty()) format_error("the schema is empty");
  return Builder(elements).build();
}

}  // namespace verlpp::data::parquet
