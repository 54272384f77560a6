// The cuBLAS handle of joule's direct GEMM path (core/detail/blas_gemm.hpp), for builds without
// Kokkos-Kernels, whose own handle serves otherwise.
#include "core/detail/blas_gemm.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
namespace joule::detail {

void check_cublas(cublasStatus_t status, char const* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("joule: ") + what + " failed (cuBLAS status " + std::to_string(int(status)) +
                             ")");
}

cublasHandle_t cublas_handle() {
  // Made once, on the first GEMM; never destroyed: the CUDA context may be gone at exit.
  static cublasHandle_t const handle = [] {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    return h;
  }();
  return handle;
}

// The cuBLAS branch instantiated here, so that every CUDA compilation of this file (the compile
// check's too, which sees Kokkos-Kernels builds) compiles it.
template <class T>
using DeviceMatrix = Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::CudaSpace>;
template void blas_gemm(Kokkos::Cuda const&, char const*, char const*, float, DeviceMatrix<float const> const&,
                        DeviceMatrix<float const> const&, float, DeviceMatrix<float> const&);
template void blas_gemm(Kokkos::Cuda const&, char const*, char const*, double, DeviceMatrix<double const> const&,
                        DeviceMatrix<double const> const&, double, DeviceMatrix<double> const&);

}  // namespace joule::detail
#endif
