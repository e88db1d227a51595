// Page decompression (see parquet_codecs.hpp). Each codec's own length check comes before any
// allocation, so a corrupt size in a page header cannot make the reader allocate past what the
// compressed bytes can hold.
#include "parquet_codecs.hpp"

#include "parquet_error.hpp"

#include <fmt/format.h>
#include <snappy.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>

namespace verlpp::data::parquet {
namespace {

std::string snappy_decompress(const uint8_t* data, size_t size, size_t expected) {
  size_t length = 0;
  const char* in = reinterpret_cast<const char*>(data);
  if (!snappy::GetUncompressedLength(in, size, &length)) format_error("the SNAPPY stream is corrupt (bad length)");
  if (length != expected)
    format_error(fmt::format("the SNAPPY stream holds {} bytes, the page header says {}", length, expected));
  std::string out(length, '\0');
  if (!snappy::RawUncompress(in, size, out.data())) format_error("the SNAPPY stream is corrupt");
  return out;
}

std::string zstd_decompress(const uint8_t* data, size_t size, size_t expected) {
  const unsigned long long length = ZSTD_getFrameContentSize(data, size);
  if (length == ZSTD_CONTENTSIZE_ERROR) format_error("the ZSTD stream is corrupt (no valid frame header)");
  if (length != ZSTD_CONTENTSIZE_UNKNOWN && length != expected)
    format_error(fmt::format("the ZSTD stream holds {} bytes, the page header says {}", length, expected));
  // A frame without its size: decompress into the declared size, which the result must fill. One
  // byte of a zstd frame expands to at most about 43,700 (an RLE block of 128 KiB in 3 bytes).
  if (length == ZSTD_CONTENTSIZE_UNKNOWN && expected / 43700 > size + 64)
    format_error(
        fmt::format("a ZSTD stream of {} bytes cannot hold the {} bytes the page header says", size, expected));
  std::string out(expected, '\0');
  const size_t got = ZSTD_decompress(out.data(), out.size(), data, size);
  if (ZSTD_isError(got)) format_error(fmt::format("the ZSTD stream is corrupt: {}", ZSTD_getErrorName(got)));
  if (got != expected)
    format_error(fmt::format("the ZSTD stream holds {} bytes, the page header says {}", got, expected));
  return out;
}

std::string gzip_decompress(const uint8_t* data, size_t size, size_t expected) {
  // Deflate expands at most 1032:1, so a declared size past that is a corrupt header, refused
  // before allocating it.
  if (expected / 1032 > size + 64)
    format_error(
        fmt::format("a GZIP stream of {} bytes cannot hold the {} bytes the page header says", size, expected));
  std::string out(expected, '\0');
  z_stream s;
  std::memset(&s, 0, sizeof s);
  if (inflateInit2(&s, 15 + 32) != Z_OK) format_error("zlib could not start");  // 32: gzip or zlib header
  s.next_in = const_cast<Bytef*>(data);
  s.avail_in = uInt(size);
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = uInt(out.size());
  int rc = Z_OK;
  // Writers may concatenate gzip members; go on while input is left and output has room.
  while (rc == Z_OK || (rc == Z_STREAM_END && s.avail_in > 0 && s.avail_out > 0)) {
    if (rc == Z_STREAM_END && inflateReset(&s) != Z_OK) break;
    rc = inflate(&s, Z_FINISH);
    if (rc == Z_BUF_ERROR && s.avail_out == 0) break;
  }
  const size_t got = out.size() - s.avail_out;
  const bool ended = rc == Z_STREAM_END;
  const std::string reason = s.msg ? s.msg : "";
  inflateEnd(&s);
  if (!ended) {
    if (s.avail_out == 0)
      format_error(fmt::format("the GZIP stream holds more than the {} bytes the page header says", expected));
    format_error(fmt::format("the GZIP stream is corrupt or cut short{}", reason.empty() ? "" : ": " + reason));
  }
  if (got != expected)
    format_error(fmt::format("the GZIP stream holds {} bytes, the page header says {}", got, expected));
  return out;
}

}  // namespace

bool codec_supported(Codec codec) {
  return codec == Codec::uncompressed || codec == Codec::snappy || codec == Codec::gzip || codec == Codec::zstd;
}

std::string decompress(Codec codec, const uint8_t* data, size_t size, size_t uncompressed_size) {
  switch (codec) {
    case Codec::uncompressed:
      if (size != uncompressed_size)
        format_error(
            fmt::format("an UNCOMPRESSED page of {} bytes declares {} uncompressed bytes", size, uncompressed_size));
      return std::string(reinterpret_cast<const char*>(data), size);
    case Codec::snappy:
      return snappy_decompress(data, size, uncompressed_size);
    case Codec::zstd:
      return zstd_decompress(data, size, uncompressed_size);
    case Codec::gzip:
      return gzip_decompress(data, size, uncompressed_size);
    default:
      format_error(
          fmt::format("compression codec {} is not supported (verlpp reads UNCOMPRESSED, SNAPPY, GZIP "
                      "and ZSTD; rewrite the file with one of those)",
                      codec_name(codec)));
  }
}

}  // namespace verlpp::data::parquet
