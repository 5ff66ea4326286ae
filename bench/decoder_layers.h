// The decoder-layer suite: transposed-conv layers of published decoders and generators, each with
// its source and the batch/length chosen, read by conv_bench (--suite decoders), the tests and
// docs/performance.md; plus the "key=value" layer spec that conv_bench --shape parses.
#pragma once

#include <array>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/conv_geometry.h"
#include "core/error.h"

namespace tgrad::bench {

// One transposed convolution. 1-D layers (dims 1) use entry 0 of each array only; 2-D layers
// hold (H, W). Weight (C_in, C_out/groups, k...), as PyTorch's ConvTranspose{1,2}d.
struct ConvLayerSpec {
  std::string id;
  std::string source;  // the model and layer it comes from, and why this batch/length
  int dims = 2;
  int64_t batch = 1, in_channels = 1, out_channels = 1, groups = 1;
  std::array<int64_t, 2> in_size{1, 1}, kernel{1, 1}, stride{1, 1}, padding{0, 0},
      output_padding{0, 0}, dilation{1, 1};
};

// The arguments conv_transpose{1,2}d would be called with, at `batch` (the spec's when < 1).
inline ConvTransposeArgs conv_args(const ConvLayerSpec& l, int64_t batch = 0) {
  ConvTransposeArgs args;
  args.fn = "conv_bench";
  args.spatial_dims = l.dims;
  args.x_shape = {batch > 0 ? batch : l.batch, l.in_channels};
  args.w_shape = {l.in_channels, l.groups > 0 ? l.out_channels / l.groups : 0};
  for (int axis = 0; axis < l.dims; ++axis) {
    args.x_shape.push_back(l.in_size[static_cast<size_t>(axis)]);
    args.w_shape.push_back(l.kernel[static_cast<size_t>(axis)]);
  }
  args.stride = l.stride;
  args.padding = l.padding;
  args.output_padding = l.output_padding;
  args.dilation = l.dilation;
  args.groups = l.groups;
  return args;
}

// 1-D and 2-D helpers that keep the table below one line of numbers per layer.
inline ConvLayerSpec layer1d(std::string id, std::string source, int64_t n, int64_t ci, int64_t co,
                             int64_t length, int64_t k, int64_t s, int64_t p, int64_t op = 0,
                             int64_t groups = 1) {
  ConvLayerSpec l;
  l.id = std::move(id);
  l.source = std::move(source);
  l.dims = 1;
  l.batch = n;
  l.in_channels = ci;
  l.out_channels = co;
  l.groups = groups;
  l.in_size = {length, 0};
  l.kernel = {k, 0};
  l.stride = {s, 0};
  l.padding = {p, 0};
  l.output_padding = {op, 0};
  l.dilation = {1, 0};
  return l;
}

inline ConvLayerSpec layer2d(std::string id, std::string source, int64_t n, int64_t ci, int64_t co,
                             int64_t hw, int64_t k, int64_t s, int64_t p, int64_t op = 0,
                             int64_t groups = 1) {
  ConvLayerSpec l;
  l.id = std::move(id);
  l.source = std::move(source);
  l.dims = 2;
  l.batch = n;
  l.in_channels = ci;
  l.out_channels = co;
  l.groups = groups;
  l.in_size = {hw, hw};
  l.kernel = {k, k};
  l.stride = {s, s};
  l.padding = {p, p};
  l.output_padding = {op, op};
  return l;
}

// The suite. Batches are the papers' training batches where they state one; lengths are the
// papers' training segments carried through the preceding layers (the rows say which).
inline const std::vector<ConvLayerSpec>& decoder_layers() {
  static const std::vector<ConvLayerSpec> layers = {
      // DCGAN generator (Radford et al. 2016, LSUN/64x64, ngf 64, nz 100), paper's batch 128.
      layer2d("dcgan_g1", "DCGAN G, latent 100 -> 512 at 4x4 (1x1 input), batch 128", 128, 100, 512,
              1, 4, 1, 0),
      layer2d("dcgan_g2", "DCGAN G, 512 -> 256, 4x4 -> 8x8, batch 128", 128, 512, 256, 4, 4, 2, 1),
      layer2d("dcgan_g3", "DCGAN G, 256 -> 128, 8x8 -> 16x16, batch 128", 128, 256, 128, 8, 4, 2,
              1),
      layer2d("dcgan_g4", "DCGAN G, 128 -> 64, 16x16 -> 32x32, batch 128", 128, 128, 64, 16, 4, 2,
              1),
      layer2d("dcgan_g5", "DCGAN G, RGB output 64 -> 3, 32x32 -> 64x64, batch 128", 128, 64, 3, 32,
              4, 2, 1),
      // U-Net (Ronneberger et al. 2015) 2x2 up-convolutions at its 572x572 tile, batch 8 chosen
      // (the paper trains one tile per step; 8 tiles keep the GPU busy as users do).
      layer2d("unet_up1", "U-Net up-conv 1024 -> 512, 28 -> 56, batch 8 (chosen)", 8, 1024, 512, 28,
              2, 2, 0),
      layer2d("unet_up2", "U-Net up-conv 512 -> 256, 52 -> 104, batch 8 (chosen)", 8, 512, 256, 52,
              2, 2, 0),
      layer2d("unet_up3", "U-Net up-conv 256 -> 128, 100 -> 200, batch 8 (chosen)", 8, 256, 128,
              100, 2, 2, 0),
      layer2d("unet_up4", "U-Net up-conv 128 -> 64, 196 -> 392, batch 8 (chosen)", 8, 128, 64, 196,
              2, 2, 0),
      // CycleGAN ResNet generator (Zhu et al. 2017) at 256x256: k3 s2 p1 op1 up-sampling.
      layer2d("cyclegan_up1", "CycleGAN G up 256 -> 128, 64 -> 128, k3 s2 p1 op1, batch 4 (chosen)",
              4, 256, 128, 64, 3, 2, 1, 1),
      layer2d("cyclegan_up2", "CycleGAN G up 128 -> 64, 128 -> 256, k3 s2 p1 op1, batch 4 (chosen)",
              4, 128, 64, 128, 3, 2, 1, 1),
      // pix2pix U-Net generator (Isola et al. 2017), outermost up-conv to RGB at 256x256.
      layer2d("pix2pix_out", "pix2pix U-Net outermost 128 -> 3 (RGB), 128 -> 256, batch 8 (chosen)",
              8, 128, 3, 128, 4, 2, 1),
      // HiFi-GAN V1 (Kong et al. 2020; MelGAN, Kumar et al. 2019, has the same 8,8,2,2 stack):
      // k = 2s, p = (k - s)/2, 8192-sample segments (32 mel frames), paper's batch 16.
      layer1d("hifigan_v1_up1", "HiFi-GAN V1 / MelGAN up x8, 512 -> 256, 32 frames, batch 16", 16,
              512, 256, 32, 16, 8, 4),
      layer1d("hifigan_v1_up2", "HiFi-GAN V1 / MelGAN up x8, 256 -> 128, 256 steps, batch 16", 16,
              256, 128, 256, 16, 8, 4),
      layer1d("hifigan_v1_up3", "HiFi-GAN V1 / MelGAN up x2, 128 -> 64, 2048 steps, batch 16", 16,
              128, 64, 2048, 4, 2, 1),
      layer1d("hifigan_v1_up4", "HiFi-GAN V1 / MelGAN up x2, 64 -> 32, 4096 steps, batch 16", 16,
              64, 32, 4096, 4, 2, 1),
      // HiFi-GAN V3: 256 initial channels, rates 8, 8, 4 with kernels 16, 16, 8.
      layer1d("hifigan_v3_up1", "HiFi-GAN V3 up x8, 256 -> 128, 32 frames, batch 16", 16, 256, 128,
              32, 16, 8, 4),
      layer1d("hifigan_v3_up2", "HiFi-GAN V3 up x8, 128 -> 64, 256 steps, batch 16", 16, 128, 64,
              256, 16, 8, 4),
      layer1d("hifigan_v3_up3", "HiFi-GAN V3 up x4, 64 -> 32, 2048 steps, batch 16", 16, 64, 32,
              2048, 8, 4, 2),
      // EnCodec 24 kHz (Defossez et al. 2022), SEANet decoder ratios 8, 5, 4, 2, k = 2s, no
      // padding (the model trims afterwards); 1 s segments = 75 frames, paper's batch 64; each
      // input length is the previous layer's trimmed output.
      layer1d("encodec_up8", "EnCodec/SEANet decoder x8, 512 -> 256, 75 frames, batch 64", 64, 512,
              256, 75, 16, 8, 0),
      layer1d("encodec_up5", "EnCodec/SEANet decoder x5, 256 -> 128, 600 steps, batch 64", 64, 256,
              128, 600, 10, 5, 0),
      layer1d("encodec_up4", "EnCodec/SEANet decoder x4, 128 -> 64, 3000 steps, batch 64", 64, 128,
              64, 3000, 8, 4, 0),
      layer1d("encodec_up2", "EnCodec/SEANet decoder x2, 64 -> 32, 12000 steps, batch 64", 64, 64,
              32, 12000, 4, 2, 0),
      // Conv-TasNet (Luo & Mesgarani 2019): N = 512 basis, L = 16, 50% overlap; 4 s at 8 kHz =
      // 3999 frames; 4 mixtures x 2 sources = batch 8 (chosen).
      layer1d("convtasnet_dec", "Conv-TasNet decoder 512 -> 1, k16 s8, 3999 frames, batch 8", 8,
              512, 1, 3999, 16, 8, 0),
      // Grouped layers: published geometries above with the channels split into groups, as
      // ResNeXt-style cardinality does; the rows are variants, not layers of the cited models.
      layer2d("grouped_g2", "DCGAN G 256 -> 128 at 8x8 with groups 2 (variant), batch 128", 128,
              256, 128, 8, 4, 2, 1, 0, 2),
      layer1d("grouped_g4", "HiFi-GAN V1 up3 128 -> 64 with groups 4 (variant), batch 16", 16, 128,
              64, 2048, 4, 2, 1, 0, 4),
      layer1d("grouped_g8", "EnCodec x4 128 -> 64 with groups 8 (variant), batch 64", 64, 128, 64,
              3000, 8, 4, 0, 0, 8),
      // Depthwise (groups = C): per-channel learned upsampling as with Caffe's bilinear-filler
      // deconvolution (group = C) used by FCN (Long et al. 2015); 21 VOC classes, and a
      // 256-channel feature map.
      layer2d("fcn_up2_dw", "FCN-style x2 upsampling, 21 classes, group = C, 16x16, batch 20", 20,
              21, 21, 16, 4, 2, 1, 0, 21),
      layer2d("depthwise_256", "depthwise x2 upsampling 256 ch at 64x64, k4 s2 p1, batch 16", 16,
              256, 256, 64, 4, 2, 1, 0, 256),
      // Stride-1 3x3 deconvolutions: DeconvNet (Noh et al. 2015), deconv5 and deconv1 blocks,
      // 224x224 input; batch 64 as in the paper for deconv5, 8 (chosen) at full resolution.
      layer2d("deconvnet_5", "DeconvNet deconv5 3x3 s1, 512 -> 512 at 14x14, batch 64", 64, 512,
              512, 14, 3, 1, 1),
      layer2d("deconvnet_1", "DeconvNet deconv1 3x3 s1, 64 -> 64 at 224x224, batch 8 (chosen)", 8,
              64, 64, 224, 3, 1, 1),
  };
  return layers;
}

// Parses a layer given as space- or comma-separated key=value tokens, e.g.
//   "n=16 ci=512 co=256 l=32 k=16 s=8 p=4"            (1-D: l = length)
//   "n=128 ci=256 co=128 h=8 w=8 k=4 s=2 p=1 op=0 g=1" (2-D: h, w; "k=3x7" gives (kH, kW))
// Keys: n, ci, co, g, l | h, w, k, s, p, op, d. Unknown keys, missing n/ci/co/l-or-h-and-w and
// malformed numbers throw tgrad::Error; the geometry itself is checked by
// make_conv_transpose_geometry(conv_args(spec)).
inline ConvLayerSpec parse_layer_spec(const std::string& text) {
  ConvLayerSpec l;
  l.id = "shape";
  l.source = text;
  bool has_n = false, has_ci = false, has_co = false, has_l = false, has_h = false, has_w = false;
  std::array<int64_t, 2> length{1, 1};
  std::string cleaned = text;
  for (char& c : cleaned) {
    if (c == ',') c = ' ';
  }
  std::istringstream in(cleaned);
  std::string token;
  auto number = [&](const std::string& key, const std::string& v) {
    char* end = nullptr;
    const long long value = std::strtoll(v.c_str(), &end, 10);
    TGRAD_CHECK(!v.empty() && end == v.c_str() + v.size(), "parse_layer_spec: ", key, "='", v,
                "' is not an integer (in \"", text, "\")");
    return static_cast<int64_t>(value);
  };
  // "3" -> (3, 3); "3x7" -> (3, 7).
  auto pair = [&](const std::string& key, const std::string& v) {
    const size_t x = v.find('x');
    if (x == std::string::npos) {
      const int64_t a = number(key, v);
      return std::array<int64_t, 2>{a, a};
    }
    return std::array<int64_t, 2>{number(key, v.substr(0, x)), number(key, v.substr(x + 1))};
  };
  while (in >> token) {
    const size_t eq = token.find('=');
    TGRAD_CHECK(eq != std::string::npos, "parse_layer_spec: token '", token,
                "' is not key=value (in \"", text, "\")");
    const std::string key = token.substr(0, eq), v = token.substr(eq + 1);
    if (key == "n") {
      l.batch = number(key, v);
      has_n = true;
    } else if (key == "ci") {
      l.in_channels = number(key, v);
      has_ci = true;
    } else if (key == "co") {
      l.out_channels = number(key, v);
      has_co = true;
    } else if (key == "g") {
      l.groups = number(key, v);
    } else if (key == "l") {
      length[0] = number(key, v);
      has_l = true;
    } else if (key == "h") {
      length[0] = number(key, v);
      has_h = true;
    } else if (key == "w") {
      length[1] = number(key, v);
      has_w = true;
    } else if (key == "k") {
      l.kernel = pair(key, v);
    } else if (key == "s") {
      l.stride = pair(key, v);
    } else if (key == "p") {
      l.padding = pair(key, v);
    } else if (key == "op") {
      l.output_padding = pair(key, v);
    } else if (key == "d") {
      l.dilation = pair(key, v);
    } else {
      TGRAD_FAIL("parse_layer_spec: unknown key '", key,
                 "' (expected n, ci, co, g, l, h, w, k, s, p, op, d) in \"", text, "\"");
    }
  }
  TGRAD_CHECK(has_n && has_ci && has_co, "parse_layer_spec: n, ci and co are required (in \"", text,
              "\")");
  TGRAD_CHECK(has_l != (has_h || has_w) && has_h == has_w,
              "parse_layer_spec: give either l (1-D) or both h and w (2-D) (in \"", text, "\")");
  l.dims = has_l ? 1 : 2;
  l.in_size = length;
  return l;
}

}  // namespace tgrad::bench
