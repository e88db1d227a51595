// Reading safetensors: one memory-mapped file (SafetensorsFile) and a checkpoint folder, plain
// or sharded (SafetensorsStore). The header is validated in full when a file is opened, against
// the file's real size, so later tensor() calls cannot read past the mapping.
#include <verlpp/core/json_limits.hpp>
#include <verlpp/model/safetensors.hpp>

#include "../util/files.hpp"
#include "shape_string.hpp"

#include <verlpp/core/error.hpp>
#include <verlpp/core/strings.hpp>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace verlpp::model {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

at::ScalarType parse_dtype(const std::string& name, bool* ok) {
  static const std::pair<const char*, at::ScalarType> kTypes[] = {
      {"F32", at::kFloat}, {"F16", at::kHalf},  {"BF16", at::kBFloat16}, {"F64", at::kDouble}, {"I64", at::kLong},
      {"I32", at::kInt},   {"I16", at::kShort}, {"I8", at::kChar},       {"U8", at::kByte},    {"BOOL", at::kBool}};
  for (const auto& [n, t] : kTypes)
    if (name == n) {
      *ok = true;
      return t;
    }
  *ok = false;
  return at::kFloat;
}

}  // namespace

struct SafetensorsFile::Mapping {
  void* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base) ::munmap(base, size);
  }
};

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path, fmt::format("cannot open the safetensors file: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(path, fmt::format("cannot stat: {}", std::strerror(err)));
  }
  uint64_t size = uint64_t(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw Error(path, fmt::format("truncated safetensors file: {} bytes, less than the 8-byte header length", size));
  }
  mapping_ = std::make_shared<Mapping>();
  // Private and writable: tensors viewing the mapping may be written to without touching the file.
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (base == MAP_FAILED) throw Error(path, fmt::format("cannot memory-map: {}", std::strerror(err)));
  mapping_->base = base;
  mapping_->size = size;
  const auto* bytes = static_cast<const unsigned char*>(base);

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes)
    throw Error(path, fmt::format("bad safetensors header: header length {} is implausible (limit {} bytes)",
                                  header_len, kMaxHeaderBytes));
  if (8 + header_len > size)
    throw Error(path, fmt::format("truncated safetensors file: the header needs {} bytes, the file has {}",
                                  8 + header_len, size));
  data_offset_ = 8 + header_len;
  uint64_t data_size = size - data_offset_;

  json header;
  check_json_depth(std::string_view(reinterpret_cast<const char*>(bytes + 8), size_t(header_len)), path);
  try {
    header =
        json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + 8 + header_len));
  } catch (const json::exception& e) {
    throw Error(path, fmt::format("bad safetensors header: not valid JSON ({})", e.what()));
  }
  if (!header.is_object()) throw Error(path, "bad safetensors header: not a JSON object");

  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& v = item.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw Error(path, "bad safetensors header: '__metadata__' is not an object");
      for (const auto& m : v.items())
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    auto bad = [&](const std::string& what) {
      return Error(path, fmt::format("bad safetensors header: tensor '{}': {}", name, what));
    };
    if (!v.is_object()) throw bad("entry is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) throw bad("no 'dtype' string");
    if (!v.contains("shape") || !v["shape"].is_array()) throw bad("no 'shape' list");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      throw bad("no 'data_offsets' pair");
    SafetensorsEntry e;
    e.name = name;
    bool known = false;
    e.dtype = parse_dtype(v["dtype"].get<std::string>(), &known);
    if (!known) throw bad(fmt::format("unsupported dtype '{}'", v["dtype"].get<std::string>()));
    uint64_t numel = 1;
    for (const json& d : v["shape"]) {
      if (!d.is_number_unsigned())
        throw bad(fmt::format("shape {} holds a non-integer or negative size", v["shape"].dump()));
      e.shape.push_back(d.get<int64_t>());
      numel *= d.get<uint64_t>();
    }
    for (const json& o : v["data_offsets"])
      if (!o.is_number_unsigned())
        throw bad(fmt::format("data_offsets {} are not two non-negative integers", v["data_offsets"].dump()));
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    if (e.end < e.begin) throw bad(fmt::format("data_offsets [{}, {}] run backwards", e.begin, e.end));
    if (e.end > data_size)
      throw Error(path, fmt::format("truncated safetensors file: tensor '{}' ends at data byte {}, the data "
                                    "section has {} bytes",
                                    name, e.end, data_size));
    uint64_t need = numel * uint64_t(c10::elementSize(e.dtype));
    if (e.end - e.begin != need)
      throw bad(fmt::format("data_offsets [{}, {}] hold {} bytes, shape {} of {} needs {}", e.begin, e.end,
                            e.end - e.begin, shape_string(e.shape), v["dtype"].get<std::string>(), need));
    index_[name] = entries_.size();
    entries_.push_back(std::move(e));
  }
}

SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw Error(path_, fmt::format("tensor '{}' is not in this safetensors file", name));
  return entries_[it->second];
}

at::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  auto options = at::TensorOptions().dtype(e.dtype);
  if (e.end == e.begin) return at::empty(e.shape, options);
  char* data = static_cast<char*>(mapping_->base) + data_offset_ + e.begin;
  std::shared_ptr<Mapping> keep = mapping_;
  at::Tensor view = at::from_blob(
      data, e.shape, [keep](void*) mutable { keep.reset(); }, options);
  if (reinterpret_cast<uintptr_t>(data) % c10::elementSize(e.dtype) != 0) return view.clone();
  return view;
}

SafetensorsStore::SafetensorsStore(const std::string& path) : path_(path) {
  if (!files::is_dir(path)) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
    for (const auto& e : files_[0]->entries()) where_[e.name] = 0;
    return;
  }
  std::string index_path = files::join(path, "model.safetensors.index.json");
  std::string single = files::join(path, "model.safetensors");
  if (!files::is_file(index_path)) {
    if (!files::is_file(single))
      throw Error(path, "no model.safetensors or model.safetensors.index.json in this folder");
    files_.push_back(std::make_unique<SafetensorsFile>(single));
    for (const auto& e : files_[0]->entries()) where_[e.name] = 0;
    return;
  }
  json index;
  const std::string index_text = files::read_text(index_path);
  check_json_depth(index_text, index_path);
  try {
    index = json::parse(index_text);
  } catch (const json::exception& e) {
    throw Error(index_path, fmt::format("not valid JSON: {}", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw Error(index_path, "no 'weight_map' object");
  std::map<std::string, size_t> file_index;
  for (const auto& item : index["weight_map"].items()) {
    if (!item.value().is_string())
      throw Error(index_path, fmt::format("weight_map entry '{}' is not a file name", item.key()));
    std::string shard = item.value().get<std::string>();
    auto it = file_index.find(shard);
    if (it == file_index.end()) {
      files_.push_back(std::make_unique<SafetensorsFile>(files::join(path, shard)));
      it = file_index.emplace(shard, files_.size() - 1).first;
    }
    if (!files_[it->second]->contains(item.key()))
      throw Error(files_[it->second]->path(),
                  fmt::format("tensor '{}' is listed in {} but missing from this shard", item.key(), index_path));
    where_[item.key()] = it->second;
  }
}

const std::string& SafetensorsStore::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(path_, fmt::format("tensor '{}' is missing from the checkpoint", name));
  return files_[it->second]->path();
}

const SafetensorsEntry& SafetensorsStore::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(path_, fmt::format("tensor '{}' is missing from the checkpoint", name));
  return files_[it->second]->entry(name);
}

at::Tensor SafetensorsStore::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw Error(path_, fmt::format("tensor '{}' is missing from the checkpoint", name));
  return files_[it->second]->tensor(name);
}

std::vector<std::string> SafetensorsStore::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

}  // namespace verlpp::model
