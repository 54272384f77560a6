#pragma once
// Companion of the declaration-only KokkosBlas3_gemm.hpp (CUDA compile check only).
#define KOKKOSKERNELS_VERSION 40501
