#pragma once
// Which path a bf16 GEMM takes on a backend, and the scratch it needs (core/precision/gemm.hpp has
// the GEMMs): apart from the kernels, so that tensor declarations (the model's workspaces) parse no
// BLAS header.
#include "core/precision/detail/cublaslt_gemm.hpp"
#include "core/tensor.hpp"

#include <cstddef>
#include <string>
#include <type_traits>

namespace joule {

template <class ExecutionSpace>
constexpr bool bf16_gemm_on_cublaslt() {
  return compat::is_cuda_space<ExecutionSpace>();
}

// Which path a bf16 GEMM takes on ExecutionSpace, in words (joule info, the run log).
template <class ExecutionSpace>
std::string bf16_gemm_path() {
  return bf16_gemm_on_cublaslt<ExecutionSpace>() ? "cuBLASLt (bf16 tensor cores, fp32 accumulation)"
#if defined(JOULE_GEMM_DIRECT_BLAS)
                                                 : "bf16 widened to fp32, fp32 gemm on the BLAS directly";
#else
                                                 : "bf16 widened to fp32, Kokkos-Kernels fp32 gemm";
#endif
}

// The scratch a bf16 GEMM needs, allocated once by its owner for the largest GEMM it runs (a
// training step must not allocate): cuBLASLt's workspace on CUDA; elsewhere fp32 copies of A, B
// and (for a bf16 C) of C.
template <class MemorySpace>
struct Bf16GemmWorkspace {
  Kokkos::View<float*, MemorySpace> a, b, c;
  Kokkos::View<unsigned char*, MemorySpace> cublaslt;

  Bf16GemmWorkspace() = default;
  // The most elements of A, of B and of a bf16 C among the GEMMs it serves.
  template <class ExecutionSpace>
  static Bf16GemmWorkspace for_space(std::size_t a_elements, std::size_t b_elements, std::size_t c_elements,
                                     std::string const& name) {
    Bf16GemmWorkspace w;
    auto const alloc = [&](char const* part) {
      return Kokkos::view_alloc(Kokkos::WithoutInitializing, label((name + "." + part).c_str()));
    };
    if constexpr (bf16_gemm_on_cublaslt<ExecutionSpace>()) {
      w.cublaslt = decltype(w.cublaslt)(alloc("cublaslt_workspace"), detail::kCublasLtWorkspaceBytes);
    } else {
      w.a = decltype(w.a)(alloc("gemm_a_fp32"), a_elements);
      w.b = decltype(w.b)(alloc("gemm_b_fp32"), b_elements);
      w.c = decltype(w.c)(alloc("gemm_c_fp32"), c_elements);
    }
    return w;
  }
};

}  // namespace joule
