// Page decompression for the codecs verlpp reads: UNCOMPRESSED, SNAPPY (libsnappy), GZIP (zlib)
// and ZSTD (libzstd), the ones pyarrow, pandas and arrow-rs write. LZ4, LZ4_RAW, BROTLI and LZO
// are refused by name. Internal to the data layer.
#pragma once

#include "parquet_metadata.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace verlpp::data::parquet {

// True for the codecs decompress() handles.
bool codec_supported(Codec codec);
// Decompresses data[0, size) into exactly `uncompressed_size` bytes; ParquetFormatError when the
// codec is not supported, the stream is corrupt or it does not hold that many bytes.
std::string decompress(Codec codec, const uint8_t* data, size_t size, size_t uncompressed_size);

}  // namespace verlpp::data::parquet
