// GGUF: map the file, then read the header, the metadata and the tensor infos through a cursor
// that checks every read against the bytes left, then check the tensors' byte ranges against
// the data region. Nothing is trusted before it is checked: a count is compared with what the
// remaining bytes could hold before the loop it drives, a length before the string it sizes,
// a tensor's shape and type before its byte size is computed. Vectors grow as entries are
// actually read, so memory stays proportional to the file, whatever a count claims.
#include "headcount/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "headcount/error.h"

namespace headcount {

using detail::concat;

// The file's bytes, unmapped when the last GgufFile copy goes away.
struct GgufFile::Mapping {
  void* address = nullptr;
  std::size_t size = 0;
  ~Mapping() {
    if (address != nullptr) ::munmap(address, size);
  }
};

std::string gguf_value_type_name(std::uint32_t type) {
  static const char* const kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                       "int32",  "float32", "bool",   "string", "array",
                                       "uint64", "int64",   "float64"};
  if (type < std::size(kNames)) return kNames[type];
  return concat("unknown value type ", type);
}

namespace {

constexpr std::uint64_t kHeaderBytes = 4 + 4 + 8 + 8;  // magic, version, two counts
// The fewest bytes one entry can take: a key/value is an empty key (8), a type (4) and a
// one-byte value; a tensor info an empty name (8), n_dims (4), one dimension (8), a type (4)
// and an offset (8). Counts are checked against these before their loops.
constexpr std::uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 62;
constexpr std::uint32_t kMaxDims = 4;  // GGML_MAX_DIMS
constexpr std::uint64_t kDefaultAlignment = 32;

// A key or tensor name as an error message shows it: quoted, bytes outside printable ASCII as
// \xNN, at most 80 bytes, so a hostile name cannot break the one-line message or flood it.
std::string quoted(std::string_view name) {
  std::string out = "'";
  for (std::size_t i = 0; i < name.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (name.size() > 80) out += concat("... (", name.size(), " bytes)");
  return out + "'";
}

// 0 for string and array (variable size), else the bytes of one value.
std::uint64_t scalar_size(GgufValueType type) {
  switch (type) {
    case GgufValueType::uint8:
    case GgufValueType::int8:
    case GgufValueType::boolean:
      return 1;
    case GgufValueType::uint16:
    case GgufValueType::int16:
      return 2;
    case GgufValueType::uint32:
    case GgufValueType::int32:
    case GgufValueType::float32:
      return 4;
    case GgufValueType::uint64:
    case GgufValueType::int64:
    case GgufValueType::float64:
      return 8;
    default:
      return 0;
  }
}

bool is_integer(GgufValueType t) {
  return t != GgufValueType::float32 && t != GgufValueType::float64 && t != GgufValueType::string &&
         t != GgufValueType::array;
}

bool is_signed(GgufValueType t) {
  return t == GgufValueType::int8 || t == GgufValueType::int16 || t == GgufValueType::int32 ||
         t == GgufValueType::int64;
}

std::uint64_t load_le(const std::byte* p, std::uint64_t n) {
  std::uint64_t value = 0;
  for (std::uint64_t i = n; i-- > 0;) value = (value << 8) | std::to_integer<std::uint64_t>(p[i]);
  return value;
}

// An integer element (of `type`, a scalar integer type) as int64: signed types sign-extended,
// unsigned ones zero-extended (a uint64 above INT64_MAX keeps its bits).
std::int64_t integer_value(GgufValueType type, const std::byte* p) {
  const std::uint64_t n = scalar_size(type);
  const std::uint64_t bits = load_le(p, n);
  if (!is_signed(type) || n == 8) return static_cast<std::int64_t>(bits);
  const std::uint64_t sign = std::uint64_t{1} << (8 * n - 1);
  return static_cast<std::int64_t>((bits ^ sign) - sign);
}

double float_value(GgufValueType type, const std::byte* p) {
  if (type == GgufValueType::float32) {
    const auto bits = static_cast<std::uint32_t>(load_le(p, 4));
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  const std::uint64_t bits = load_le(p, 8);
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// Reads the header region front to back; every read is checked against the bytes left and a
// short read is an Error naming the field being read.
class Cursor {
 public:
  Cursor(const std::string& path, const std::byte* base, std::uint64_t size)
      : path_(path), base_(base), size_(size) {}

  std::uint64_t position() const { return pos_; }
  std::uint64_t left() const { return size_ - pos_; }

  const std::byte* take(std::uint64_t n, const std::string& field) {
    if (n > left())
      fail(concat(path_, ": ", field), concat("truncated: expected ", n, " bytes at offset ", pos_,
                                              ", got ", left(), " (the file has ", size_, ")"));
    const std::byte* p = base_ + pos_;
    pos_ += n;
    return p;
  }
  std::uint32_t u32(const std::string& field) {
    return static_cast<std::uint32_t>(load_le(take(4, field), 4));
  }
  std::uint64_t u64(const std::string& field) { return load_le(take(8, field), 8); }

  std::string string(const std::string& field) {
    const std::uint64_t length = u64(field + " length");
    check(length <= left(), concat(path_, ": ", field, " length"),
          concat("at most ", left(), " (the bytes left at offset ", pos_, ")"), length);
    const auto* p = reinterpret_cast<const char*>(take(length, field));
    return std::string(p, static_cast<std::size_t>(length));
  }

 private:
  const std::string& path_;
  const std::byte* base_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
};

GgufValueType value_type(Cursor& in, const std::string& path, const std::string& field) {
  const std::uint32_t type = in.u32(field);
  check(type <= static_cast<std::uint32_t>(GgufValueType::float64), concat(path, ": ", field),
        "a GGUF value type (0..12)", type);
  return static_cast<GgufValueType>(type);
}

GgufValue read_value(Cursor& in, const std::string& path, const std::string& field) {
  GgufValue v;
  v.type = value_type(in, path, field + " type");
  if (v.type == GgufValueType::string) {
    v.text = in.string(field);
  } else if (v.type == GgufValueType::array) {
    v.element_type = value_type(in, path, field + " element type");
    check(v.element_type != GgufValueType::array, concat(path, ": ", field, " element type"),
          "a scalar or string type (arrays of arrays are not supported)", "array");
    v.count = in.u64(field + " count");
    if (v.element_type == GgufValueType::string) {
      // Each string takes at least its 8-byte length.
      check(v.count <= in.left() / 8, concat(path, ": ", field, " count"),
            concat("at most ", in.left() / 8, " strings (", in.left(), " bytes left)"), v.count);
      for (std::uint64_t i = 0; i < v.count; ++i)
        v.strings.push_back(in.string(concat(field, "[", i, "]")));
    } else {
      const std::uint64_t size = scalar_size(v.element_type);
      check(v.count <= in.left() / size, concat(path, ": ", field, " count"),
            concat("at most ", in.left() / size, " ",
                   gguf_value_type_name(static_cast<std::uint32_t>(v.element_type)), " elements (",
                   in.left(), " bytes left)"),
            v.count);
      v.raw = {in.take(v.count * size, field), static_cast<std::size_t>(v.count * size)};
      if (v.element_type == GgufValueType::boolean)
        for (std::byte b : v.raw)
          check(std::to_integer<unsigned>(b) <= 1, concat(path, ": ", field),
                "bool elements of 0 or 1", std::to_integer<unsigned>(b));
    }
  } else {
    const std::byte* p = in.take(scalar_size(v.type), field);
    if (v.type == GgufValueType::float32 || v.type == GgufValueType::float64) {
      v.real = float_value(v.type, p);
    } else {
      v.integer = integer_value(v.type, p);
      if (v.type == GgufValueType::boolean)
        check(v.integer == 0 || v.integer == 1, concat(path, ": ", field), "a bool of 0 or 1",
              v.integer);
    }
  }
  return v;
}

GgufTensorInfo read_tensor_info(Cursor& in, const std::string& path, std::uint64_t index) {
  GgufTensorInfo t;
  t.name = in.string(concat("tensor ", index, " name"));
  const std::string where = concat("tensor ", quoted(t.name));
  const std::uint32_t n_dims = in.u32(where + " n_dims");
  check(n_dims >= 1 && n_dims <= kMaxDims, concat(path, ": ", where, " n_dims"),
        concat("1..", kMaxDims), n_dims);
  std::uint64_t numel = 1;
  for (std::uint32_t d = 0; d < n_dims; ++d) {
    const std::uint64_t ne = in.u64(concat(where, " ne[", d, "]"));
    check(ne <= kMaxElements && (ne == 0 || numel <= kMaxElements / ne),
          concat(path, ": ", where, " ne[", d, "]"),
          concat("a dimension keeping the element count within 2^62 (count so far ", numel, ")"),
          ne);
    numel *= ne;
    t.ne.push_back(static_cast<std::int64_t>(ne));
  }
  t.numel = static_cast<std::int64_t>(numel);
  const std::uint32_t type = in.u32(where + " type");
  const GgmlTypeTraits traits = ggml_type_traits(type);
  check(traits.name != nullptr, concat(path, ": ", where, " type"),
        "a ggml type (F32, F16, Q8_0, Q4_1, ...)", ggml_type_name(type));
  t.type = static_cast<GgmlType>(type);
  check(t.ne[0] % traits.block_size == 0, concat(path, ": ", where, " ne[0]"),
        concat("a multiple of ", traits.block_size, " (the ", traits.name, " block size)"),
        t.ne[0]);
  t.offset = in.u64(where + " offset");
  // Byte size once the data region is known (read_tensor_infos' caller): numel / block_size
  // blocks, each block_bytes; computed there after checking it fits.
  return t;
}

std::uint64_t align_up(std::uint64_t n, std::uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) {
  GgufFile file;
  file.path_ = path;

  // 1. Map the whole file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, concat("cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "expected a regular file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < kHeaderBytes) {
    ::close(fd);
    fail(path, concat("truncated: expected at least ", kHeaderBytes,
                      " bytes (magic, version, tensor and key/value counts), got ", size));
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping->address == MAP_FAILED) {
    mapping->address = nullptr;
    fail(path, concat("cannot map: ", std::strerror(errno)));
  }
  mapping->size = size;
  const auto* base = static_cast<const std::byte*>(mapping->address);
  file.file_size_ = size;
  Cursor in(path, base, size);

  // 2. The header.
  const std::byte* magic = in.take(4, "magic");
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    char got[12];
    std::snprintf(got, sizeof got, "%02x %02x %02x %02x", std::to_integer<unsigned>(magic[0]),
                  std::to_integer<unsigned>(magic[1]), std::to_integer<unsigned>(magic[2]),
                  std::to_integer<unsigned>(magic[3]));
    fail(path + ": magic", concat("expected \"GGUF\" (47 47 55 46), got ", got));
  }
  file.version_ = in.u32("version");
  check(file.version_ == 2 || file.version_ == 3, path + ": version", "2 or 3", file.version_);
  const std::uint64_t tensor_count = in.u64("tensor_count");
  const std::uint64_t kv_count = in.u64("kv_count");
  check(kv_count <= in.left() / kMinKeyValueBytes, path + ": kv_count",
        concat("at most ", in.left() / kMinKeyValueBytes, " (", in.left(), " bytes left, ",
               kMinKeyValueBytes, " at least per key/value)"),
        kv_count);
  check(tensor_count <= in.left() / kMinTensorInfoBytes, path + ": tensor_count",
        concat("at most ", in.left() / kMinTensorInfoBytes, " (", in.left(), " bytes left, ",
               kMinTensorInfoBytes, " at least per tensor info)"),
        tensor_count);

  // 3. Metadata, keys unique; general.alignment a power-of-two uint32.
  for (std::uint64_t i = 0; i < kv_count; ++i) {
    GgufKeyValue kv;
    kv.key = in.string(concat("metadata key ", i));
    kv.value = read_value(in, path, concat("metadata ", quoted(kv.key)));
    file.metadata_.push_back(std::move(kv));
  }
  {
    std::vector<const GgufKeyValue*> by_key;
    for (const auto& kv : file.metadata_) by_key.push_back(&kv);
    std::sort(by_key.begin(), by_key.end(),
              [](const auto* a, const auto* b) { return a->key < b->key; });
    for (std::size_t i = 1; i < by_key.size(); ++i)
      if (by_key[i]->key == by_key[i - 1]->key)
        fail(path, concat("metadata key ", quoted(by_key[i]->key), " appears twice"));
  }
  if (const GgufValue* a = file.find("general.alignment")) {
    check(a->type == GgufValueType::uint32, path + ": metadata 'general.alignment' type", "uint32",
          gguf_value_type_name(static_cast<std::uint32_t>(a->type)));
    const auto alignment = static_cast<std::uint64_t>(a->integer);
    check(alignment != 0 && (alignment & (alignment - 1)) == 0,
          path + ": metadata 'general.alignment'", "a power of two", alignment);
    file.alignment_ = alignment;
  }

  // 4. Tensor infos, names unique.
  for (std::uint64_t i = 0; i < tensor_count; ++i)
    file.tensors_.push_back(read_tensor_info(in, path, i));
  {
    std::vector<const GgufTensorInfo*> by_name;
    for (const auto& t : file.tensors_) by_name.push_back(&t);
    std::sort(by_name.begin(), by_name.end(),
              [](const auto* a, const auto* b) { return a->name < b->name; });
    for (std::size_t i = 1; i < by_name.size(); ++i)
      if (by_name[i]->name == by_name[i - 1]->name)
        fail(path, concat("tensor ", quoted(by_name[i]->name), " appears twice"));
  }

  // 5. The data region starts at the next multiple of the alignment; each tensor's bytes lie
  //    inside it, start aligned, and overlap no other tensor's.
  file.data_offset_ = align_up(in.position(), file.alignment_);
  // With no tensors nothing is read from there, so a file may end before the padding; with
  // tensors, even zero-byte ones, the region must start inside the file.
  check(file.tensors_.empty() || file.data_offset_ <= size, path + ": data region",
        concat("to start inside the file of ", size, " bytes"),
        concat("byte ", file.data_offset_, " (tensor infos end at ", in.position(), ", aligned to ",
               file.alignment_, ")"));
  const std::uint64_t data_size = file.data_offset_ <= size ? size - file.data_offset_ : 0;
  for (GgufTensorInfo& t : file.tensors_) {
    const GgmlTypeTraits traits = ggml_type_traits(t.type);
    const std::string where = concat(path, ": tensor ", quoted(t.name));
    const auto blocks = static_cast<std::uint64_t>(t.numel / traits.block_size);
    const auto block_bytes = static_cast<std::uint64_t>(traits.block_bytes);
    check(blocks <= data_size / block_bytes, where + " size",
          concat("at most ", data_size, " bytes (the data region)"),
          concat("ne ", shape_string(t.ne), " of ", traits.name, ": ", blocks, " blocks of ",
                 block_bytes, " bytes"));
    t.bytes = blocks * block_bytes;
    check(t.offset % file.alignment_ == 0, where + " offset",
          concat("a multiple of ", file.alignment_, " (the alignment)"), t.offset);
    check(t.offset <= data_size && t.bytes <= data_size - t.offset, where + " offset",
          concat("a range inside the data region of ", data_size, " bytes"),
          concat("[", t.offset, ", ", t.offset + t.bytes, ")"));
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : file.tensors_)
    if (t.bytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const GgufTensorInfo& a = *by_offset[i - 1];
    const GgufTensorInfo& b = *by_offset[i];
    if (b.offset < a.offset + a.bytes)
      fail(path, concat("tensor ", quoted(b.name), " bytes [", b.offset, ", ", b.offset + b.bytes,
                        ") overlap tensor ", quoted(a.name), " bytes [", a.offset, ", ",
                        a.offset + a.bytes, ")"));
  }

  file.data_ = base + std::min(file.data_offset_, size);
  file.mapping_ = std::move(mapping);
  return file;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& kv : metadata_)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

namespace {

// The value of `key`, checked to be present, an array or not as `array` says, and of a
// (element) type ok_type accepts; else an Error naming the key, what was expected and the type.
const GgufValue& typed(const GgufFile& f, std::string_view key, bool array,
                       bool ok_type(GgufValueType), const char* expected) {
  const GgufValue* v = f.find(key);
  if (v == nullptr)
    fail(concat(f.path(), ": metadata '", key, "'"), concat("missing (expected ", expected, ")"));
  const bool is_array = v->type == GgufValueType::array;
  const std::string got =
      is_array
          ? concat("array of ", gguf_value_type_name(static_cast<std::uint32_t>(v->element_type)))
          : gguf_value_type_name(static_cast<std::uint32_t>(v->type));
  check(is_array == array && ok_type(is_array ? v->element_type : v->type),
        concat(f.path(), ": metadata '", key, "'"), expected, got);
  return *v;
}

bool string_type(GgufValueType t) { return t == GgufValueType::string; }
bool integer_type(GgufValueType t) { return is_integer(t); }
bool float_type(GgufValueType t) {
  return t == GgufValueType::float32 || t == GgufValueType::float64;
}
bool bool_type(GgufValueType t) { return t == GgufValueType::boolean; }

}  // namespace

std::string GgufFile::get_string(std::string_view key) const {
  return typed(*this, key, false, string_type, "a string").text;
}

std::uint64_t GgufFile::get_uint(std::string_view key) const {
  const GgufValue& v = typed(*this, key, false, integer_type, "an unsigned integer");
  if (is_signed(v.type))
    check(v.integer >= 0, concat(path_, ": metadata '", key, "'"), "a value >= 0", v.integer);
  return static_cast<std::uint64_t>(v.integer);
}

double GgufFile::get_float(std::string_view key) const {
  return typed(*this, key, false, float_type, "a float").real;
}

bool GgufFile::get_bool(std::string_view key) const {
  return typed(*this, key, false, bool_type, "a bool").integer != 0;
}

const std::vector<std::string>& GgufFile::get_string_array(std::string_view key) const {
  return typed(*this, key, true, string_type, "an array of strings").strings;
}

std::vector<std::int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = typed(*this, key, true, integer_type, "an array of integers");
  const std::uint64_t size = scalar_size(v.element_type);
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(v.count));
  for (std::uint64_t i = 0; i < v.count; ++i) {
    const std::int64_t x = integer_value(v.element_type, v.raw.data() + i * size);
    check(v.element_type != GgufValueType::uint64 || x >= 0,
          concat(path_, ": metadata '", key, "'[", i, "]"), "a uint64 below 2^63",
          static_cast<std::uint64_t>(x));
    out.push_back(x);
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = typed(*this, key, true, float_type, "an array of floats");
  const std::uint64_t size = scalar_size(v.element_type);
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(v.count));
  for (std::uint64_t i = 0; i < v.count; ++i)
    out.push_back(float_value(v.element_type, v.raw.data() + i * size));
  return out;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

GgufTensorView GgufFile::view(const GgufTensorInfo& info) const {
  return {&info, {data_ + info.offset, static_cast<std::size_t>(info.bytes)}};
}

GgufTensorView GgufFile::view(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (t == nullptr) fail(path_, concat("tensor '", name, "': missing"));
  return view(*t);
}

Tensor GgufFile::load_f32(std::string_view name) const {
  const GgufTensorView v = view(name);
  const GgufTensorInfo& t = *v.info;
  check(ggml_type_traits(t.type).dequantizable, concat(path_, ": tensor '", name, "' type"),
        "F32, F16, Q8_0 or Q4_1", ggml_type_name(t.type));
  Tensor out(DType::f32, t.shape());
  dequantize(t.type, v.bytes, t.numel, out.data<float>());
  return out;
}

Tensor GgufFile::load_f32(std::string_view name,
                          const std::vector<std::int64_t>& expected_shape) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (t == nullptr)
    fail(path_, concat("tensor '", name, "': missing (expected shape ",
                       shape_string(expected_shape), ")"));
  check(t->shape() == expected_shape, concat(path_, ": tensor '", name, "' shape"),
        shape_string(expected_shape), shape_string(t->shape()));
  return load_f32(name);
}

}  // namespace headcount
