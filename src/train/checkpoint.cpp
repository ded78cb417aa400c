// Checkpoints (see checkpoint.h for the one-file design): save = check the views, write the
// safetensors file with the state in its metadata, then the JSON copy; load = open and
// validate the safetensors file, parse the state, copy each tensor out in file order.
#include "headcount/train/checkpoint.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>

#include "headcount/error.h"
#include "headcount/safetensors.h"
#include "io/atomic_file.h"

namespace headcount::train {

using detail::concat;

namespace {
constexpr const char* kFormatKey = "headcount.format";
constexpr const char* kFormat = "checkpoint-1";
constexpr const char* kStateKey = "headcount.state";
constexpr const char* kChecksumKey = "headcount.checksum";

// A 64-bit checksum over what a checkpoint means (the state text, each tensor's name, shape and
// bytes, in file order), so a corrupted byte anywhere, data region included, fails the load
// instead of resuming from wrong weights. Not cryptographic: it guards against disks and
// truncation, not adversaries. Eight bytes per multiply-rotate step, so it costs a few percent
// of the write.
class Checksum {
 public:
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::uint64_t h = kSeed ^ (bytes * kPrime2);
    for (; bytes >= 8; p += 8, bytes -= 8) {
      std::uint64_t word;
      std::memcpy(&word, p, 8);
      h = rotate(h ^ (word * kPrime1), 31) * kPrime2;
    }
    std::uint64_t tail = 0;
    for (std::size_t i = 0; i < bytes; ++i) tail |= static_cast<std::uint64_t>(p[i]) << (8 * i);
    h = rotate(h ^ (tail * kPrime1), 31) * kPrime2;
    h ^= h >> 33;
    value_ = rotate(value_ ^ h, 27) * kPrime1 + kPrime2;
  }
  void add(const std::string& text) { add(text.data(), text.size()); }
  std::string hex() const {
    static const char* kDigits = "0123456789abcdef";
    std::string out(16, '0');
    for (int i = 0; i < 16; ++i) out[15 - i] = kDigits[(value_ >> (4 * i)) & 0xfu];
    return out;
  }

 private:
  static std::uint64_t rotate(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
  static constexpr std::uint64_t kSeed = 0x9e3779b97f4a7c15ull;
  static constexpr std::uint64_t kPrime1 = 0x9e3779b185ebca87ull;  // xxHash64's primes
  static constexpr std::uint64_t kPrime2 = 0xc2b2ae3d27d4eb4full;
  std::uint64_t value_ = kSeed;
};

void add_tensor(Checksum& sum, const std::string& name, const std::vector<std::int64_t>& shape,
                const void* data, std::size_t bytes) {
  sum.add(name);
  sum.add(shape.data(), shape.size() * sizeof(std::int64_t));
  sum.add(data, bytes);
}
}  // namespace

std::string checkpoint_tensors_path(const std::string& dir, const std::string& stem) {
  return (std::filesystem::path(dir) / (stem + ".safetensors")).string();
}
std::string checkpoint_state_path(const std::string& dir, const std::string& stem) {
  return (std::filesystem::path(dir) / (stem + ".json")).string();
}

void save_checkpoint(const std::string& dir, const std::string& stem,
                     const std::vector<NamedTensor>& tensors, const nlohmann::json& state) {
  check(!stem.empty() && stem.find('/') == std::string::npos, "checkpoint stem",
        "a file name without '/'", concat("'", stem, "'"));
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  check(!error && std::filesystem::is_directory(dir), "checkpoint directory",
        "a directory that can be created", concat(dir, " (", error.message(), ")"));

  const std::string path = checkpoint_tensors_path(dir, stem);
  const std::string state_text = state.dump();
  Checksum sum;
  sum.add(state_text);
  std::vector<SafetensorsTensor> entries;
  entries.reserve(tensors.size());
  for (const NamedTensor& t : tensors) {
    check(t.view.dtype == DType::f32, concat(path, ": tensor '", t.name, "' dtype"), "f32",
          dtype_name(t.view.dtype));
    check(!t.view.empty() && t.view.is_contiguous(), concat(path, ": tensor '", t.name, "'"),
          "a non-empty contiguous view",
          t.view.empty() ? "an empty view" : "strides " + t.view.strides_string());
    entries.push_back({.name = t.name, .view = t.view});
    const std::vector<std::int64_t> shape(t.view.shape.begin(), t.view.shape.begin() + t.view.rank);
    add_tensor(sum, t.name, shape, t.view.data,
               static_cast<std::size_t>(t.view.numel()) * sizeof(float));
  }
  write_safetensors(path, entries,
                    {{kFormatKey, kFormat}, {kStateKey, state_text}, {kChecksumKey, sum.hex()}});
  io::write_file_atomically(checkpoint_state_path(dir, stem), state.dump(2) + "\n");
}

LoadedCheckpoint load_checkpoint(const std::string& dir, const std::string& stem) {
  const std::string path = checkpoint_tensors_path(dir, stem);
  const SafetensorsFile file = SafetensorsFile::open(path);

  const auto& metadata = file.metadata();
  const auto format = metadata.find(kFormatKey);
  check(format != metadata.end() && format->second == kFormat,
        path + ": __metadata__." + kFormatKey, concat("'", kFormat, "' (a headcount checkpoint)"),
        format == metadata.end() ? std::string("nothing") : concat("'", format->second, "'"));
  const auto state_text = metadata.find(kStateKey);
  check(state_text != metadata.end(), path + ": __metadata__." + kStateKey, "the run's JSON state",
        "nothing");

  LoadedCheckpoint loaded;
  loaded.state = nlohmann::json::parse(state_text->second, nullptr, /*allow_exceptions=*/false);
  check(!loaded.state.is_discarded(), path + ": __metadata__." + kStateKey, "valid JSON",
        "malformed JSON");

  // entries() is sorted by name; the data offsets give the order the tensors were written in.
  std::vector<const SafetensorsEntry*> in_file_order;
  for (const SafetensorsEntry& e : file.entries()) in_file_order.push_back(&e);
  std::sort(in_file_order.begin(), in_file_order.end(), [](const auto* a, const auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  Checksum sum;
  sum.add(state_text->second);
  for (const SafetensorsEntry* e : in_file_order) {
    check(e->dtype == "F32", concat(path, ": tensor '", e->name, "' dtype"), "F32", e->dtype);
    check(!e->shape.empty(), concat(path, ": tensor '", e->name, "' shape"), "rank >= 1",
          "a scalar");
    const auto bytes = file.bytes(*e);
    add_tensor(sum, e->name, e->shape, bytes.data(), bytes.size());
    loaded.tensors.emplace_back(e->name, file.load_f32(e->name));
  }
  const auto checksum = metadata.find(kChecksumKey);
  check(checksum != metadata.end() && checksum->second == sum.hex(),
        path + ": __metadata__." + kChecksumKey,
        concat("the checksum of the contents, ", sum.hex(), " (a corrupted file otherwise)"),
        checksum == metadata.end() ? std::string("nothing") : checksum->second);
  return loaded;
}

void restore_tensors(const LoadedCheckpoint& checkpoint, const std::vector<NamedTensor>& into) {
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, tensor] : checkpoint.tensors) by_name[name] = &tensor;
  // Check everything before copying anything: a failed restore leaves `into` untouched.
  for (const NamedTensor& t : into) {
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) fail(concat("checkpoint tensor '", t.name, "'"), "missing");
    const std::vector<std::int64_t> shape(t.view.shape.begin(), t.view.shape.begin() + t.view.rank);
    check(it->second->shape() == shape, concat("checkpoint tensor '", t.name, "' shape"),
          shape_string(shape), shape_string(it->second->shape()));
    check(t.view.dtype == DType::f32 && t.view.is_contiguous(), concat("tensor '", t.name, "'"),
          "an f32 contiguous destination",
          concat(dtype_name(t.view.dtype), " strides ", t.view.strides_string()));
  }
  for (const NamedTensor& t : into) {
    const Tensor& source = *by_name.at(t.name);
    std::memcpy(t.view.data, source.data<float>(), source.bytes());
  }
}

}  // namespace headcount::train
