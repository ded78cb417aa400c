// The library's version: CMakeLists.txt's project(VERSION), compiled into the library so a
// program (the CLI's --version, the Python package's __version__) reports what it linked.
#pragma once

namespace headcount {

// "MAJOR.MINOR.PATCH", e.g. "0.1.0".
const char* version();

}  // namespace headcount
