// Checks of the errors dspark reports: their kind and what their message names.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include "dspark/core/error.h"

namespace dspark::test {

// The message of the dspark::Error that `f` throws, after checking its kind; a test failure and ""
// when it throws none.
std::string error_of(const std::function<void()>& f, ErrorKind kind);

// Expects every one of `parts` in `msg`.
void expect_mentions(const std::string& msg, std::initializer_list<const char*> parts);

}  // namespace dspark::test
