// UTF-8 checks shared by the code that takes names from users (module registration, checkpoint
// files): where a string stops being well-formed UTF-8, and how to show it in a message.
// Internal to tgrad (not installed).
#pragma once

#include <cstddef>
#include <string>

namespace tgrad::detail {

// The offset of the first byte of `s` that does not start a well-formed UTF-8 sequence
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or npos.
size_t utf8_error_at(const std::string& s);

// `s` with every byte outside printable ASCII (and the backslash) written as \xNN, so that a
// message can show a name that is not valid UTF-8.
std::string printable(const std::string& s);

}  // namespace tgrad::detail
