#include "core/train/captioning.hpp"

#include <algorithm>

namespace joule {

void greedy_captions(ExecSpace const& space, Model& model, HostBatch const& batch, std::vector<std::int32_t>& tokens,
                     std::vector<char>& done) {
  compat::ScopedRegion region(space, "greedy_captions");
  int const B = model.batch(), T = model.config().text_len;
  model.set_batch(space, batch, /*n_valid=*/0);  // the images; no targets
  tokens.assign(std::size_t(B) * T, kTokenPad);
  done.assign(std::size_t(B), 0);
  for (int b = 0; b < B; ++b) tokens[std::size_t(b) * T] = kTokenBos;
  for (int j = 0; j + 1 < T; ++j) {
    model.set_tokens(space, tokens.data());
    model.forward(space);
    auto const& picks = model.next_tokens(space, j);
    bool all_done = true;
    for (int b = 0; b < B; ++b) {
      if (done[b]) continue;
      int const next = picks(b);
      tokens[std::size_t(b) * T + j + 1] = next;
      done[b] = next == kTokenEos || next == kTokenPad;
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
}

}  // namespace joule
