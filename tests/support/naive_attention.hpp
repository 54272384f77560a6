#pragma once
// Attention as its definition: the whole softmax matrix in double (core/ops/attention.hpp's
// operator, its mask rule and its lse), forward and backward, for the attention tests of every
// precision and path.
#include <algorithm>
#include <cmath>
#include <vector>

namespace joule::test {

struct NaiveAttention {
  std::vector<double> out, lse, d_qkv;
};

// Reference: qkv [B*S, 3C] row-major, allowed(i, j) given by the open prefix p.
NaiveAttention naive_attention(std::vector<double> const& qkv, std::vector<double> const& d_out,
                               int batch, int seq, int heads, int hd, int open_prefix) {
  int const c = heads * hd, stride = 3 * c;
  NaiveAttention r;
  r.out.assign(batch * seq * c, 0);
  r.lse.assign(batch * heads * seq, 0);
  r.d_qkv.assign(qkv.size(), 0);
  double const scale = 1.0 / std::sqrt(double(hd));
  auto allowed = [&](int i, int j) { return j <= i || j < open_prefix; };
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h) {
      auto q = [&](int i, int d) { return qkv[(b * seq + i) * stride + h * hd + d]; };
      auto k = [&](int j, int d) { return qkv[(b * seq + j) * stride + c + h * hd + d]; };
      auto v = [&](int j, int d) { return qkv[(b * seq + j) * stride + 2 * c + h * hd + d]; };
      auto dout = [&](int i, int d) { return d_out[(b * seq + i) * c + h * hd + d]; };
      std::vector<double> p(seq * seq, 0.0);  // the full softmax matrix
      for (int i = 0; i < seq; ++i) {
        double m = -1e300;
        for (int j = 0; j < seq; ++j)
          if (allowed(i, j)) {
            double s = 0;
            for (int d = 0; d < hd; ++d) s += q(i, d) * k(j, d);
            p[i * seq + j] = s * scale;
            m = std::max(m, s * scale);
          }
        double sum = 0;
        for (int j = 0; j < seq; ++j)
          if (allowed(i, j)) sum += std::exp(p[i * seq + j] - m);
        for (int j = 0; j < seq; ++j)
          p[i * seq + j] = allowed(i, j) ? std::exp(p[i * seq + j] - m) / sum : 0.0;
        r.lse[(b * heads + h) * seq + i] = m + std::log(sum);
        for (int d = 0; d < hd; ++d) {
          double o = 0;
          for (int j = 0; j < seq; ++j) o += p[i * seq + j] * v(j, d);
          r.out[(b * seq + i) * c + h * hd + d] = o;
        }
      }
      // dV = P^T dO; dP = dO V^T; dS = P (dP - rowsum(P dP)); dQ = dS K scale; dK = dS^T Q scale
      for (int i = 0; i < seq; ++i) {
        std::vector<double> dp(seq, 0.0);
        double row = 0;
        for (int j = 0; j < seq; ++j) {
          for (int d = 0; d < hd; ++d) dp[j] += dout(i, d) * v(j, d);
          row += p[i * seq + j] * dp[j];
        }
        for (int j = 0; j < seq; ++j) {
          double const ds = p[i * seq + j] * (dp[j] - row);
          for (int d = 0; d < hd; ++d) {
            r.d_qkv[(b * seq + i) * stride + h * hd + d] += ds * k(j, d) * scale;
            r.d_qkv[(b * seq + j) * stride + c + h * hd + d] += ds * q(i, d) * scale;
            r.d_qkv[(b * seq + j) * stride + 2 * c + h * hd + d] += p[i * seq + j] * dout(i, d);
          }
        }
      }
    }
  return r;
}

}  // namespace joule::test
