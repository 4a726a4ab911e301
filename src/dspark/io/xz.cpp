#include "dspark/io/xz.h"

#include <lzma.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "dspark/core/error.h"

namespace dspark {
namespace {

const char* lzma_error_name(lzma_ret ret) {
  switch (ret) {
    case LZMA_MEM_ERROR:
      return "out of memory";
    case LZMA_MEMLIMIT_ERROR:
      return "memory limit reached";
    case LZMA_FORMAT_ERROR:
      return "not an .xz stream";
    case LZMA_OPTIONS_ERROR:
      return "unsupported .xz options";
    case LZMA_DATA_ERROR:
      return "corrupt data";
    case LZMA_BUF_ERROR:
      return "truncated data";
    default:
      return "liblzma error";
  }
}

}  // namespace

std::string xz_decompress(std::string_view compressed, std::string_view origin) {
  lzma_stream stream = LZMA_STREAM_INIT;
  lzma_ret ret = lzma_stream_decoder(&stream, UINT64_MAX, LZMA_CONCATENATED);
  DSPARK_CHECK_KIND(io, ret == LZMA_OK, "{}: cannot start the xz decoder ({})", origin,
                    lzma_error_name(ret));
  std::string out;
  out.resize(compressed.size() * 4 + 4096);
  stream.next_in = reinterpret_cast<const uint8_t*>(compressed.data());
  stream.avail_in = compressed.size();
  stream.next_out = reinterpret_cast<uint8_t*>(out.data());
  stream.avail_out = out.size();
  lzma_action action = LZMA_RUN;
  while (true) {
    if (stream.avail_in == 0) action = LZMA_FINISH;
    ret = lzma_code(&stream, action);
    if (ret == LZMA_STREAM_END) break;
    if (ret != LZMA_OK) {
      lzma_end(&stream);
      DSPARK_FAIL(io, "{}: cannot decompress ({} after {} input bytes)", origin,
                  lzma_error_name(ret), compressed.size() - stream.avail_in);
    }
    if (stream.avail_out == 0) {
      const size_t used = out.size();
      out.resize(used * 2);
      stream.next_out = reinterpret_cast<uint8_t*>(out.data()) + used;
      stream.avail_out = out.size() - used;
    }
  }
  out.resize(out.size() - stream.avail_out);
  lzma_end(&stream);
  return out;
}

std::string read_file_maybe_xz(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  DSPARK_CHECK_KIND(io, file.good(), "cannot open {}: {}", path.string(), std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  DSPARK_CHECK_KIND(io, !file.bad(), "cannot read {}", path.string());
  if (path.extension() == ".xz") return xz_decompress(bytes, path.string());
  return bytes;
}

}  // namespace dspark
