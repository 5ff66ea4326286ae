// The decoder-layer suite (bench/decoder_layers.h) on the CPU: every layer is a valid geometry
// with the output size PyTorch gives, the suite covers the layer kinds it promises, and the
// conv_bench --shape parser reads 1-D and 2-D specs and rejects bad ones.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "bench/decoder_layers.h"
#include "core/conv_geometry.h"
#include "core/error.h"

namespace tgrad {
namespace {

using bench::ConvLayerSpec;
using bench::decoder_layers;
using bench::parse_layer_spec;

ConvGeometry geometry(const ConvLayerSpec& l) {
  return make_conv_transpose_geometry(bench::conv_args(l));
}

const ConvLayerSpec& find_layer(const std::string& id) {
  for (const ConvLayerSpec& l : decoder_layers()) {
    if (l.id == id) return l;
  }
  throw Error("no suite layer " + id);
}

TEST(DecoderSuite, EveryLayerIsAValidNamedGeometry) {
  ASSERT_GE(decoder_layers().size(), 24u);
  std::set<std::string> ids;
  for (const ConvLayerSpec& l : decoder_layers()) {
    SCOPED_TRACE(l.id);
    EXPECT_TRUE(ids.insert(l.id).second) << "duplicate id";
    EXPECT_FALSE(l.source.empty());
    EXPECT_NO_THROW(geometry(l));
  }
}

// Output sizes from PyTorch 2.x: F.conv_transpose{1,2}d on meta tensors of each layer's shape,
// e.g. F.conv_transpose1d(torch.empty(1,512,75,device="meta"), torch.empty(512,256,16,
// device="meta"), stride=8).shape[2:] == (608,).
TEST(DecoderSuite, OutputSizesMatchPyTorch) {
  struct Expected {
    const char* id;
    int64_t h, w;  // 1-D layers: h = 1
  };
  const Expected expected[] = {
      {"dcgan_g1", 4, 4},         {"dcgan_g5", 64, 64},       {"unet_up1", 56, 56},
      {"cyclegan_up1", 128, 128}, {"hifigan_v1_up1", 1, 256}, {"hifigan_v3_up3", 1, 8192},
      {"encodec_up8", 1, 608},    {"encodec_up5", 1, 3005},   {"convtasnet_dec", 1, 32000},
      {"grouped_g8", 1, 12004},   {"fcn_up2_dw", 32, 32},     {"deconvnet_1", 224, 224},
  };
  for (const Expected& e : expected) {
    SCOPED_TRACE(e.id);
    const ConvGeometry g = geometry(find_layer(e.id));
    EXPECT_EQ(g.out_size[0], e.h);
    EXPECT_EQ(g.out_size[1], e.w);
  }
}

// The kinds of layer the suite promises (issue 15): each predicate must match some layer.
TEST(DecoderSuite, CoversThePromisedLayerKinds) {
  auto any = [](auto&& pred) {
    for (const ConvLayerSpec& l : decoder_layers()) {
      if (pred(geometry(l))) return true;
    }
    return false;
  };
  EXPECT_TRUE(any([](const ConvGeometry& g) { return g.in_size[0] == 1 && g.in_size[1] == 1; }))
      << "1x1 latent input";
  EXPECT_TRUE(any([](const ConvGeometry& g) {
    return g.spatial_dims == 2 && g.kernel[0] == 2 && g.stride[0] == 2;
  })) << "k2 s2";
  EXPECT_TRUE(any([](const ConvGeometry& g) {
    return g.kernel[0] == 3 && g.stride[0] == 2 && g.padding[0] == 1 && g.output_padding[0] == 1;
  })) << "k3 s2 p1 op1";
  for (int64_t s : {8, 5, 4, 2}) {
    EXPECT_TRUE(any([s](const ConvGeometry& g) {
      return g.spatial_dims == 1 && g.stride[1] == s && g.kernel[1] == 2 * s;
    })) << "1-D k = 2s at s = "
        << s;
  }
  EXPECT_TRUE(any([](const ConvGeometry& g) {
    return g.out_channels == 1 && g.kernel[1] == 16 && g.stride[1] == 8;
  })) << "C_out = 1, k16 s8";
  EXPECT_TRUE(any([](const ConvGeometry& g) { return g.out_channels == 3; })) << "RGB output";
  for (int64_t groups : {2, 4, 8}) {
    EXPECT_TRUE(any([groups](const ConvGeometry& g) { return g.groups == groups; }))
        << "groups " << groups;
  }
  EXPECT_TRUE(any([](const ConvGeometry& g) {
    return g.groups > 1 && g.groups == g.in_channels && g.groups == g.out_channels;
  })) << "depthwise";
  EXPECT_TRUE(any([](const ConvGeometry& g) {
    return g.spatial_dims == 2 && g.kernel[0] == 3 && g.kernel[1] == 3 && g.stride[0] == 1;
  })) << "stride-1 3x3";
}

TEST(DecoderSuite, ParsesOneAndTwoDimensionalSpecs) {
  const ConvLayerSpec a = parse_layer_spec("n=16 ci=512 co=256 l=32 k=16 s=8 p=4");
  const ConvGeometry ga = geometry(a);
  EXPECT_EQ(ga.spatial_dims, 1);
  EXPECT_EQ(ga.batch, 16);
  EXPECT_EQ(ga.out_size[1], 256);  // same layer as hifigan_v1_up1

  const ConvLayerSpec b = parse_layer_spec("n=2,ci=8,co=4,h=5,w=7,k=3x2,s=2,p=1,op=1x0,d=1,g=2");
  const ConvGeometry gb = geometry(b);
  EXPECT_EQ(gb.spatial_dims, 2);
  EXPECT_EQ(gb.groups, 2);
  EXPECT_EQ(gb.kernel[0], 3);
  EXPECT_EQ(gb.kernel[1], 2);
  // H: (5-1)*2 - 2 + 2 + 1 + 1 = 10; W: (7-1)*2 - 2 + 1 + 0 + 1 = 12.
  EXPECT_EQ(gb.out_size[0], 10);
  EXPECT_EQ(gb.out_size[1], 12);
}

TEST(DecoderSuite, RejectsBadSpecs) {
  EXPECT_THROW(parse_layer_spec("n=1 ci=2 co=2 l=4 q=3"), Error);      // unknown key
  EXPECT_THROW(parse_layer_spec("n=1 ci=2 co=two l=4"), Error);        // not an integer
  EXPECT_THROW(parse_layer_spec("n=1 ci=2 co=2 l=4 k"), Error);        // not key=value
  EXPECT_THROW(parse_layer_spec("ci=2 co=2 l=4"), Error);              // no batch
  EXPECT_THROW(parse_layer_spec("n=1 ci=2 co=2 l=4 h=3 w=3"), Error);  // both 1-D and 2-D
  EXPECT_THROW(parse_layer_spec("n=1 ci=2 co=2 h=3"), Error);          // 2-D without w
  EXPECT_THROW(parse_layer_spec("n=1 ci=2 co=2 k=3x l=4"), Error);     // half a pair
  // Parsed but not a geometry: groups must divide the channels.
  EXPECT_THROW(geometry(parse_layer_spec("n=1 ci=3 co=2 l=4 g=2")), Error);
}

}  // namespace
}  // namespace tgrad
