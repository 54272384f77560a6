// The build's facts (build_facts.hpp). Compile-time facts come from the headers this unit was
// compiled against and from CMake (build_facts_config.hpp, made by apps/CMakeLists.txt: the commit,
// the host target, Kokkos-Kernels; only this unit includes it, so a new commit recompiles nothing
// else); run-time versions from the libraries themselves, where one can say without being started.
#include "build_facts.hpp"
#include "build_facts_config.hpp"

#include <Kokkos_Core.hpp>
#include <H5public.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#if JOULE_BUILD_WITH_MPI
#include <mpi.h>
#endif
#if defined(JOULE_HAVE_NCCL)
#include <nccl.h>
#endif
#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#if __has_include(<cublas_api.h>)
#include <cublas_api.h>
#endif
#endif

#include <string>
#include <vector>

#ifndef JOULE_VERSION
#error "JOULE_VERSION: apps/CMakeLists.txt defines it"
#endif

namespace joule::apps {
namespace {

// The instruction sets the compiler enabled for this unit (the host target's flags, or a
// toolchain's): what the flags did, not what they were.
std::string fact_instruction_sets() {
  std::vector<char const*> sets;
#if defined(__x86_64__)
  char const* arch = "x86-64";
#if defined(__AVX512F__)
  sets.push_back("AVX-512F");
#endif
#if defined(__AVX2__)
  sets.push_back("AVX2");
#endif
#if defined(__FMA__)
  sets.push_back("FMA");
#endif
#if defined(__AVX__) && !defined(__AVX2__)
  sets.push_back("AVX");
#endif
#if !defined(__AVX__) && defined(__SSE2__)
  sets.push_back("SSE2");
#endif
#elif defined(__aarch64__)
  char const* arch = "aarch64";
#if defined(__ARM_FEATURE_SVE2)
  sets.push_back("SVE2");
#endif
#if defined(__ARM_FEATURE_SVE)
  sets.push_back("SVE");
#endif
#if defined(__ARM_NEON)
  sets.push_back("NEON");
#endif
#else
  char const* arch = "this CPU";
#endif
  return fmt::format("{} with {}", arch, sets.empty() ? std::string("no vector extension named") : fmt::format("{}", fmt::join(sets, ", ")));
}

std::string fact_compiler() {
  std::string host;
#if defined(__clang__)
  host = fmt::format("Clang {}.{}.{}", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
  host = fmt::format("GCC {}.{}.{}", __GNUC__, __GNUC_MINOR__, __GNUC_PATCHLEVEL__);
#else
  host = "an unnamed compiler";
#endif
#if defined(__CUDACC_VER_MAJOR__)
  host += fmt::format(" under nvcc {}.{}.{}", __CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__, __CUDACC_VER_BUILD__);
#endif
  return fmt::format("{}, C++{}", host, __cplusplus / 100 % 100);
}

std::string fact_kokkos() {
  std::string devices;
  auto const add = [&devices](char const* name) { devices += (devices.empty() ? "" : ", ") + std::string(name); };
#if defined(KOKKOS_ENABLE_CUDA)
  add("Cuda");
#endif
#if defined(KOKKOS_ENABLE_HIP)
  add("HIP");
#endif
#if defined(KOKKOS_ENABLE_SYCL)
  add("SYCL");
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
  add("OpenMP");
#endif
#if defined(KOKKOS_ENABLE_THREADS)
  add("Threads");
#endif
#if defined(KOKKOS_ENABLE_HPX)
  add("HPX");
#endif
#if defined(KOKKOS_ENABLE_SERIAL)
  add("Serial");
#endif
  std::string arch;
#if defined(KOKKOS_ARCH_ARMV9_GRACE)
  arch += ", ARMV9_GRACE";
#endif
#if defined(KOKKOS_ARCH_HOPPER90)
  arch += ", HOPPER90";
#endif
#if defined(KOKKOS_ARCH_NATIVE)
  arch += ", NATIVE";
#endif
  return fmt::format("{}.{}.{} (devices: {}{})", KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100,
                     devices, arch.empty() ? "" : "; architectures:" + arch.substr(1));
}

std::string fact_mpi() {
#if JOULE_BUILD_WITH_MPI
#if defined(OMPI_MAJOR_VERSION)
  std::string const built = fmt::format("Open MPI {}.{}.{}", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
  std::string const built = fmt::format("MPICH {}", MPICH_VERSION);  // Cray MPICH and MVAPICH say so at run time
#elif defined(I_MPI_VERSION)
  std::string const built = fmt::format("Intel MPI {}", I_MPI_VERSION);
#else
  std::string const built = "an MPI";
#endif
  // Allowed before MPI_Init (MPI 3.0): the library the loader found, which may not be the one above.
  char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  std::string loaded = "not told";
  if (MPI_Get_library_version(library, &length) == MPI_SUCCESS && length > 0) {
    loaded.assign(library, static_cast<std::size_t>(length));
    loaded = loaded.substr(0, loaded.find_first_of("\r\n,"));  // "Open MPI v4.1.4" of a longer text
    while (!loaded.empty() && (loaded.back() == ' ' || loaded.back() == '\0')) loaded.pop_back();
  }
  return fmt::format("{}, MPI {}.{} (loaded: {})", built, MPI_VERSION, MPI_SUBVERSION, loaded);
#else
  return "none (built with JOULE_WITH_MPI=OFF: one process per job)";
#endif
}

std::string fact_nccl() {
#if defined(JOULE_HAVE_NCCL)
  int code = 0;
  std::string loaded = "not told";
  if (ncclGetVersion(&code) == ncclSuccess && code > 0) {  // 2.9 on: major*10000 + minor*100 + patch
    loaded = code >= 10000 ? fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
                           : fmt::format("{}.{}.{}", code / 1000, code / 100 % 10, code % 100);
  }
  return fmt::format("{}.{}.{} (loaded: {})", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, loaded);
#elif defined(KOKKOS_ENABLE_CUDA)
  return "not in this build (NCCL was not found, or JOULE_WITH_NCCL=OFF): GPU collectives go through MPI";
#else
  return "not in this build (no CUDA)";
#endif
}

std::string fact_hdf5() {
  unsigned major = 0, minor = 0, release = 0;
  std::string loaded = "not told";
  if (H5get_libversion(&major, &minor, &release) >= 0) loaded = fmt::format("{}.{}.{}", major, minor, release);
  return fmt::format("{}.{}.{} (loaded: {})", H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE, loaded);
}

std::string fact_cuda() {
#if defined(KOKKOS_ENABLE_CUDA)
  auto const version = [](int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); };
  int runtime = 0, driver = 0;
  std::string const loaded_runtime = cudaRuntimeGetVersion(&runtime) == cudaSuccess ? version(runtime) : "not told";
  // 0 where no driver is installed (a login node without GPUs); it starts no context.
  std::string const loaded_driver =
      cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 ? version(driver) : "none found";
  std::string text = fmt::format("runtime {} (loaded: {}), driver {}", version(CUDART_VERSION), loaded_runtime, loaded_driver);
#if defined(CUBLAS_VER_MAJOR)
  text += fmt::format("; cuBLAS {}.{}.{}", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
#endif
  return text;
#else
  return "not in this build (Kokkos has no CUDA backend)";
#endif
}

}  // namespace

std::vector<BuildFact> build_facts() {
  return {
      {"host target", fmt::format("{}; compiled for {}", JOULE_HOST_TARGET_TEXT, fact_instruction_sets())},
      {"compiler", fact_compiler()},
      {"Kokkos", fact_kokkos()},
      {"Kokkos-Kernels", JOULE_KOKKOS_KERNELS_TEXT},
      {"MPI", fact_mpi()},
      {"NCCL", fact_nccl()},
      {"HDF5", fact_hdf5()},
      {"CUDA", fact_cuda()},
      // joule's kernels are its own Kokkos code; its GEMMs call cuBLAS (or Kokkos-Kernels on it).
      {"cuDNN", "not used by joule"},
  };
}

std::string build_facts_text() {
  std::string text = fmt::format("joule {} (commit {})", JOULE_VERSION, JOULE_BUILD_COMMIT);
  for (auto const& fact : build_facts()) text += fmt::format("\n  {}: {}", fact.name, fact.value);
  return text;
}

}  // namespace joule::apps
