// docs/errors.md is the catalogue of bad inputs and the one-line message each gets. This test
// parses its table, builds the bad inputs it names in a fresh directory, runs each command
// through the CLI and requires exit code 2 and exactly the catalogued message on stderr: a
// message that changes without the catalogue fails here.
//
// A row: | <what is wrong> | `<command>` | `<message>` |, where {dir} is the fixture directory,
// leading NAME=value words are set in the environment for that command only, and {*} in a
// message matches any text (a number that depends on the machine).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "gguf_builder.h"
#include "headcount/npy.h"
#include "headcount/tensor.h"

namespace fs = std::filesystem;
using namespace headcount;

namespace {

struct Row {
  std::string what, command, message;
  int line = 0;
};

std::string between_backticks(const std::string& cell) {
  const std::size_t a = cell.find('`'), b = cell.rfind('`');
  return a == std::string::npos || b <= a ? std::string() : cell.substr(a + 1, b - a - 1);
}

std::vector<Row> read_catalogue(const fs::path& path) {
  std::ifstream in(path);
  std::vector<Row> rows;
  std::string line;
  int number = 0;
  bool in_table = false;
  while (std::getline(in, line)) {
    ++number;
    if (line.starts_with("| Bad input")) {
      in_table = true;
      continue;
    }
    if (!in_table || line.starts_with("|---") || line.starts_with("| ---")) continue;
    if (!line.starts_with("|")) {
      in_table = false;
      continue;
    }
    // Cells split at " | " (a message may hold '|' only inside backticks without spaces).
    std::vector<std::string> cells;
    std::string rest = line.substr(1);
    std::size_t at;
    while ((at = rest.find(" | ")) != std::string::npos) {
      cells.push_back(rest.substr(0, at));
      rest = rest.substr(at + 3);
    }
    cells.push_back(rest.substr(0, rest.rfind('|')));
    if (cells.size() != 3) {
      ADD_FAILURE() << path << ":" << number << ": expected 3 cells, got " << cells.size();
      continue;
    }
    rows.push_back({cells[0], between_backticks(cells[1]), between_backticks(cells[2]), number});
  }
  return rows;
}

void put(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A .npy file as numpy writes it, with any header dict and any data.
std::string npy_bytes(const std::string& dict, const std::string& data) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string bytes = "\x93NUMPY\x01";
  bytes += '\0';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return bytes + header + data;
}

void write_f32(const fs::path& path, std::vector<std::int64_t> shape, float fill = 0.5f) {
  Tensor t(DType::f32, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = fill;
  write_npy(path.string(), t.view());
}

// A tiny BERT config (hidden 4, 2 heads, 1 layer) with one field replaced by `edit`.
std::string config_json(const std::string& key = "", const std::string& value = "") {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"vocab_size", "5"},          {"hidden_size", "4"},        {"num_hidden_layers", "1"},
      {"num_attention_heads", "2"}, {"intermediate_size", "8"},  {"max_position_embeddings", "16"},
      {"type_vocab_size", "1"},     {"layer_norm_eps", "1e-12"}, {"hidden_act", "\"gelu\""}};
  std::string text = "{";
  for (auto& [k, v] : fields) {
    if (k == key) v = value;
    text += (text.size() > 1 ? ", \"" : "\"") + k + "\": " + v;
  }
  return text + "}";
}

void model_dir(const fs::path& dir, const std::string& config, const std::string& vocab,
               const std::string& safetensors) {
  put(dir / "config.json", config);
  put(dir / "vocab.txt", vocab);
  put(dir / "model.safetensors", safetensors);
}

// Every file a catalogue row names.
void build_fixtures(const fs::path& d) {
  fs::create_directories(d);
  write_f32(d / "q.npy", {1, 2, 1, 4});
  write_f32(d / "k.npy", {1, 3, 1, 4});
  write_f32(d / "v.npy", {1, 3, 1, 4});
  write_f32(d / "nan.npy", {1, 2, 1, 4}, NAN);
  write_f32(d / "rank3.npy", {2, 2, 2});
  write_f32(d / "long_q.npy", {1, 1000000, 1, 1});
  put(d / "not_npy.npy", "hello, world\n");
  put(d / "short.npy",
      npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", std::string(8, '\0')));
  put(d / "f2.npy",
      npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", std::string(8, '\0')));
  put(d / "fortran.npy", npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
                                   std::string(16, '\0')));
  put(d / "huge.npy",
      npy_bytes(
          "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1099511627776), }",
          std::string(16, '\0')));
  put(d / "header_len.npy", std::string("\x93NUMPY\x01\x00\xff\xff{'descr'", 17));

  put(d / "sts_short.tsv", "genre\tfile\tyear\tid\t4.0\tonly one sentence\n");
  put(d / "sts_score.tsv", "genre\tfile\tyear\tid\thigh\ta\tb\n");
  put(d / "sts_empty.tsv", "");
  put(d / "sentences.txt", "a sentence\n");
  // A Llama file whose Q and K projections are K-quants (Q4_K, Q6_K; their bytes zero).
  headcount::testing::small_llama_gguf(12, 14, 256 * 144, 256 * 210)
      .write((d / "kquant.gguf").string());

  const std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n";
  fs::create_directories(d / "model_empty");
  model_dir(d / "model_eps", config_json("layer_norm_eps", "0"), vocab, "");
  model_dir(d / "model_heads", config_json("num_attention_heads", "3"), vocab, "");
  model_dir(d / "model_act", config_json("hidden_act", "\"relu\""), vocab, "");
  model_dir(d / "model_json", "{\"vocab_size\": 5,", vocab, "");
  model_dir(d / "model_modules", config_json(), vocab, "");
  put(d / "model_modules" / "modules.json", "[{\"idx\": 0, \"type\": 0}]");
  model_dir(d / "model_vocab", config_json(), "[PAD]\n[UNK]\n[SEP]\nhello\n", "");
  model_dir(d / "model_st_short", config_json(), vocab, "abc");
  std::string claims(8, '\0');
  claims[5] = 1;  // header length 2^40
  model_dir(d / "model_st_length", config_json(), vocab, claims + "{}");
  const std::string header =
      "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
  std::string st(8, '\0');
  st[0] = static_cast<char>(header.size());
  model_dir(d / "model_st_missing", config_json(), vocab, st + header + std::string(8, '\0'));
}

// Runs `command` (leading NAME=value words go to the environment) and returns stderr's first line.
CliResult run_row(const std::string& command) {
  std::istringstream words(command);
  std::string word, rest;
  std::vector<std::string> names;
  while (words >> word) {
    const std::size_t eq = word.find('=');
    if (eq == std::string::npos || word.starts_with("-")) {
      std::getline(words, rest);
      rest = word + rest;
      break;
    }
    names.push_back(word.substr(0, eq));
    ::setenv(names.back().c_str(), word.substr(eq + 1).c_str(), 1);
  }
  CliResult result = run_cli(rest);
  for (const std::string& name : names) ::unsetenv(name.c_str());
  return result;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size())
    text.replace(at, from.size(), to);
  return text;
}

// The message as a regex: literal text, {*} matching anything.
std::regex message_pattern(const std::string& message) {
  std::string pattern;
  for (std::size_t i = 0; i < message.size();) {
    if (message.compare(i, 3, "{*}") == 0) {
      pattern += ".*";
      i += 3;
      continue;
    }
    if (std::strchr("\\^$.|?*+()[]{}", message[i])) pattern += '\\';
    pattern += message[i++];
  }
  return std::regex(pattern);
}

}  // namespace

TEST(ErrorsCatalogue, EveryRowGetsItsMessage) {
  const fs::path catalogue = fs::path(HEADCOUNT_TESTDATA_DIR) / ".." / ".." / "docs" / "errors.md";
  const std::vector<Row> rows = read_catalogue(catalogue);
  ASSERT_GE(rows.size(), 20u) << "the table in " << catalogue << " went missing";
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_errors_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  build_fixtures(dir);
  for (const Row& row : rows) {
    SCOPED_TRACE("docs/errors.md:" + std::to_string(row.line) + " (" + row.what + ")");
    ASSERT_FALSE(row.command.empty() || row.message.empty());
    const CliResult r = run_row(replace_all(row.command, "{dir}", dir.string()));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    const std::string expected =
        "headcount: error: " + replace_all(row.message, "{dir}", dir.string());
    std::string first = r.err.substr(0, r.err.find('\n'));
    EXPECT_TRUE(std::regex_match(first, message_pattern(expected)))
        << "  catalogue: " << expected << "\n  actual:    " << first;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line on stderr:\n" << r.err;
  }
  fs::remove_all(dir);
}
