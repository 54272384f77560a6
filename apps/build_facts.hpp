// The build's facts a site asks first (commit, host target, compiler, Kokkos, MPI, NCCL, HDF5, CUDA,
// cuDNN), in one table that `joule --version` and `joule info` both print. Each is what the build
// was compiled against, and where the library tells it, the version loaded at run time. Nothing
// here starts Kokkos, MPI or a device.
#pragma once

#include <string>
#include <vector>

namespace joule::apps {

struct BuildFact {
  std::string name;   // "HDF5"
  std::string value;  // "1.10.8 (loaded: 1.10.8)"
};

std::vector<BuildFact> build_facts();

// "joule 0.1.0 (commit abc123)" and one "  name: value" line per fact, without a final newline.
std::string build_facts_text();

}  // namespace joule::apps
