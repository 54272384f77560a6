#pragma once
// Declaration-only stand-in for Kokkos-Kernels' gemm, used by the CUDA compile check only.
// Debian's only Kokkos-Kernels (4.5) needs Kokkos 4.5, whose CUDA backend does not compile with
// CUDA 13; so for CUDA, joule's translation units are compiled against Kokkos 5.x with gemm
// declared exactly as Kokkos-Kernels 4.x declares it (the execution-space overload joule calls),
// while the host check compiles the real Kokkos-Kernels 4.5 headers.
namespace KokkosBlas {
template <class execution_space, class AViewType, class BViewType, class CViewType>
void gemm(const execution_space& space, const char transA[], const char transB[],
          typename AViewType::const_value_type& alpha, const AViewType& A, const BViewType& B,
          typename CViewType::const_value_type& beta, const CViewType& C);
}  // namespace KokkosBlas
