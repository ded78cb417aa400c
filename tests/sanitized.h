// HEADCOUNT_TEST_SANITIZED: 1 when this test binary runs under AddressSanitizer or
// ThreadSanitizer, so the tests that sweep a whole data set can take a sample of it there (the
// Release build still runs them whole). GCC announces the sanitizers with __SANITIZE_ADDRESS__ /
// __SANITIZE_THREAD__; clang only through __has_feature, which GCC 12 lacks.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HEADCOUNT_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HEADCOUNT_TEST_SANITIZED 1
#endif
#endif
#ifndef HEADCOUNT_TEST_SANITIZED
#define HEADCOUNT_TEST_SANITIZED 0
#endif
