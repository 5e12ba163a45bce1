// The message of an exception a piece of test code throws, for tests that check what a refusal
// says as well as that it happens.
#pragma once

#include <exception>
#include <string>

namespace fp4d_test {

// The message of the E that f throws ("" when it throws none; an exception of another type
// propagates, so a wrong kind of refusal fails the test).
template <class E = std::exception, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

}  // namespace fp4d_test
