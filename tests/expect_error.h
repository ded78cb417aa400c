// expect_error(f, {parts...}): f must throw headcount::Error whose message contains every part.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "headcount/error.h"

namespace headcount::testing {

template <typename F>
void expect_error(F&& f, std::initializer_list<const char*> parts) {
  try {
    f();
    ADD_FAILURE() << "no Error thrown";
  } catch (const Error& e) {
    for (const char* part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace headcount::testing
