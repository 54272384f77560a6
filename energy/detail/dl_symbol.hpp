#pragma once
// Binding a function pointer to a symbol of a library opened with dlopen (NVML is loaded at run
// time by the energy source and by the power limiter alike).
#include <dlfcn.h>

namespace joule::energy::detail {

template <class F>
bool bind_symbol(void* handle, char const* symbol, F& f) {
  f = reinterpret_cast<F>(dlsym(handle, symbol));
  return f != nullptr;
}

}  // namespace joule::energy::detail
