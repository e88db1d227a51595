// Writing safetensors: one file, or HF-style shards with an index. Data is laid out by
// descending element size, then name, so every tensor starts aligned to its element size
// (the header is padded to 8 bytes). A regular file is written beside its final name and renamed
// into place, so a crash never leaves a half-written checkpoint under the real name; a device or
// a FIFO (/dev/null, a pipe) is written in place (files::OutputFile, every write checked).
#include <verlpp/model/safetensors.hpp>

#include "../util/files.hpp"
#include "../util/output_file.hpp"

#include <verlpp/core/error.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>

namespace verlpp::model {
namespace {

using nlohmann::json;

uint64_t byte_size(const at::Tensor& t) { return uint64_t(t.numel()) * uint64_t(t.element_size()); }

// The order data is written in: larger elements first, then by name.
std::vector<NamedTensor> layout_order(std::vector<NamedTensor> tensors) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const NamedTensor& a, const NamedTensor& b) {
    if (a.second.element_size() != b.second.element_size()) return a.second.element_size() > b.second.element_size();
    return a.first < b.first;
  });
  return tensors;
}

}  // namespace

const char* safetensors_dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "F32";
    case at::kHalf:
      return "F16";
    case at::kBFloat16:
      return "BF16";
    case at::kDouble:
      return "F64";
    case at::kLong:
      return "I64";
    case at::kInt:
      return "I32";
    case at::kShort:
      return "I16";
    case at::kChar:
      return "I8";
    case at::kByte:
      return "U8";
    case at::kBool:
      return "BOOL";
    default:
      break;
  }
  throw Error("safetensors", fmt::format("dtype {} cannot be written to safetensors", c10::toString(dtype)));
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<NamedTensor> ordered = layout_order(tensors);
  json header = json::object();
  json meta = json::object();
  meta["format"] = "pt";
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const auto& [name, t] : ordered) {
    VERLPP_CHECK(t.defined(), "write_safetensors({}): tensor '{}' is undefined", path, name);
    VERLPP_CHECK(!header.contains(name), "write_safetensors({}): tensor '{}' appears twice", path, name);
    uint64_t n = byte_size(t);
    header[name] = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                    {"shape", json(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()))},
                    {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = (uint64_t(text.size()) >> (8 * i)) & 0xff;

  files::OutputFile out(path);
  out.write(length, 8);
  out.write(text);
  for (const auto& [name, t] : ordered) {
    at::Tensor host = t.detach().to(at::kCPU).contiguous();
    out.write(host.data_ptr(), size_t(byte_size(host)));
  }
  out.commit();
}

std::vector<std::string> write_safetensors_sharded(const std::string& folder, const std::vector<NamedTensor>& tensors,
                                                   uint64_t max_shard_bytes) {
  files::make_dirs(folder);
  // Old weights in the folder would shadow or mix with the new ones.
  for (const std::string& name : files::list_dir(folder)) {
    bool shard = name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos && name.size() > 12 &&
                 name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (shard || name == "model.safetensors" || name == "model.safetensors.index.json")
      files::remove_file(files::join(folder, name));
  }
  std::vector<std::vector<NamedTensor>> shards(1);
  uint64_t current = 0, total = 0;
  for (const NamedTensor& t : layout_order(tensors)) {
    uint64_t n = byte_size(t.second);
    if (current > 0 && current + n > max_shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(t);
    current += n;
    total += n;
  }
  if (shards.size() == 1) {
    write_safetensors(files::join(folder, "model.safetensors"), shards[0]);
    return {"model.safetensors"};
  }
  std::vector<std::string> written;
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors(files::join(folder, name), shards[i]);
    for (const auto& t : shards[i]) weight_map[t.first] = name;
    written.push_back(name);
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  files::write_text(files::join(folder, "model.safetensors.index.json"), index.dump(2) + "\n");
  written.push_back("model.safetensors.index.json");
  return written;
}

}  // namespace verlpp::model
