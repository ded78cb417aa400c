// `headcount attention`'s text options that CLI11 does not parse itself: --scale and
// --key-lengths. They live apart from the command so fuzz/fuzz_attention_options.cpp can call
// exactly what the CLI calls.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace headcount::cli {

// "" -> none (the kernel's default 1/sqrt(head_dim)); otherwise a finite number that stays
// finite as a float. Error "--scale: expected a finite number, got <text>".
std::optional<float> parse_scale(const std::string& text);

// "" -> none; "3,5" -> {3, 5}. Error "--key-lengths: expected comma-separated integers, got
// <text>". Their range (0..kv_len, one per batch element) is validate()'s to check.
std::vector<std::int64_t> parse_key_lengths(const std::string& text);

}  // namespace headcount::cli
