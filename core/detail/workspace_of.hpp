#pragma once
// Operators take their optional scratch as a trailing pack (a ColumnSumWorkspace for column sums,
// a Bf16GemmWorkspace for bf16 GEMMs, in any order); each part of an operator finds its own here.
#include <cstddef>
#include <type_traits>

namespace joule::detail {

template <template <class...> class W, class T>
struct is_instance_of : std::false_type {};
template <template <class...> class W, class... Args>
struct is_instance_of<W, W<Args...>> : std::true_type {};

// A pointer to the first of `work` that is a W<...>, or nullptr (of type std::nullptr_t, so that
// a caller can tell at compile time that none was given).
template <template <class...> class W>
constexpr std::nullptr_t workspace_of() {
  return nullptr;
}
template <template <class...> class W, class First, class... Rest>
constexpr auto workspace_of(First const& first, Rest const&... rest) {
  if constexpr (is_instance_of<W, First>::value)
    return &first;
  else
    return workspace_of<W>(rest...);
}

}  // namespace joule::detail
