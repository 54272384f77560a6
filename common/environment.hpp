#pragma once
// Environment variables read like configuration values. Each variable is one object of a type
// here (name, meaning, allowed values, default), defined once by the library that reads it; the
// same object checks it before Kokkos starts (core_environment::validate_environment(),
// energy::validate_environment(), called with the command's own checks by apps/environment.cpp)
// and reads it where it is used, so no second, looser parse (atoi, atof) exists. A bad value is an
// Error naming the variable, its value and what is allowed. An empty value counts as unset, as
// `VAR= joule ...` usually means.
//
// Header only, standard library only: core and energy both use it and know nothing of each other.
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace joule::environment {

// A bad environment variable or Kokkos flag: bad input, reported as a configuration error is.
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// One row of docs/configuration.md's table of environment variables.
struct Description {
  std::string name, meaning, allowed, fallback;
};

// Strict parsers: the whole text is the number, in plain decimal, nothing before or after it
// (strtol and strtod would skip leading spaces and stop at "4x"; strtod would take "nan", "inf"
// and hex). nullopt when it is not, or when it does not fit the type.
inline std::optional<long long> parse_integer(std::string_view text) {
  std::size_t const digits_at = !text.empty() && text[0] == '-' ? 1 : 0;
  if (text.size() == digits_at || text.size() > 24) return std::nullopt;
  for (std::size_t i = digits_at; i < text.size(); ++i)
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
  std::string const s(text);
  errno = 0;
  long long const value = std::strtoll(s.c_str(), nullptr, 10);
  if (errno == ERANGE) return std::nullopt;
  return value;
}

inline std::optional<double> parse_real(std::string_view text) {
  if (text.empty() || text.size() > 64) return std::nullopt;
  bool digit = false;
  for (char c : text) {
    bool const is_digit = c >= '0' && c <= '9';
    digit = digit || is_digit;
    if (!is_digit && c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E') return std::nullopt;
  }
  if (!digit || text[0] == '+' || text[0] == 'e' || text[0] == 'E') return std::nullopt;
  std::string const s(text);
  char* end = nullptr;
  double const value = std::strtod(s.c_str(), &end);
  if (*end != '\0' || !std::isfinite(value)) return std::nullopt;
  return value;
}

// The variable's text when it is set and not empty.
inline std::optional<std::string> text_of(char const* name) {
  char const* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

inline std::string integer_range_text(long long min, long long max) {
  return "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

// Whole numbers in full ("1000000", not %g's "1e+06"), others as %g.
inline std::string number_text(double value) {
  char text[32];
  if (value == std::floor(value) && std::fabs(value) < 1e15)
    std::snprintf(text, sizeof text, "%.0f", value);
  else
    std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// "NAME is 'VALUE'; allowed: ALLOWED (WHY)" (for a flag, NAME is the flag).
[[noreturn]] inline void refuse(std::string_view name, std::string_view value, std::string_view allowed,
                                std::string_view why = {}) {
  std::string message = std::string(name) + " is '" + std::string(value) + "'; allowed: " + std::string(allowed);
  if (!why.empty()) message += " (" + std::string(why) + ")";
  throw Error(message);
}

// An integer variable in [min, max].
struct Integer {
  char const* name;
  char const* meaning;
  long long min, max;
  long long fallback;
  char const* fallback_text;  // the default in words when not just the number; nullptr: the number
  char const* why = nullptr;  // why the range is what it is, said with every refusal (nullptr: nothing)

  std::string allowed() const { return integer_range_text(min, max); }
  // The value of `text`, which must be an integer in [min, max] (else an Error naming `label`).
  long long check(std::string_view text, char const* label = nullptr) const {
    auto const value = parse_integer(text);
    if (!value || *value < min || *value > max) refuse(label ? label : name, text, allowed(), why ? why : "");
    return *value;
  }
  std::optional<long long> read() const {
    auto const text = text_of(name);
    if (!text) return std::nullopt;
    return check(*text);
  }
  long long value() const { return read().value_or(fallback); }
  Description describe() const {
    return {name, meaning, allowed() + (why ? std::string(" (") + why + ")" : ""),
            fallback_text ? fallback_text : std::to_string(fallback)};
  }
};

// A finite number in [min, max] (min excluded when min_excluded), in `unit`.
struct Real {
  char const* name;
  char const* meaning;
  double min, max;
  bool min_excluded;
  double fallback;
  char const* unit;

  std::string allowed() const {
    return std::string("a number of ") + unit + " " + (min_excluded ? "> " : ">= ") + number_text(min) +
           " and <= " + number_text(max);
  }
  std::optional<double> read() const {
    auto const text = text_of(name);
    if (!text) return std::nullopt;
    auto const value = parse_real(*text);
    if (!value || *value < min || (min_excluded && *value == min) || *value > max) refuse(name, *text, allowed());
    return value;
  }
  double value() const { return read().value_or(fallback); }
  Description describe() const { return {name, meaning, allowed(), number_text(fallback) + " " + unit}; }
};

// on or off.
struct Switch {
  char const* name;
  char const* meaning;
  bool fallback;

  std::string allowed() const { return "on or off"; }
  std::optional<bool> read() const {
    auto const text = text_of(name);
    if (!text) return std::nullopt;
    if (*text != "on" && *text != "off") refuse(name, *text, allowed());
    return *text == "on";
  }
  bool value() const { return read().value_or(fallback); }
  Description describe() const { return {name, meaning, allowed(), fallback ? "on" : "off"}; }
};

// Any text (a path, a library name): nothing to refuse; described here so that the table is whole.
struct Text {
  char const* name;
  char const* meaning;
  char const* allowed;
  char const* fallback;

  std::string value() const { return text_of(name).value_or(fallback); }
  Description describe() const { return {name, meaning, allowed, fallback}; }
};

}  // namespace joule::environment
