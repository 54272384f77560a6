#pragma once
// Greedy captioning with the training kernels: evaluation and `joule caption` run it.
#include "core/model/model.hpp"

#include <cstdint>
#include <vector>

namespace joule {

// Greedy captions of one batch (exactly model.batch() samples; its tokens are not read): the text
// starts as BOS and grows by the most likely next token until EOS or PAD, or text_len tokens.
// `tokens` receives [B, T] rows ([BOS, bytes..., EOS, PAD...]; decode_caption() reads them) and
// `done` is scratch: both keep their buffers between calls. One forward pass per generated
// position, stopping once every sample has ended; a step brings batch() ints to the host.
void greedy_captions(ExecSpace const& space, Model& model, HostBatch const& batch, std::vector<std::int32_t>& tokens,
                     std::vector<char>& done);

}  // namespace joule
