#pragma once
// What a kernel launch must do at least, as its launch site states it for CUDA: the arithmetic it
// executes, the bytes of device memory it must read and write (each operand once, in the
// precision it is held in), and what bounds its memory-level parallelism. The roofline model
// (core/perf/roofline.hpp) turns a recorded step's launches into a predicted time on a named GPU;
// nothing here is measured. Every note_launch (launch_shape.hpp) carries one.
namespace joule::detail {

// The share of a step a launch counts in (the roofline prints time by kind).
enum class WorkKind { gemm, attention, elementwise, optimizer, copy };
inline constexpr int kWorkKinds = 5;
inline constexpr char const* kWorkKindNames[kWorkKinds] = {"gemm", "attention", "elementwise", "optimizer", "copy"};
inline constexpr char const* work_kind_name(WorkKind k) { return kWorkKindNames[int(k)]; }

struct KernelWork {
  WorkKind kind = WorkKind::elementwise;
  double flops = 0;        // floating-point operations it executes (masked products included)
  double model_flops = 0;  // of those, the model's own products (GEMMs, attention): MFU's numerator
  double bytes = 0;        // device memory read + written at least, bytes
  // Bytes one thread has in flight from memory at a time (its widest independent loads): with
  // the threads resident, the memory-level parallelism that Little's law turns into bandwidth.
  int bytes_in_flight = 4;
  bool tensor_cores = false;  // products on bf16 tensor cores (cuBLASLt); else fp32 SIMT
  // A library GEMM (cuBLAS / cuBLASLt): batch x [m, n] outputs over depth k, for its tile waves.
  long gemm_m = 0, gemm_n = 0, gemm_k = 0, gemm_batch = 0;
};

// A kernel that streams `elements` elements: `read` and `written` bytes and `flops` operations
// each, `in_flight` bytes outstanding per thread.
inline KernelWork streaming_work(double elements, double read, double written, double flops, int in_flight,
                                 WorkKind kind = WorkKind::elementwise) {
  KernelWork w;
  w.kind = kind;
  w.flops = elements * flops;
  w.bytes = elements * (read + written);
  w.bytes_in_flight = in_flight;
  return w;
}

// A copy (or permutation) of `elements` elements of `bytes` each.
inline KernelWork moved_work(double elements, int bytes) {
  return streaming_work(elements, bytes, bytes, 0, bytes, WorkKind::copy);
}

// C[m, n] = op(A) op(B) (+ beta C), `batch` times: A and B of a_bytes / b_bytes per element, C of
// c_bytes, read too when it accumulates.
inline KernelWork gemm_work(long m, long n, long k, long batch, int a_bytes, int b_bytes, int c_bytes,
                            bool reads_c, bool tensor_cores) {
  KernelWork w;
  w.kind = WorkKind::gemm;
  w.flops = w.model_flops = 2.0 * double(m) * double(n) * double(k) * double(batch);
  w.bytes = double(batch) * (double(m) * k * a_bytes + double(k) * n * b_bytes + double(m) * n * c_bytes * (reads_c ? 2 : 1));
  w.bytes_in_flight = 16;
  w.tensor_cores = tensor_cores;
  w.gemm_m = m, w.gemm_n = n, w.gemm_k = k, w.gemm_batch = batch;
  return w;
}

}  // namespace joule::detail
