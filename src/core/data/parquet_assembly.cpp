// Record assembly (see parquet_assembly.hpp). Each column is written into the rows on its own:
// it walks its leaf's path for every entry and creates what its levels say exists, so columns
// that share a struct or a list fill the same objects and array slots (a list's element index
// comes from the repetition levels, which every column under that list repeats identically).
#include "parquet_assembly.hpp"

#include "parquet_error.hpp"

#include <fmt/format.h>

#include <set>

namespace verlpp::data::parquet {
namespace {

using json = nlohmann::json;

[[noreturn]] void contradiction(const std::string& column, size_t row) {
  format_error(
      fmt::format("column {} contradicts an earlier column about row {} (one says a value is absent "
                  "where the other has it)",
                  column, row));
}

void write_column(const Schema& schema, size_t leaf, const ColumnData& column, size_t num_rows, json* rows) {
  const std::vector<size_t> path = schema.path(leaf);
  const std::string name = schema.leaf_name(leaf);
  const int max_rep = schema.nodes[path.back()].rep_level;
  std::vector<size_t> index(size_t(max_rep) + 1, 0);  // element index per repetition level
  size_t row = 0, value = 0;
  bool started = false;
  for (size_t i = 0; i < column.def.size(); ++i) {
    const int r = column.rep[i], d = column.def[i];
    if (r == 0) {
      if (started) ++row;
      started = true;
      if (row >= num_rows)
        format_error(fmt::format("column {} holds more rows than the row group's {}", name, num_rows));
      std::fill(index.begin(), index.end(), 0);
    } else {
      if (!started) format_error(fmt::format("column {} starts with repetition level {}", name, r));
      ++index[size_t(r)];
      std::fill(index.begin() + r + 1, index.end(), 0);
    }
    json* slot = &rows[row];
    for (size_t p = 0; p < path.size(); ++p) {
      const SchemaNode& node = schema.nodes[path[p]];
      const bool repeated_level = node.role == NodeRole::list_repeated || node.role == NodeRole::list_element_self ||
                                  node.role == NodeRole::map_entry;
      // The node's own key in the enclosing object.
      if (!node.in_slot && !repeated_level) {
        if (slot->is_null()) *slot = json::object();
        if (!slot->is_object()) contradiction(name, row);
        slot = &(*slot)[node.name];
      }
      if (node.repetition == Repetition::repeated) {
        if (d < node.def_level) {  // no element at this level: the array is empty
          if (slot->is_null()) *slot = json::array();
          if (!slot->is_array() || !slot->empty()) contradiction(name, row);
          break;
        }
        if (slot->is_null()) *slot = json::array();
        if (!slot->is_array()) contradiction(name, row);
        const size_t k = index[size_t(node.rep_level)];
        if (k > slot->size()) contradiction(name, row);  // an element before this one is missing
        if (k == slot->size()) slot->push_back(nullptr);
        slot = &(*slot)[k];
      } else if (node.repetition == Repetition::optional && d < node.def_level) {
        if (!slot->is_null()) contradiction(name, row);
        break;
      }
      if (!node.is_group()) {
        if (value >= column.values.size()) format_error(fmt::format("column {} has fewer values than levels", name));
        *slot = column.values[value++];
      }
    }
  }
  if (!started ? num_rows != 0 : row + 1 != num_rows)
    format_error(fmt::format("column {} holds {} rows, the row group {}", name, started ? row + 1 : 0, num_rows));
}

void convert_value(const Schema& schema, const SchemaNode& node, json& v);

// A field's value: a bare repeated field holds an array of the node's values.
void convert_field(const Schema& schema, const SchemaNode& node, json& v) {
  if (node.repetition == Repetition::repeated) {
    if (v.is_array())
      for (json& e : v) convert_value(schema, node, e);
    return;
  }
  convert_value(schema, node, v);
}

// Turns MAP values (arrays of {key, value}) into objects where every key is a distinct string,
// as a JSON row would hold the same mapping.
void convert_value(const Schema& schema, const SchemaNode& node, json& v) {
  if (v.is_null() || !node.is_group()) return;
  if (node.role == NodeRole::list) {
    const SchemaNode& repeated = schema.nodes[node.children[0]];
    const SchemaNode& element =
        repeated.role == NodeRole::list_element_self ? repeated : schema.nodes[repeated.children[0]];
    for (json& e : v) convert_value(schema, element, e);
    return;
  }
  if (node.role == NodeRole::map) {
    const SchemaNode& entry = schema.nodes[node.children[0]];
    for (json& e : v)
      for (size_t c : entry.children) convert_field(schema, schema.nodes[c], e[schema.nodes[c].name]);
    const std::string key_name = schema.nodes[entry.children[0]].name;
    const std::string value_name = entry.children.size() > 1 ? schema.nodes[entry.children[1]].name : "";
    std::set<std::string> keys;
    for (const json& e : v)
      if (!e.is_object() || !e[key_name].is_string() || !keys.insert(e[key_name].get<std::string>()).second) return;
    json object = json::object();
    for (json& e : v) object[e[key_name].get<std::string>()] = value_name.empty() ? json() : std::move(e[value_name]);
    v = std::move(object);
    return;
  }
  if (!v.is_object()) return;
  for (size_t c : node.children) convert_field(schema, schema.nodes[c], v[schema.nodes[c].name]);
}

}  // namespace

void assemble_rows(const Schema& schema, const std::vector<ColumnData>& columns, size_t num_rows,
                   std::vector<json>& rows) {
  const size_t first = rows.size();
  rows.resize(first + num_rows, json::object());
  for (size_t leaf = 0; leaf < columns.size(); ++leaf)
    write_column(schema, leaf, columns[leaf], num_rows, &rows[first]);
  if (schema.has_map)
    for (size_t r = first; r < rows.size(); ++r) convert_value(schema, schema.nodes[0], rows[r]);
}

}  // namespace verlpp::data::parquet
