// Batch operations. Tensor rows move with index_select / cat / repeat_interleave (one op per
// tensor, never a per-row loop on tensors); columns move as plain vectors in the same order.
#include <verlpp/data/batch.hpp>
#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/tensor.h>

namespace verlpp::data {
namespace {

template <class Map>
std::vector<std::string> keys_of(const Map& m) {
  std::vector<std::string> k;
  for (const auto& [name, value] : m) k.push_back(name);
  return k;
}

}  // namespace

void Batch::check_rows(int64_t rows, const std::string& what) const {
  if (!empty() && rows != size_)
    throw Error("Batch", fmt::format("{} has {} rows, the batch has {}", what, rows, size_));
}

void Batch::set(const std::string& name, at::Tensor tensor) {
  if (!tensor.defined() || tensor.dim() == 0)
    throw Error("Batch", fmt::format("tensor '{}' must have a row dimension", name));
  bool replacing_only = tensors_.size() == 1 && tensors_.count(name) && columns_.empty();
  if (!replacing_only) check_rows(tensor.size(0), "tensor '" + name + "'");
  size_ = tensor.size(0);
  tensors_[name] = std::move(tensor);
}

const at::Tensor& Batch::tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end())
    throw Error("Batch", fmt::format("no tensor '{}' (tensors: {})", name, join(tensor_names(), ", ")));
  return it->second;
}

std::vector<std::string> Batch::tensor_names() const { return keys_of(tensors_); }

void Batch::set_column(const std::string& name, std::vector<nlohmann::json> values) {
  bool replacing_only = columns_.size() == 1 && columns_.count(name) && tensors_.empty();
  if (!replacing_only) check_rows(int64_t(values.size()), "column '" + name + "'");
  size_ = int64_t(values.size());
  columns_[name] = std::move(values);
}

const std::vector<nlohmann::json>& Batch::column(const std::string& name) const {
  auto it = columns_.find(name);
  if (it == columns_.end())
    throw Error("Batch", fmt::format("no column '{}' (columns: {})", name, join(column_names(), ", ")));
  return it->second;
}

std::vector<std::string> Batch::column_names() const { return keys_of(columns_); }

Batch Batch::select(const std::vector<std::string>& tensors, const std::vector<std::string>& columns) const {
  Batch out;
  for (const auto& t : tensors) out.set(t, tensor(t));
  for (const auto& c : columns) out.set_column(c, column(c));
  out.size_ = size_;
  out.meta_ = meta_;
  return out;
}

Batch Batch::rows(const std::vector<int64_t>& indices) const {
  for (size_t i = 0; i < indices.size(); ++i)
    if (indices[i] < 0 || indices[i] >= size_)
      throw Error("Batch::rows", fmt::format("index {} at position {} is outside [0, {})", indices[i], i, size_));
  Batch out;
  out.meta_ = meta_;
  out.size_ = int64_t(indices.size());
  if (!tensors_.empty()) {
    at::Tensor index = at::tensor(indices, at::TensorOptions().dtype(at::kLong));
    for (const auto& [name, t] : tensors_) out.tensors_[name] = at::index_select(t, 0, index.to(t.device()));
  }
  for (const auto& [name, values] : columns_) {
    std::vector<nlohmann::json> picked;
    picked.reserve(indices.size());
    for (int64_t i : indices) picked.push_back(values[size_t(i)]);
    out.columns_[name] = std::move(picked);
  }
  return out;
}

Batch Batch::slice(int64_t begin, int64_t end) const {
  if (begin < 0 || end < begin || end > size_)
    throw Error("Batch::slice", fmt::format("[{}, {}) is not inside [0, {}]", begin, end, size_));
  Batch out;
  out.meta_ = meta_;
  out.size_ = end - begin;
  for (const auto& [name, t] : tensors_) out.tensors_[name] = t.slice(0, begin, end);
  for (const auto& [name, values] : columns_)
    out.columns_[name] = std::vector<nlohmann::json>(values.begin() + begin, values.begin() + end);
  return out;
}

Batch Batch::repeat(int64_t times, bool interleave) const {
  if (times < 1) throw Error("Batch::repeat", fmt::format("times = {} must be >= 1", times));
  std::vector<int64_t> order;
  order.reserve(size_t(size_ * times));
  if (interleave) {
    for (int64_t r = 0; r < size_; ++r)
      for (int64_t k = 0; k < times; ++k) order.push_back(r);
  } else {
    for (int64_t k = 0; k < times; ++k)
      for (int64_t r = 0; r < size_; ++r) order.push_back(r);
  }
  return rows(order);
}

std::vector<Batch> Batch::chunk(int64_t chunks) const {
  if (chunks < 1 || size_ % chunks != 0)
    throw Error("Batch::chunk", fmt::format("{} rows cannot be split into {} equal chunks", size_, chunks));
  std::vector<Batch> parts;
  const int64_t per = size_ / chunks;
  for (int64_t i = 0; i < chunks; ++i) parts.push_back(slice(i * per, (i + 1) * per));
  return parts;
}

std::vector<Batch> Batch::split(int64_t rows_per_part) const {
  if (rows_per_part < 1) throw Error("Batch::split", fmt::format("rows_per_part = {} must be >= 1", rows_per_part));
  std::vector<Batch> parts;
  for (int64_t begin = 0; begin < size_; begin += rows_per_part)
    parts.push_back(slice(begin, std::min(size_, begin + rows_per_part)));
  return parts;
}

Batch Batch::concat(const std::vector<Batch>& parts) {
  if (parts.empty()) return Batch();
  const Batch& first = parts.front();
  Batch out;
  out.meta_ = first.meta_;
  for (size_t i = 1; i < parts.size(); ++i)
    if (parts[i].tensor_names() != first.tensor_names() || parts[i].column_names() != first.column_names())
      throw Error("Batch::concat", fmt::format("part {} holds tensors [{}] and columns [{}], part 0 [{}] and [{}]", i,
                                               join(parts[i].tensor_names(), ", "), join(parts[i].column_names(), ", "),
                                               join(first.tensor_names(), ", "), join(first.column_names(), ", ")));
  for (const auto& [name, t] : first.tensors_) {
    std::vector<at::Tensor> pieces;
    for (const auto& p : parts) pieces.push_back(p.tensors_.at(name));
    out.tensors_[name] = at::cat(pieces, 0);
  }
  for (const auto& [name, values] : first.columns_) {
    std::vector<nlohmann::json> all;
    for (const auto& p : parts) all.insert(all.end(), p.columns_.at(name).begin(), p.columns_.at(name).end());
    out.columns_[name] = std::move(all);
  }
  for (const auto& p : parts) out.size_ += p.size_;
  return out;
}

std::pair<Batch, int64_t> Batch::pad_to_multiple(int64_t divisor) const {
  if (divisor < 1) throw Error("Batch::pad_to_multiple", fmt::format("divisor = {} must be >= 1", divisor));
  int64_t pad = (divisor - size_ % divisor) % divisor;
  if (pad == 0) return {*this, 0};
  if (size_ == 0) throw Error("Batch::pad_to_multiple", "cannot pad an empty batch");
  std::vector<int64_t> order;
  for (int64_t r = 0; r < size_; ++r) order.push_back(r);
  for (int64_t k = 0; k < pad; ++k) order.push_back(k % size_);
  return {rows(order), pad};
}

void Batch::merge(const Batch& other) {
  const bool was_empty = empty();
  if (!empty() && !other.empty() && other.size_ != size_)
    throw Error("Batch::merge", fmt::format("sizes differ: {} and {}", size_, other.size_));
  for (const auto& [name, t] : other.tensors_) {
    auto it = tensors_.find(name);
    if (it != tensors_.end() && !(it->second.sizes() == t.sizes() && at::equal(it->second, t)))
      throw Error("Batch::merge", fmt::format("both batches hold tensor '{}' with different data", name));
    tensors_[name] = t;
  }
  for (const auto& [name, values] : other.columns_) {
    auto it = columns_.find(name);
    if (it != columns_.end() && it->second != values)
      throw Error("Batch::merge", fmt::format("both batches hold column '{}' with different values", name));
    columns_[name] = values;
  }
  if (was_empty) size_ = other.size_;
  for (auto it = other.meta_.begin(); it != other.meta_.end(); ++it) meta_[it.key()] = it.value();
}

}  // namespace verlpp::data
