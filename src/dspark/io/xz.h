// Reading .xz-compressed files (liblzma), used for compressed tokenizer fixtures.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace dspark {

// Decompresses a complete .xz stream (concatenated streams allowed). Throws ErrorKind::io naming
// `origin` when the data is corrupt or truncated.
std::string xz_decompress(std::string_view compressed, std::string_view origin = "<memory>");

// The bytes of `path`; decompressed when the name ends in ".xz". Throws ErrorKind::io.
std::string read_file_maybe_xz(const std::filesystem::path& path);

}  // namespace dspark
