// The version string, defined on this one file by CMakeLists.txt (HEADCOUNT_VERSION), so a
// version bump recompiles one file and every consumer reads the same string.
#include "headcount/version.h"

#ifndef HEADCOUNT_VERSION
#error "HEADCOUNT_VERSION must be defined by the build (CMakeLists.txt)"
#endif

namespace headcount {

const char* version() { return HEADCOUNT_VERSION; }

}  // namespace headcount
