#pragma once
// Patch embedding for images and video frames: patchify, then a Linear layer.
//   images  [frames, C_in, H, W]        (a video batch [B, F, C, H, W] is B*F frames)
//   patches [frames * (H/P) * (W/P), C_in * P * P]
//   out     [frames * (H/P) * (W/P), C]  (= the image tokens, row = frame * n_patches + patch)
#include "core/detail/launch_shape.hpp"
#include "core/ops/linear.hpp"
#include "core/tensor.hpp"

#include <string>

namespace joule {

// Patch embedding. images: [frames, C_in, H, W] (a video is B*F frames), patch size P.
// patches: [frames * (H/P) * (W/P), C_in * P * P], patch order row-major over the patch grid,
// features ordered (channel, py, px) so that weight[C, C_in*P*P] is a Conv2d weight reshaped.
template <class ExecutionSpace, class Patches, class Images>
void patchify(ExecutionSpace const& space, Patches const& patches, Images const& images,
              int patch) {
  int const frames = images.extent(0), cin = images.extent(1), h = images.extent(2),
            w = images.extent(3);
  require(patch > 0 && h % patch == 0 && w % patch == 0, "patchify",
          "image " + std::to_string(h) + "x" + std::to_string(w) +
              " is not divisible by patch size " + std::to_string(patch));
  int const gh = h / patch, gw = w / patch, feat = cin * patch * patch;
  require(int(patches.extent(0)) == frames * gh * gw && int(patches.extent(1)) == feat, "patchify",
          "patches " + shape_of(patches) + " for images " + shape_of(images));
  int const read = sizeof(typename Images::value_type);
  auto const work = detail::streaming_work(double(frames) * gh * gw * feat, read,
                                           sizeof(typename Patches::value_type), 0, read);
  detail::for_each_element(space, "patchify", work, frames * gh * gw, feat, KOKKOS_LAMBDA(int row, int f) {
    int const frame = row / (gh * gw), p = row % (gh * gw), gy = p / gw, gx = p % gw;
    int const ch = f / (patch * patch), py = (f / patch) % patch, px = f % patch;
    patches(row, f) = narrow<typename Patches::non_const_value_type>(widen(images(frame, ch, gy * patch + py, gx * patch + px)));
  });
}

// The adjoint of patchify: d_images (overwritten) from d_patches. Patches do not overlap, so this
// is a permutation: each image element receives exactly one value.
template <class ExecutionSpace, class DImages, class DPatches>
void unpatchify(ExecutionSpace const& space, DImages const& d_images, DPatches const& d_patches,
                int patch) {
  int const frames = d_images.extent(0), cin = d_images.extent(1), h = d_images.extent(2),
            w = d_images.extent(3);
  int const gh = h / patch, gw = w / patch;
  require(int(d_patches.extent(0)) == frames * gh * gw &&
              int(d_patches.extent(1)) == cin * patch * patch,
          "unpatchify", "d_patches " + shape_of(d_patches) + " for images " + shape_of(d_images));
  int const read = sizeof(typename DPatches::value_type);
  detail::note_launch("unpatchify",
                      detail::streaming_work(double(frames) * cin * h * w, read, sizeof(typename DImages::value_type), 0, read),
                      long(frames) * cin * h * w);
  Kokkos::parallel_for(
      label("unpatchify"),
      Kokkos::MDRangePolicy<ExecutionSpace, Kokkos::Rank<4>>(space, {0, 0, 0, 0},
                                                             {frames, cin, h, w}),
      KOKKOS_LAMBDA(int frame, int ch, int y, int x) {
        int const row = frame * gh * gw + (y / patch) * gw + x / patch;
        int const f = (ch * patch + y % patch) * patch + x % patch;
        d_images(frame, ch, y, x) = narrow<typename DImages::non_const_value_type>(widen(d_patches(row, f)));
      });
}

// patches = patchify(images);  out = patches · weight^T + bias.  `patches` is kept for the backward.
// bf16 patches round the (fp32) pixels once; `work`: linear_forward's (a Bf16GemmWorkspace for bf16).
template <class ExecutionSpace, class Out, class Patches, class Images, class Weight, class Bias, class... Work>
void patch_embed_forward(ExecutionSpace const& space, Out const& out, Patches const& patches,
                         Images const& images, Weight const& weight, Bias const& bias, int patch,
                         Work const&... work) {
  patchify(space, patches, images, patch);
  linear_forward(space, out, patches, weight, bias, work...);
}

// d_weight, d_bias accumulate. d_images (overwritten) is optional: pass empty views to skip it
// (pixels are data, not parameters); d_patches is the workspace for it. `work`: the bias sum's
// (linear_backward).
template <class ExecutionSpace, class DImages, class DPatches, class DWeight, class DBias,
          class DOut, class Patches, class Weight, class... Work>
void patch_embed_backward(ExecutionSpace const& space, DImages const& d_images,
                          DPatches const& d_patches, DWeight const& d_weight, DBias const& d_bias,
                          DOut const& d_out, Patches const& patches, Weight const& weight,
                          int patch, Work const&... work) {
  if (d_images.data() == nullptr) {  // no pixel gradient: skip the d_patches product too
    linear_backward(space, DPatches(), d_weight, d_bias, d_out, patches, weight, work...);
    return;
  }
  linear_backward(space, d_patches, d_weight, d_bias, d_out, patches, weight, work...);
  unpatchify(space, d_images, d_patches, patch);
}

}  // namespace joule
