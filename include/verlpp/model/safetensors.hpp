// The safetensors format, read and written by verlpp itself: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the
// raw little-endian data. It is small, and no Debian package provides a C++ implementation, so
// it lives here. Reading memory-maps the file: tensors are views of the mapping (no copy) and
// keep it alive. Sharded checkpoints (`model.safetensors.index.json`) are read as one store.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace verlpp::model {

// One tensor's entry in a safetensors header.
struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype = at::kFloat;  // F32, F16, BF16, F64, I64, I32, I16, I8, U8, BOOL
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data section (after the header)
  uint64_t end = 0;
};

// One memory-mapped .safetensors file. Opening validates the whole header against the file's
// size, so a truncated file or a bad header fails here, naming the file (and the tensor).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Entries in header order (sorted by name).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  // A CPU tensor viewing the mapped bytes (copied only if they are misaligned for the dtype).
  // It keeps the mapping alive; writing to it does not change the file (private mapping).
  at::Tensor tensor(const std::string& name) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  uint64_t data_offset_ = 0;  // 8 + header length
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint: a folder with `model.safetensors.index.json` (sharded) or
// `model.safetensors`, or one .safetensors file. Names map to the shard that holds them.
class SafetensorsStore {
 public:
  explicit SafetensorsStore(const std::string& path);

  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // The tensor `name`; an error naming it and the checkpoint if it is absent.
  at::Tensor tensor(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const;
  // The file holding `name`.
  const std::string& file_of(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // name -> index into files_
};

// A tensor to write, by name.
using NamedTensor = std::pair<std::string, at::Tensor>;

// Writes one .safetensors file (tensors in the given order, header padded to 8 bytes, metadata
// {"format": "pt"} plus `metadata`). Tensors may live on any device; they are copied to CPU.
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Writes `model.safetensors` into `folder`, or, when the tensors exceed `max_shard_bytes`,
// shards `model-0000i-of-0000n.safetensors` plus `model.safetensors.index.json` (HF's names).
// Returns the files written (names relative to `folder`).
std::vector<std::string> write_safetensors_sharded(const std::string& folder, const std::vector<NamedTensor>& tensors,
                                                   uint64_t max_shard_bytes);

// The safetensors dtype string ("BF16", ...) for a ScalarType; an error for others.
const char* safetensors_dtype_name(at::ScalarType dtype);

}  // namespace verlpp::model
