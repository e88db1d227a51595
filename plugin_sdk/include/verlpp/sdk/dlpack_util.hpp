// Plugin SDK: small checks and facts about DLPack tensors that every plugin needs.
// Header-only and free of any framework so a vendor plugin can use it as it is.
#pragma once

#include <verlpp/plugin_abi.h>
#include <verlpp/sdk/errors.hpp>

#include <cstdint>
#include <string>

namespace verlpp::sdk {

// Bytes per element of a DLPack dtype (lanes included); throws for sub-byte types.
inline size_t dtype_size(DLDataType dtype) {
  if (dtype.bits % 8 != 0) fail(VERLPP_STATUS_UNSUPPORTED, "sub-byte dtypes are not supported");
  return static_cast<size_t>(dtype.bits / 8) * dtype.lanes;
}

// "float32", "bfloat16", "int64", ... for messages.
inline std::string dtype_name(DLDataType dtype) {
  std::string base;
  switch (dtype.code) {
    case kDLInt:
      base = "int";
      break;
    case kDLUInt:
      base = "uint";
      break;
    case kDLFloat:
      base = "float";
      break;
    case kDLBfloat:
      base = "bfloat";
      break;
    default:
      base = "dtype" + std::to_string(dtype.code) + "_";
      break;
  }
  std::string name = base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

inline bool same_dtype(DLDataType a, DLDataType b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

// Number of elements (1 for a 0-d tensor).
inline int64_t numel(const DLTensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

inline size_t nbytes(const DLTensor& t) { return static_cast<size_t>(numel(t)) * dtype_size(t.dtype); }

// True when the elements are dense in row-major order (NULL strides mean compact).
inline bool is_contiguous(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

// Start of the tensor's data, byte_offset applied.
inline void* data_ptr(const DLTensor& t) { return static_cast<char*>(t.data) + t.byte_offset; }

// Throws INVALID_ARGUMENT naming `what` if the tensor pointer is NULL or its data is NULL while
// it has elements.
inline const DLTensor& checked(const DLTensor* t, const char* what) {
  if (t == nullptr) fail(VERLPP_STATUS_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (t->ndim < 0) fail(VERLPP_STATUS_INVALID_ARGUMENT, std::string(what) + " has negative ndim");
  for (int i = 0; i < t->ndim; ++i)
    if (t->shape[i] < 0) fail(VERLPP_STATUS_INVALID_ARGUMENT, std::string(what) + " has a negative dimension");
  if (t->data == nullptr && numel(*t) > 0) fail(VERLPP_STATUS_INVALID_ARGUMENT, std::string(what) + " has NULL data");
  return *t;
}

// Copies `text` into a fixed char array of `capacity` bytes, truncating, always NUL-terminated.
inline void copy_string(char* dst, size_t capacity, const std::string& text) {
  if (capacity == 0) return;
  size_t n = text.size() < capacity - 1 ? text.size() : capacity - 1;
  text.copy(dst, n);
  dst[n] = '\0';
}

}  // namespace verlpp::sdk
