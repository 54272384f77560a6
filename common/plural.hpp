#pragma once
// "1 process", "2 processes": a count with its noun in the right number, for every message that
// prints a count the run chooses (one process, one trial, one sample are ordinary cases).
// Header only, standard library only.
#include <string>

namespace joule {

inline std::string counted(long long n, char const* one, char const* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace joule
