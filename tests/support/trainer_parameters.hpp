#pragma once
// Every parameter of a trainer's model, copied to the host in storage order: what the bitwise
// equality tests compare (offload, reconfigure, in-flight tuning).
#include "core/train/trainer.hpp"

#include <string>
#include <vector>

namespace joule::test {

inline std::vector<float> parameters_of(Trainer& t) {
  std::vector<float> out;
  t.model().params.for_each_group([&](std::string const&, auto const& g) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), g);
    out.insert(out.end(), h.data(), h.data() + h.span());
  });
  return out;
}

}  // namespace joule::test
