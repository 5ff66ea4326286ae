// tgrad::Error, the one exception type of the public API, and TGRAD_CHECK, which builds its
// message from pieces: TGRAD_CHECK(s > 0, "conv_transpose2d: stride[0]=", s, " must be positive").
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tgrad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

// Streams a std::vector as "[a, b, c]" so that shapes print in messages.
template <class T>
void write_piece(std::ostream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i)
    os << (i ? ", " : "") << v[i];
  os << ']';
}
template <class T>
void write_piece(std::ostream& os, const T& v) {
  os << v;
}

template <class... Pieces>
std::string cat(const Pieces&... pieces) {
  std::ostringstream os;
  (write_piece(os, pieces), ...);
  return os.str();
}

}  // namespace detail
}  // namespace tgrad

#define TGRAD_CHECK(cond, ...)                                            \
  do {                                                                    \
    if (!(cond)) throw ::tgrad::Error(::tgrad::detail::cat(__VA_ARGS__)); \
  } while (0)

#define TGRAD_FAIL(...) throw ::tgrad::Error(::tgrad::detail::cat(__VA_ARGS__))
