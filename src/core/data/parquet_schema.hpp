// A parquet schema as a tree: the footer's flattened, depth-first SchemaElement list rebuilt into
// nodes with their definition and repetition levels, and each node's place in the JSON record
// (a struct field, a LIST or MAP wrapper and its repeated level, a bare repeated field). The
// rules for LIST follow the format's LogicalTypes.md, including its backward-compatibility rules
// for two-level lists. Internal to the data layer.
#pragma once

#include "parquet_metadata.hpp"
#include "parquet_values.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace verlpp::data::parquet {

// What a node is in the JSON record.
enum class NodeRole {
  root,
  field,              // a key of the enclosing object (a struct field or a top-level column)
  list,               // a LIST group: a key whose value is an array
  list_repeated,      // the repeated level of a LIST whose single child is the element (3-level)
  list_element_self,  // the repeated level of a LIST that is itself the element (2-level)
  map,                // a MAP group: a key whose value is an object (or [{key, value}] for non-text keys)
  map_entry,          // the repeated key_value group of a MAP
  repeated_field,     // a repeated field outside LIST/MAP: a key whose value is an array of it
};

struct SchemaNode {
  std::string name;
  Repetition repetition = Repetition::required;
  NodeRole role = NodeRole::field;
  int def_level = 0;  // definition level when this node is present
  int rep_level = 0;  // repetition level of the innermost repeated node at or above this one
  size_t parent = 0;
  std::vector<size_t> children;
  bool in_slot = false;  // a 3-level LIST's element: it fills the array slot, it is no key of an object
  int leaf = -1;         // leaf column index, for primitives
  LeafType type;         // for leaves
  ValueKind kind = ValueKind::plain;
  bool is_group() const { return leaf < 0; }
};

struct Schema {
  std::vector<SchemaNode> nodes;  // nodes[0] is the root
  std::vector<size_t> leaves;     // leaf column index -> node
  bool has_map = false;

  // The nodes from the root's child down to the leaf, in order.
  std::vector<size_t> path(size_t leaf) const;
  // "prompt.list.element.role": the leaf's path_in_schema joined with dots.
  std::string leaf_name(size_t leaf) const;
  // The leaf's path_in_schema.
  std::vector<std::string> leaf_path(size_t leaf) const;
};

// Builds the tree; ParquetFormatError when the list is not a well-formed schema (child counts
// past the list, a group without fields, a malformed LIST or MAP, nesting deeper than 64).
Schema build_schema(const std::vector<SchemaElement>& elements);

}  // namespace verlpp::data::parquet
