// NumPy .npy reading and writing (format spec: numpy.lib.format).
//
// File layout:  "\x93NUMPY" | major | minor | header_len (u16 LE for 1.0, u32 LE for 2.0/3.0)
//               | header: a Python dict literal, padded with spaces, ending in '\n'
//               | raw C-order data.
// Only the dict numpy itself writes is accepted: the keys 'descr', 'fortran_order' and
// 'shape', each once. Every error reads "<path>: <field>: ..." so the CLI can print it
// as one line.
#include "headcount/npy.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string_view>
#include <vector>

#include "headcount/error.h"
#include "io/atomic_file.h"

namespace headcount {
namespace {

// The .npy data is little-endian and we copy it byte for byte.
static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr std::size_t kPreambleV1 = 10;  // magic 6 + version 2 + u16 length
constexpr std::size_t kPreambleV2 = 12;  // magic 6 + version 2 + u32 length
constexpr std::size_t kDataAlign = 64;  // what numpy >= 1.17 writes, so data can be mmapped aligned

[[noreturn]] void file_error(const std::string& path, std::string_view field,
                             std::string_view what) {
  throw Error(detail::concat(path, ": ", field, ": ", what));
}

// ---- header dict parsing ----------------------------------------------------------------

struct Header {
  std::optional<DType> dtype;
  std::optional<bool> fortran_order;
  std::optional<std::vector<std::int64_t>> shape;
};

// A tiny recursive-descent reader for the subset of Python literals numpy writes.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text) : path_(path), text_(text) {}

  Header parse() {
    Header header;
    expect('{', "the header dict to start with '{'");
    skip_space();
    while (peek() != '}') {
      std::string key = parse_string("a quoted key");
      expect(':', "':' after a key");
      if (key == "descr") {
        if (header.dtype) fail_header("key 'descr' appears twice");
        header.dtype = parse_descr();
      } else if (key == "fortran_order") {
        if (header.fortran_order) fail_header("key 'fortran_order' appears twice");
        header.fortran_order = parse_fortran_order();
      } else if (key == "shape") {
        if (header.shape) fail_header("key 'shape' appears twice");
        header.shape = parse_shape();
      } else {
        fail_header(detail::concat("unexpected key '", key, "'"));
      }
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != '}') {
        fail_header(
            detail::concat("expected ',' or '}' at offset ", pos_, ", got ", describe_here()));
      }
    }
    ++pos_;
    skip_space();  // numpy pads with spaces and ends with '\n'
    if (pos_ != text_.size())
      fail_header(detail::concat("unexpected text after the dict at offset ", pos_));
    if (!header.dtype) fail_header("missing key 'descr'");
    if (!header.fortran_order) fail_header("missing key 'fortran_order'");
    if (!header.shape) fail_header("missing key 'shape'");
    return header;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r'))
      ++pos_;
  }
  std::string describe_here() const {
    return pos_ < text_.size() ? detail::concat("'", text_[pos_], "'")
                               : std::string("end of header");
  }
  [[noreturn]] void fail_header(std::string_view what) const { file_error(path_, "header", what); }
  void expect(char c, std::string_view what) {
    skip_space();
    if (peek() != c) fail_header(detail::concat("expected ", what, ", got ", describe_here()));
    ++pos_;
  }

  std::string parse_string(std::string_view what) {
    skip_space();
    char quote = peek();
    if (quote != '\'' && quote != '"')
      fail_header(detail::concat("expected ", what, ", got ", describe_here()));
    std::size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail_header("unterminated string");
    std::string value(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return value;
  }

  DType parse_descr() {
    skip_space();
    if (peek() != '\'' && peek() != '"')  // a structured dtype is a list, not a string
      file_error(path_, "descr", detail::concat("expected '<f4' or '<f8', got ", describe_here()));
    std::string descr = parse_string("a dtype string");
    if (descr == "<f4") return DType::f32;
    if (descr == "<f8") return DType::f64;
    file_error(path_, "descr", detail::concat("expected '<f4' or '<f8', got '", descr, "'"));
  }

  bool parse_fortran_order() {
    skip_space();
    std::string_view rest = text_.substr(pos_);
    if (rest.starts_with("False")) {
      pos_ += 5;
      return false;
    }
    if (rest.starts_with("True"))
      file_error(path_, "fortran_order", "expected False (C order), got True");
    file_error(path_, "fortran_order", detail::concat("expected False, got ", describe_here()));
  }

  std::vector<std::int64_t> parse_shape() {
    skip_space();
    if (peek() != '(')
      file_error(path_, "shape", detail::concat("expected a tuple '(...)', got ", describe_here()));
    ++pos_;
    std::vector<std::int64_t> shape;
    skip_space();
    while (peek() != ')') {
      shape.push_back(parse_extent());
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
      } else if (peek() != ')') {
        file_error(path_, "shape",
                   detail::concat("expected ',' or ')' in the tuple, got ", describe_here()));
      }
    }
    ++pos_;
    if (shape.empty() || shape.size() > static_cast<std::size_t>(kMaxRank))
      file_error(
          path_, "shape",
          detail::concat("expected 1 to ", kMaxRank, " dimensions, got rank ", shape.size()));
    return shape;
  }

  std::int64_t parse_extent() {
    if (peek() == '-')
      file_error(path_, "shape", "expected non-negative sizes, got a negative one");
    if (peek() < '0' || peek() > '9')
      file_error(path_, "shape", detail::concat("expected an integer, got ", describe_here()));
    std::int64_t value = 0;
    constexpr std::int64_t kLimit = std::int64_t{1} << 48;  // far beyond any file we could hold
    while (peek() >= '0' && peek() <= '9') {
      value = value * 10 + (peek() - '0');
      if (value > kLimit)
        file_error(path_, "shape", "expected a size below 2^48, got a larger one");
      ++pos_;
    }
    if (peek() == 'L') ++pos_;  // Python 2 longs, as old numpy wrote them
    return value;
  }

  const std::string& path_;
  std::string_view text_;
  std::size_t pos_ = 0;
};

std::uint32_t read_le(const unsigned char* bytes, std::size_t count) {
  std::uint32_t value = 0;
  for (std::size_t i = 0; i < count; ++i) value |= static_cast<std::uint32_t>(bytes[i]) << (8 * i);
  return value;
}

// ---- writing -------------------------------------------------------------------------------

// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" padded so the data starts
// at a multiple of kDataAlign, like numpy's own writer.
std::string make_header(const TensorView& view) {
  std::string dict = detail::concat("{'descr': '", view.dtype == DType::f32 ? "<f4" : "<f8",
                                    "', 'fortran_order': False, 'shape': (");
  for (int d = 0; d < view.rank; ++d) dict += detail::concat(d ? ", " : "", view.shape[d]);
  dict += view.rank == 1 ? ",)" : ")";  // a one-element Python tuple needs its comma
  dict += ", }";
  std::size_t total = kPreambleV1 + dict.size() + 1;  // +1 for the final '\n'
  std::size_t padded = (total + kDataAlign - 1) / kDataAlign * kDataAlign;
  dict.append(padded - total, ' ');
  dict += '\n';
  return dict;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

Tensor read_npy(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    file_error(path, "file", "cannot open: is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) file_error(path, "file", detail::concat("cannot open: ", errno_text()));
  in.seekg(0, std::ios::end);
  const std::uint64_t file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0, std::ios::beg);

  unsigned char preamble[kPreambleV2] = {};
  const std::size_t got =
      file_size < kPreambleV2 ? static_cast<std::size_t>(file_size) : kPreambleV2;
  in.read(reinterpret_cast<char*>(preamble), static_cast<std::streamsize>(got));
  if (got < kMagic.size() || std::memcmp(preamble, kMagic.data(), kMagic.size()) != 0)
    file_error(path, "magic", "expected \"\\x93NUMPY\" at the start, not a .npy file");
  if (got < kMagic.size() + 2) file_error(path, "version", "file ends before the version bytes");
  const int major = preamble[6], minor = preamble[7];
  if (minor != 0 || major < 1 || major > 3)
    file_error(path, "version",
               detail::concat("expected 1.0, 2.0 or 3.0, got ", major, ".", minor));

  const std::size_t preamble_size = major == 1 ? kPreambleV1 : kPreambleV2;
  if (got < preamble_size)
    file_error(path, "header length",
               detail::concat("file ends after ", file_size, " bytes, inside the ", preamble_size,
                              "-byte preamble"));
  const std::uint64_t header_len = read_le(preamble + 8, preamble_size - 8);
  if (preamble_size + header_len > file_size)
    file_error(path, "header length",
               detail::concat("expected at most ", file_size - preamble_size,
                              " bytes (the rest of the file), got ", header_len));

  std::string text(static_cast<std::size_t>(header_len), '\0');
  in.seekg(static_cast<std::streamoff>(preamble_size), std::ios::beg);
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  if (!in) file_error(path, "header", "read failed");
  Header header = HeaderParser(path, text).parse();

  const std::vector<std::int64_t>& shape = *header.shape;
  const std::size_t item = dtype_size(*header.dtype);
  std::uint64_t expected = item;
  for (std::int64_t extent : shape) {
    // Each extent is < 2^48, but their product may still overflow: cap it at the file size.
    if (extent != 0 && expected > file_size / static_cast<std::uint64_t>(extent)) {
      expected = std::numeric_limits<std::uint64_t>::max();
      break;
    }
    expected *= static_cast<std::uint64_t>(extent);
  }
  const std::uint64_t actual = file_size - preamble_size - header_len;
  if (actual != expected) {
    std::string want = expected == std::numeric_limits<std::uint64_t>::max()
                           ? std::string("more bytes than the file holds")
                           : detail::concat(expected, " bytes");
    file_error(
        path, "data",
        detail::concat("expected ", want, " for shape ", shape_string(shape), " ",
                       dtype_name(*header.dtype), ", got ", actual,
                       actual < expected ? " (file is short)" : " (extra bytes at the end)"));
  }

  Tensor tensor(*header.dtype, shape);
  in.read(tensor.data<char>(), static_cast<std::streamsize>(tensor.bytes()));
  if (!in && tensor.bytes() > 0) file_error(path, "data", "read failed");
  return tensor;
}

Tensor read_npy_f32(const std::string& path) {
  Tensor tensor = read_npy(path);
  if (tensor.dtype() == DType::f32) return tensor;
  Tensor converted(DType::f32, tensor.shape());
  const double* src = tensor.data<double>();
  float* dst = converted.data<float>();
  for (std::int64_t i = 0; i < tensor.numel(); ++i) dst[i] = static_cast<float>(src[i]);
  return converted;
}

void write_npy(const std::string& path, const TensorView& view) {
  if (view.dtype != DType::f32 && view.dtype != DType::f64)
    file_error(path, "dtype", detail::concat("expected f32 or f64, got ", dtype_name(view.dtype)));
  if (view.rank < 1 || view.rank > kMaxRank)
    file_error(path, "shape",
               detail::concat("expected 1 to ", kMaxRank, " dimensions, got rank ", view.rank));
  for (int d = 0; d < view.rank; ++d)
    if (view.shape[d] < 0)
      file_error(path, "shape",
                 detail::concat("expected non-negative sizes, got ", view.shape_string()));
  if (view.empty() && view.numel() > 0)
    file_error(path, "data", "expected a view with data, got a null pointer");

  // Whole or not at all: io::AtomicFile writes `<path>.partial`, fsyncs, renames.
  io::AtomicFile file(path);
  const std::string header = make_header(view);
  unsigned char preamble[kPreambleV1] = {0x93,
                                         'N',
                                         'U',
                                         'M',
                                         'P',
                                         'Y',
                                         1,
                                         0,
                                         static_cast<unsigned char>(header.size() & 0xff),
                                         static_cast<unsigned char>(header.size() >> 8)};
  file.write(preamble, sizeof preamble);
  file.write(header.data(), header.size());

  // Walk the outer dimensions through their strides; copy one innermost row at a time.
  const std::size_t item = dtype_size(view.dtype);
  const int inner = view.rank - 1;
  const std::int64_t row = view.shape[inner];
  std::vector<char> buffer(static_cast<std::size_t>(row) * item);
  // Rows are gathered into ~1 MiB chunks: one write() per row would be a system call per
  // 4-element row of a [n, 4] array.
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<char> chunk;
  chunk.reserve(kChunk + buffer.size());
  std::int64_t rows = 1;
  for (int d = 0; d < inner; ++d) rows *= view.shape[d];
  if (row == 0) rows = 0;
  std::array<std::int64_t, kMaxRank> index{};
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t base = 0;
    for (int d = 0; d < inner; ++d) base += index[d] * view.strides[d];
    const char* src = static_cast<const char*>(view.data);
    for (std::int64_t j = 0; j < row; ++j)
      std::memcpy(buffer.data() + j * item,
                  src + (base + j * view.strides[inner]) * static_cast<std::int64_t>(item), item);
    chunk.insert(chunk.end(), buffer.begin(), buffer.end());
    if (chunk.size() >= kChunk) {
      file.write(chunk.data(), chunk.size());
      chunk.clear();
    }
    for (int d = inner - 1; d >= 0; --d) {  // odometer increment
      if (++index[d] < view.shape[d]) break;
      index[d] = 0;
    }
  }
  file.write(chunk.data(), chunk.size());
  file.commit();
}

}  // namespace headcount
