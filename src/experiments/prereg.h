// Rule R8 of the claims protocol (docs/what-the-split-buys.md): an experiment's JSON names the
// pre-registration file it ran under and that file's git blob hash, so a reader can check the
// rule was committed before the runs (`git log --find-object=<blob>`). A run whose file is
// missing is labelled "not pre-registered".
#pragma once

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace headcount::experiments {

// SHA-1 of `bytes`, 40 lowercase hex digits (FIPS 180-4; used only as git's object name).
std::string sha1_hex(std::string_view bytes);
// git's blob name of a file's content: SHA-1 of "blob <size>\0" followed by the content, the
// hash `git hash-object FILE` prints.
std::string git_blob_hash(std::string_view content);

// {"path": relative, "blob": hash, "preregistered": true} when source_dir/relative can be read,
// else {"path": relative, "blob": null, "preregistered": false, "why": ...}. An empty `relative`
// (an experiment of the earlier designs) gives preregistered false with its reason.
nlohmann::json prereg_record(const std::string& source_dir, const std::string& relative);

}  // namespace headcount::experiments
