// Batch: verl's DataProto in C++. Named tensors sharing one leading (row) dimension, named
// non-tensor columns holding one JSON value per row (uid, data_source, ground truth, ...), and
// free-form meta info. The unit that moves between the controller and the workers; every
// operation keeps tensors and columns row-aligned.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::data {

class Batch {
 public:
  Batch() = default;

  // Rows in the batch (0 when it holds nothing).
  int64_t size() const { return size_; }
  bool empty() const { return tensors_.empty() && columns_.empty(); }

  // Adds or replaces a tensor; its dim 0 must equal size() (or it sets size() when empty).
  void set(const std::string& name, at::Tensor tensor);
  // The tensor called `name`; Error listing the available names if absent.
  const at::Tensor& tensor(const std::string& name) const;
  bool has_tensor(const std::string& name) const { return tensors_.count(name) != 0; }
  std::vector<std::string> tensor_names() const;

  // Adds or replaces a non-tensor column of size() values.
  void set_column(const std::string& name, std::vector<nlohmann::json> values);
  const std::vector<nlohmann::json>& column(const std::string& name) const;
  bool has_column(const std::string& name) const { return columns_.count(name) != 0; }
  std::vector<std::string> column_names() const;

  nlohmann::json& meta() { return meta_; }
  const nlohmann::json& meta() const { return meta_; }

  // A batch with only the named tensors and columns (meta kept); Error for an unknown name.
  Batch select(const std::vector<std::string>& tensors, const std::vector<std::string>& columns) const;
  // Rows in the given order (a subset, a permutation, or with repeats).
  Batch rows(const std::vector<int64_t>& indices) const;
  // Rows [begin, end).
  Batch slice(int64_t begin, int64_t end) const;
  // Each row `times` times: r0 r0 r1 r1 ... when interleaved (verl's default), else r0 r1 r0 r1.
  Batch repeat(int64_t times, bool interleave = true) const;
  // `chunks` equal parts; Error unless size() is divisible by chunks.
  std::vector<Batch> chunk(int64_t chunks) const;
  // Consecutive parts of `rows_per_part` rows (the last may be smaller).
  std::vector<Batch> split(int64_t rows_per_part) const;
  // Rows of all parts in order; the parts must hold the same tensor and column names.
  static Batch concat(const std::vector<Batch>& parts);
  // Pads to a multiple of `divisor` by appending copies of the first rows (as verl's
  // pad_dataproto_to_divisor); returns the padded batch and the number of rows added.
  std::pair<Batch, int64_t> pad_to_multiple(int64_t divisor) const;
  // Drops the last `pad` rows (undoes pad_to_multiple).
  Batch unpad(int64_t pad) const { return slice(0, size_ - pad); }
  // Adds `other`'s tensors, columns and meta; same size; a name both hold must hold equal data.
  void merge(const Batch& other);

 private:
  void check_rows(int64_t rows, const std::string& what) const;
  std::map<std::string, at::Tensor> tensors_;                   // each [size_, ...]
  std::map<std::string, std::vector<nlohmann::json>> columns_;  // each size_ values
  nlohmann::json meta_ = nlohmann::json::object();
  int64_t size_ = 0;
};

}  // namespace verlpp::data
