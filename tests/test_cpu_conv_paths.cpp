// The CPU backend's conv decompositions (cpu/conv_transpose_cols.h) on shapes chosen to take each
// of them, in float64 and float32, against the naive loops; and the same bits for any thread
// count. The random sweep's images are too small and its channels too few to reach most of them.
// Each runs at every instruction-set level this machine runs: the choices depend on the level
// (below AVX-512 the direct kernels leave W strides 1, 2 and 4 of dgrad and the forward to
// im2col and the GEMM), so the paths named below are AVX-512's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device.h"
#include "tests/conv_cases.h"
#include "tests/test_util.h"

namespace tgrad::testing {
namespace {

struct PathCase {
  const char* path;  // what the CPU kernels do with the shape, by their constants
  ConvCase c;
};

std::vector<PathCase> path_cases() {
  return {
      // rows = 300*16: dgrad's GEMMs take 64 columns, 7 items of 3x3, then a last block of 3, and
      // its reduction is cut into 8 parts; forward and wgrad take all 10 items in 16 channel
      // blocks.
      {"several items per GEMM, last block partial",
       conv_case_from_shapes(2, {10, 24, 3, 3}, {24, 300, 4, 4}, true, {2, 2}, {1, 1}, {1, 1},
                             {1, 1}, 1)},
      // Groups 3 of 4 -> 100 channels on 2x3 images: one block of all 9 items per group, dgrad
      // in 2 parts per group, non-square everything.
      {"grouped small images", conv_case_from_shapes(2, {9, 12, 2, 3}, {12, 100, 3, 2}, false,
                                                     {2, 1}, {1, 0}, {0, 0}, {1, 2}, 3)},
      // Batch 1 on a 5x5 image with 512 rows: forward and wgrad cut into 2 channel blocks for
      // more tasks, dgrad's reduction into 2 parts.
      {"batch 1, small image, many channels",
       conv_case_from_shapes(2, {1, 64, 5, 5}, {64, 128, 2, 2}, true, {2, 2}, {0, 0}, {0, 0},
                             {1, 1}, 1)},
      // Batch 1 on a 70x70 image with 36 rows: more positions than one GEMM takes, too few
      // tasks, so forward goes by positions, its GEMMs in 17 chunks.
      {"batch 1, large image, forward by positions",
       conv_case_from_shapes(2, {1, 8, 70, 70}, {8, 4, 3, 3}, true, {1, 1}, {1, 1}, {0, 0}, {1, 1},
                             1)},
      // Batch 1 of a 1100-long sequence to 1 channel, k16 s8 (Conv-TasNet's decoder): one task
      // by the shape, so the forward goes by positions though one column block holds them all;
      // its chunks follow the threads, the bits must not.
      {"batch 1, one output channel, forward by positions",
       conv_case_from_shapes(1, {1, 40, 1100}, {40, 1, 16}, true, {8}, {4}, {0}, {1}, 1)},
      // Few rows on images of 64 positions or more (an RGB or mono output): the forward goes by
      // positions, image by image, where a block would hold several items. 2 x 3 x 3 = 18 rows
      // (AVX-512's; below it the blocked path) on 3 items of 9 x 10 with output padding and a
      // bias; 2 groups of 8 -> 1 channels, k4 s2, on 3 sequences of 70 (4 rows: every level).
      {"few rows by positions, items of 90 positions",
       conv_case_from_shapes(2, {3, 20, 9, 10}, {20, 2, 3, 3}, true, {2, 2}, {1, 1}, {1, 1}, {1, 1},
                             1)},
      {"few rows by positions, grouped 1-D",
       conv_case_from_shapes(1, {3, 16, 70}, {16, 1, 4}, false, {2}, {1}, {0}, {1}, 2)},
      // Up to two register tiles of rows by positions, whose GEMMs read x's rows in place (not
      // packed) unless they lie a multiple of 512 bytes apart: 8 x 3 = 24 rows (AVX-512's two
      // tiles; the blocked path below it); 3 x 4 = 12 rows over 260 input channels (past the
      // GEMM's 256-step run of the reduction, so the second run reads further down x) on 201
      // positions (a last, partial column tile); 2 x 4 = 8 rows on 128 positions (512 and 1024
      // bytes a row: packed).
      {"two tiles of rows by positions",
       conv_case_from_shapes(1, {2, 32, 300}, {32, 8, 3}, true, {2}, {1}, {1}, {1}, 1)},
      {"few rows by positions, reduction past one run",
       conv_case_from_shapes(1, {1, 260, 201}, {260, 3, 4}, true, {2}, {1}, {0}, {1}, 1)},
      {"few rows by positions, rows 512 bytes apart",
       conv_case_from_shapes(1, {2, 16, 128}, {16, 2, 4}, false, {2}, {1}, {0}, {1}, 1)},
      // 1x1 layers at stride 1 (cols_are_dy): dgrad's and wgrad's GEMM paths read a one-item
      // block's columns in dy itself (40 rows: too many for few rows, too few for the direct
      // dgrad; 930 positions in chunks); on 40-position sequences several items share a block
      // and go through im2col as before, 2 groups.
      {"1x1 stride 1, columns read in dy",
       conv_case_from_shapes(2, {2, 20, 30, 31}, {20, 40, 1, 1}, true, {1, 1}, {0, 0}, {0, 0},
                             {1, 1}, 1)},
      // Enough input channels (16) and rows (256) for the direct dgrad, but one item a block
      // (1056 positions) and over 1 MiB of dy an item: dgrad takes the GEMM path on dy in place
      // instead, item 1's columns from its own planes.
      {"1x1 stride 1, many rows, dgrad on dy in place",
       conv_case_from_shapes(2, {2, 16, 32, 33}, {16, 256, 1, 1}, false, {1, 1}, {0, 0}, {0, 0},
                             {1, 1}, 1)},
      // Both 1x1 cases above have forwards that write each item's product into y in place
      // (pointwise_forward); here 2 groups of 12 -> 5 with a bias on 300-step sequences, cut
      // into runs of 64 positions at 16 threads and one run at 1 (the last run partial).
      {"1x1 stride 1, grouped forward in place",
       conv_case_from_shapes(1, {3, 24, 300}, {24, 5, 1}, true, {1}, {0}, {0}, {1}, 2)},
      // wgrad of a 1x1 layer at stride 1 with up to 16 input channels reads x and dy in place
      // (pointwise_wgrad; the cases above with 12 and 16 take it too): 6 -> 7, edge tiles on both
      // sides, over 9003 positions in two slices that meet inside item 1.
      {"1x1 stride 1, wgrad in place in two slices",
       conv_case_from_shapes(1, {3, 6, 3001}, {6, 7, 1}, false, {1}, {0}, {0}, {1}, 1)},
      // One tap at other strides: a task gathers its rows of dy for each run of positions,
      // zeros where a position lands in the padding (row 0 and column 0 here) or past dy;
      // 2-D strides 3 x 2 with an output padding, then 2 groups of 32 -> 3 at stride 2 (few
      // output channels) over two slices.
      {"one tap, strides 3 x 2, wgrad on gathered runs of dy",
       conv_case_from_shapes(2, {2, 5, 9, 23}, {5, 7, 1, 1}, true, {3, 2}, {1, 2}, {1, 1}, {1, 1},
                             1)},
      {"one tap, stride 2, grouped, few outputs, two slices",
       conv_case_from_shapes(1, {2, 64, 4500}, {64, 3, 1}, false, {2}, {0}, {0}, {1}, 2)},
      // The phase dgrad takes 9 to 16 input channels on rows of 2048 or more with few outputs:
      // 12 -> 3 k8 s3 p3 over 2100 steps (two tiles of channels, the second part empty).
      {"phase dgrad, 12 input channels on a long row",
       conv_case_from_shapes(1, {2, 12, 2100}, {12, 3, 8}, true, {3}, {3}, {1}, {1}, 1)},
      // A 2-D stride 4 at k3 (one tap per phase, the phases past the taps unreached) with the
      // channels and positions the direct wgrad takes: wgrad goes to im2col at that stride and
      // the GEMM; an output padding in both dimensions.
      {"2-D stride 4, one tap per phase, wgrad on the GEMM",
       conv_case_from_shapes(2, {4, 16, 12, 11}, {16, 24, 3, 3}, true, {4, 4}, {1, 0}, {2, 1},
                             {1, 1}, 1)},
      // By stride phases with the products on the input channels' side (few input channels
      // against many output channels x taps): 2 groups of 8 -> 64 k8 s2 on 3 x 3 images, dgrad
      // and wgrad (the forward declines rows of 3); the planes' edges with output padding.
      {"phase GEMMs, grouped tiny images",
       conv_case_from_shapes(2, {3, 16, 3, 3}, {16, 64, 8, 8}, true, {2, 2}, {2, 1}, {1, 0}, {1, 1},
                             2)},
      // Dilation 2 at stride 2: every tap in odd rows and columns, so three of the four phases
      // hold the bias alone (forward) and add nothing (dgrad, wgrad).
      {"phase GEMMs, phases no tap reaches",
       conv_case_from_shapes(2, {2, 8, 4, 5}, {8, 48, 8, 8}, true, {2, 2}, {7, 7}, {0, 0}, {2, 2},
                             1)},
      // Strides 2 and 4 on rows of 37 and 19 inputs with a bias: the forward stores each phase's
      // rows a vector at a time under masks of every second or fourth lane (AVX-512), the last
      // vector partial, and dgrad and wgrad gather dy's phases by shuffles.
      {"phase GEMMs, stride 2, long rows",
       conv_case_from_shapes(1, {2, 8, 37}, {8, 64, 8}, true, {2}, {3}, {1}, {1}, 1)},
      {"phase GEMMs, stride 4, long rows",
       conv_case_from_shapes(2, {2, 8, 3, 19}, {8, 64, 8, 8}, true, {4, 4}, {2, 2}, {0, 3}, {1, 1},
                             1)},
      // Stride 3, whose phase planes' rows (24 and more wide) are copied out of dy a vector at
      // a time by every_third's shuffles: the phase GEMMs (8 -> 64 k6), the few input channels'
      // phase dgrad and wgrad (1 -> 12 k4) and the depthwise row kernels' phase planes (3
      // channels, too few for the blocks of channels).
      {"phase GEMMs, stride 3, long rows",
       conv_case_from_shapes(2, {2, 8, 3, 23}, {8, 64, 6, 6}, true, {3, 3}, {2, 1}, {0, 2}, {1, 1},
                             1)},
      {"few input channels by phases, stride 3, long rows",
       conv_case_from_shapes(2, {2, 1, 6, 30}, {1, 12, 4, 4}, false, {3, 3}, {0, 1}, {0, 0}, {1, 1},
                             1)},
      {"depthwise rows, stride 3, long rows",
       conv_case_from_shapes(2, {2, 3, 4, 30}, {3, 1, 5, 5}, true, {3, 3}, {1, 2}, {1, 2}, {1, 1},
                             3)},
      // A stride-1 1-D layer (one phase), 4 sequences of 1100: wgrad's reduction in 8 slices
      // added in order (in float64 its rows in 2 chunks); with threads the forward's tasks take
      // parts of the output channels and pieces of the rows, dgrad's parts of the input channels
      // and pieces.
      {"phase GEMMs, 1-D, wgrad in slices",
       conv_case_from_shapes(1, {4, 8, 1100}, {8, 96, 8}, false, {1}, {3}, {0}, {1}, 1)},
      // 8 -> 128 k3 on one 38 x 40 image: a plane larger than a piece, so dgrad goes in bands of
      // rows, each reading its band's reach of dy again (the forward takes the direct kernel).
      {"phase GEMMs, dgrad in bands",
       conv_case_from_shapes(2, {1, 8, 38, 40}, {8, 128, 3, 3}, false, {1, 1}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // Three input channels to one output channel over two sequences of 45001 (a signal's 1-D
      // decoder; dy's columns past the few-rows wgrad's 1 MiB): wgrad's GEMM path, whose 3 x 3
      // products go through gemm::dot_products at every level, each block's last positions past
      // its whole vectors.
      {"three input channels, long rows, wgrad by dot products",
       conv_case_from_shapes(1, {2, 3, 45001}, {3, 1, 3}, true, {2}, {1}, {0}, {1}, 1)},
      // Batch 1 to one channel over 20000 steps, k7 s2 (a position's taps reach 4 positions on):
      // the forward goes by positions, its col2im in 5 pieces of 4096 positions, even pieces then
      // odd ones; the bits must not follow the threads.
      {"forward by positions, col2im in pieces, 1-D",
       conv_case_from_shapes(1, {1, 8, 20000}, {8, 1, 7}, true, {2}, {3}, {1}, {1}, 1)},
      // The same in 2-D: an RGB output of 130 x 70, k5 s2, its col2im in 3 pieces of 59 rows.
      {"forward by positions, col2im in pieces, 2-D",
       conv_case_from_shapes(2, {1, 6, 130, 70}, {6, 3, 5, 5}, true, {2, 2}, {2, 2}, {1, 1}, {1, 1},
                             1)},
      // Batch 1, 256 -> 64 k5 s3 on 120 steps: the forward's one block of 64 channels is cut
      // for the threads into even blocks (2 x 32 at 2 threads, where the largest block of two
      // would leave a last one of a single channel); the bits must not follow the cut.
      {"batch 1, output channels cut evenly for the threads",
       conv_case_from_shapes(1, {1, 256, 120}, {256, 64, 5}, true, {3}, {2}, {0}, {1}, 1)},
      {"1x1 stride 1, items batched, grouped",
       conv_case_from_shapes(1, {6, 16, 40}, {16, 24, 1}, false, {1}, {0}, {0}, {1}, 2)},
      // Two items of 8x8 per block in 2 groups: dgrad in 2 parts; wgrad in 4 channel blocks per
      // group (and, in float64, 2 slices of its reduction).
      {"two items per block, grouped", conv_case_from_shapes(2, {8, 32, 8, 8}, {32, 64, 4, 4}, true,
                                                             {2, 2}, {1, 1}, {0, 0}, {1, 1}, 2)},
      // 1-D with the strides im2col and col2im have loops of their own (2 and 4) and one they
      // do not (3), dilated, on long sequences cut into chunks.
      {"1-D stride 4",
       conv_case_from_shapes(1, {3, 24, 700}, {24, 16, 8}, true, {4}, {2}, {1}, {1}, 1)},
      // col2im by output phase (col2im_phases): stride 8 with k5, so three phases get one tap
      // and five none, padding past the stride; stride 8 k16 p4 (HiFi-GAN's) on items short
      // enough that a GEMM block holds several, each row's vector run between scalar edges;
      // 2-D with W stride 4 under a 3 x 6 kernel, W padding past the stride, output padding.
      // Strides 3 and 5 (no power of two: the general shuffles), EnCodec x5's k10 and a k7
      // whose phases get 3, 2 and 2 taps.
      {"1-D stride 5 k10, long rows",
       conv_case_from_shapes(1, {2, 12, 130}, {12, 10, 10}, true, {5}, {0}, {0}, {1}, 1)},
      {"1-D stride 3 k7, padded",
       conv_case_from_shapes(1, {3, 10, 90}, {10, 14, 7}, false, {3}, {4}, {2}, {1}, 1)},
      {"1-D stride 8, phases of one tap or none",
       conv_case_from_shapes(1, {2, 16, 300}, {16, 12, 5}, true, {8}, {11}, {3}, {1}, 1)},
      {"1-D stride 8 k16, items batched",
       conv_case_from_shapes(1, {9, 24, 40}, {24, 20, 16}, true, {8}, {4}, {0}, {1}, 1)},
      {"2-D W stride 4, kernel 3 x 6", conv_case_from_shapes(2, {2, 8, 3, 45}, {8, 6, 3, 6}, false,
                                                             {2, 4}, {1, 5}, {1, 2}, {1, 1}, 2)},
      {"1-D stride 2 dilation 2",
       conv_case_from_shapes(1, {4, 16, 900}, {16, 32, 3}, false, {2}, {1}, {0}, {2}, 1)},
      {"1-D stride 3, small sequences batched",
       conv_case_from_shapes(1, {12, 40, 6}, {40, 96, 7}, true, {3}, {2}, {2}, {1}, 1)},
      // One long sequence with 16 rows (a decoder to one channel): dgrad and wgrad take the
      // few-rows products, wgrad's 16 rows in tiles of 6, 6 and 4 over chunks of positions,
      // dgrad's 64 input channels in tiles of 12 (the last of 4) over 16 runs of positions;
      // the column buffer is copied in chunks that follow the threads (1, 2, 5 or 16 of them).
      {"one long sequence, few rows",
       conv_case_from_shapes(1, {1, 64, 4000}, {64, 1, 16}, true, {8}, {0}, {0}, {1}, 1)},
      // Direct dgrad (conv_transpose_direct.cpp): 56 input channels fill 7/8 of two tile blocks
      // on every level, the last vector half full; 2 x 12 x 14 = 336 positions; 3x7 taps,
      // dilated in H, with an output padding that dy's padded planes must not read.
      {"direct dgrad 2-D stride 1, partial channel block",
       conv_case_from_shapes(2, {2, 56, 12, 14}, {56, 8, 3, 7}, true, {1, 1}, {1, 3}, {0, 0},
                             {2, 1}, 1)},
      // Few input channels on many rows (channels_fill): at AVX-512 the direct dgrad takes 9
      // input channels, just over a quarter of its block (8 and fewer go by phases; 24 x 9 = 216
      // rows, stride 2, 3 items of 10 x 11, an output padding), and the direct wgrad 12 (96 x 9 =
      // 864 rows, 2 items of 16 x 18); below AVX-512 both keep the GEMM path.
      {"direct dgrad, a quarter of the lanes",
       conv_case_from_shapes(2, {3, 9, 10, 11}, {9, 24, 3, 3}, true, {2, 2}, {1, 1}, {1, 0}, {1, 1},
                             1)},
      // More than half a vector of input channels takes the direct dgrad from 64 rows at
      // AVX-512 (dgrad_sparse_min_rows): 12 channels on 8 x 9 = 72 rows, stride 1, dilated, with
      // paddings 2 and 3 (dy's padded planes read past both sides), 3 items of 13 x 11; and 17
      // (two vectors, the second one channel) on 16 x 4 = 64 rows at stride 2, output padding.
      {"direct dgrad, over half a vector on few rows",
       conv_case_from_shapes(2, {3, 12, 13, 11}, {12, 8, 3, 3}, true, {1, 1}, {2, 3}, {0, 0},
                             {2, 2}, 1)},
      {"direct dgrad, 17 channels on 64 rows",
       conv_case_from_shapes(2, {3, 17, 9, 10}, {17, 16, 2, 2}, false, {2, 2}, {0, 0}, {1, 0},
                             {1, 1}, 1)},
      {"direct wgrad, a few input channels on many rows",
       conv_case_from_shapes(2, {2, 12, 16, 18}, {12, 96, 3, 3}, false, {1, 1}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // A vector of input channels or more takes the direct wgrad from 64 rows at AVX-512 where
      // its tiles (12 output channels by a tap) are 16 or more (wgrad_sparse_min_rows): 20
      // channels (two vectors, the second a quarter full) on 24 x 9 = 216 rows, 18 tiles, dilated
      // in W, 4 items of 12 x 13.
      {"direct wgrad, a vector and more on few rows",
       conv_case_from_shapes(2, {4, 20, 12, 13}, {20, 24, 3, 3}, false, {1, 1}, {1, 2}, {0, 0},
                             {1, 2}, 1)},
      // Direct forward (stride 1, 9 taps or more): 56 output channels fill 7/8 of two tile
      // blocks, the last vector half full; 3x7 taps reversed, dilated in H, with an output
      // padding (one more row of y, read from x's zero padding) and a bias.
      {"direct forward 2-D stride 1, partial channel block, output padding",
       conv_case_from_shapes(2, {2, 8, 12, 14}, {8, 56, 3, 7}, true, {1, 1}, {1, 3}, {1, 0}, {2, 1},
                             1)},
      // Output channels that fill three quarters of one vector or more (13 at AVX-512: a tile of
      // one vector, the last three lanes idle) over up to 128 input channels: the direct
      // forward, 32 input channels, a 5 x 3 kernel with paddings 2 and 1, a bias.
      {"direct forward, 13 output channels in one vector",
       conv_case_from_shapes(2, {2, 32, 14, 12}, {32, 13, 5, 3}, true, {1, 1}, {2, 1}, {0, 0},
                             {1, 1}, 1)},
      // At most a vector of channels on each side takes the direct forward from 4 taps (not 9):
      // 16 -> 16 k3x2 on one 20 x 22 image (y 22 x 23).
      {"direct forward, a vector of channels each side, 6 taps",
       conv_case_from_shapes(2, {1, 16, 20, 22}, {16, 16, 3, 2}, false, {1, 1}, {0, 0}, {0, 0},
                             {1, 1}, 1)},
      // 12 input channels on 7 x 6 images, k4 with no padding: y (10 x 9) is 2.1x x, its
      // overhang sums over zero padding, and still the direct forward takes it (few input
      // channels; kSparseForwardMaxChannels).
      {"direct forward 2-D stride 1, few input channels, output past x's reach",
       conv_case_from_shapes(2, {3, 12, 7, 6}, {12, 48, 4, 4}, true, {1, 1}, {0, 0}, {0, 0}, {1, 1},
                             1)},
      // 2 groups of 16 input and 32 output channels, k15 p7 on 3 sequences of 100: the windows
      // at each end padded, the middle ones read in place.
      {"direct forward 1-D stride 1, grouped, long kernel",
       conv_case_from_shapes(1, {3, 32, 100}, {32, 32, 15}, true, {1}, {7}, {0}, {1}, 2)},
      // A W stride with no constant loop (5), k = 2s, output padding, rows of 100 positions.
      {"direct dgrad 1-D stride 5",
       conv_case_from_shapes(1, {3, 32, 100}, {32, 16, 10}, false, {5}, {2}, {3}, {1}, 1)},
      // Stride 8, k16 (a vocoder's upsampler): one sequence of 500 positions in several tasks'
      // runs of positions, zero padding.
      {"direct dgrad 1-D stride 8, long sequence",
       conv_case_from_shapes(1, {1, 32, 500}, {32, 8, 16}, true, {8}, {0}, {0}, {1}, 1)},
      // Stride 2, k4 (16 taps: 4 per stride phase) in 2 groups of 32 input channels, 4 x 8 x 8.
      {"direct dgrad 2-D stride 2, grouped",
       conv_case_from_shapes(2, {4, 64, 8, 8}, {64, 8, 4, 4}, true, {2, 2}, {1, 1}, {0, 0}, {1, 1},
                             2)},
      // Weights large enough to be packed in pieces of rows (dgrad: 64 x 9 rows of each block of
      // input channels) or of input channels (forward, 64 of them): stride 3 takes the direct
      // dgrad at every level, the stride-1 forward only at AVX-512.
      {"direct dgrad 2-D stride 3, weight packed in pieces",
       conv_case_from_shapes(2, {2, 32, 12, 12}, {32, 64, 3, 3}, true, {3, 3}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      {"direct forward 2-D stride 1, weight packed in pieces",
       conv_case_from_shapes(2, {2, 64, 12, 12}, {64, 32, 3, 3}, true, {1, 1}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // Direct wgrad (2-D calls with 512 or more positions): 13 output channels are a tile of
      // 12 and one of 1; 2 x 16 x 18 = 576 positions in sweeps of 14 rows and 2; dilated in H.
      {"direct wgrad 2-D stride 1, output channels 12 + 1",
       conv_case_from_shapes(2, {2, 56, 16, 18}, {56, 13, 3, 7}, true, {1, 1}, {1, 3}, {0, 0},
                             {2, 1}, 1)},
      // Small images: sweeps of 4 items of 8 x 8, the last of one; 2 groups, stride 2, an output
      // padding that no tap reads.
      {"direct wgrad 2-D stride 2, grouped, output padding",
       conv_case_from_shapes(2, {9, 64, 8, 8}, {64, 8, 4, 4}, false, {2, 2}, {1, 1}, {1, 1}, {1, 1},
                             2)},
      // 128 x 130 = 16640 positions: wgrad's positions in 2 slices (8192 each, by the shape),
      // summed in order.
      {"direct wgrad 2-D, positions in slices",
       conv_case_from_shapes(2, {1, 32, 128, 130}, {32, 4, 2, 2}, true, {1, 1}, {0, 0}, {0, 0},
                             {1, 1}, 1)},
      // Direct wgrad of a 1-D call: 3 x 900 = 2700 positions in 2 slices (the first ends inside
      // item 1), segments of 85 (256 window rows at stride 3); 2 groups of 32 input channels,
      // 13 output channels (tiles of 12 and 1); stride 3, dilation 2 and a padding whose windows
      // start before dy, an output padding after it.
      {"direct wgrad 1-D, slices across items",
       conv_case_from_shapes(1, {3, 64, 900}, {64, 13, 5}, true, {3}, {4}, {2}, {2}, 2)},
      // Direct dgrad on one tap per stride phase in 2-D (U-Net's k2 s2; 1-D calls of that kind
      // keep im2col): rows of 20 positions in two tiles of 10, an output padding no tap reads.
      {"direct dgrad 2-D k2 s2", conv_case_from_shapes(2, {1, 64, 16, 20}, {64, 32, 2, 2}, true,
                                                       {2, 2}, {0, 0}, {1, 1}, {1, 1}, 1)},
      // Direct wgrad from 2 taps per reached stride phase: k3 s2 d2 puts all three taps on one
      // phase (im2col + GEMM below AVX-512); k3 s2 in 2-D, 9 taps on 4 phases, 6 output
      // channels in one tile.
      {"direct wgrad 1-D k3 s2 d2",
       conv_case_from_shapes(1, {2, 32, 300}, {32, 8, 3}, false, {2}, {1}, {1}, {2}, 1)},
      {"direct wgrad 2-D k3 s2", conv_case_from_shapes(2, {1, 32, 24, 24}, {32, 6, 3, 3}, true,
                                                       {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1)},
      // wgrad by stride phases (phase_wgrad: at most 3 output channels, more rows than few rows
      // takes): an RGB k4 s2 layer with output padding, rows of 37 (2 whole vectors and a
      // partial one in float32), 8 input channels in 2 tiles, 48 columns in 8; a 2-D layer with
      // W stride 3 and padding past it (three W phases, shifts -2 to 0), H dilation 2 (its 3 taps
      // on one phase), 30 columns, 120 rows of 40 in 5 pieces of 25 rows, one slice each; 2
      // groups of 6 input channels (a tile of 4 and one of 2) and 2 output channels; a 1-D k16 s8
      // decoder to 2 channels (32 columns, 8 phases of 2 taps) on rows of 3000 in pieces of 1024,
      // 1024 and 952 columns (the last ending in a partial vector), 6 slices.
      {"wgrad by phases, RGB k4 s2", conv_case_from_shapes(2, {2, 8, 20, 37}, {8, 3, 4, 4}, true,
                                                           {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1)},
      {"wgrad by phases, W stride 3, slices",
       conv_case_from_shapes(2, {3, 4, 40, 40}, {4, 2, 3, 5}, false, {2, 3}, {1, 4}, {1, 2}, {2, 1},
                             1)},
      {"wgrad by phases, grouped", conv_case_from_shapes(2, {2, 12, 9, 33}, {12, 2, 4, 4}, false,
                                                         {2, 2}, {1, 1}, {0, 0}, {1, 1}, 2)},
      {"wgrad by phases, 1-D k16 s8, long rows",
       conv_case_from_shapes(1, {2, 8, 3000}, {8, 2, 16}, true, {8}, {4}, {0}, {1}, 1)},
      // dgrad and wgrad by phases for few input channels (at most a tile's 4, each element of
      // dy serving at least 8 multiply-adds), many output channels: 3 -> 16 k4 s2 with output
      // padding on rows of 37 (wgrad: 256 columns of dw in 43 blocks, a tile of 3 channels;
      // dgrad: 3 vectors a row, the last partial; more threads cut the rows into more bands); 2
      // groups of 2 -> 12 k3 at stride 1 (planes copied whole); 1-D 4 -> 20 k8 s4, the planes
      // gathered at a W stride of 4 a vector at a time; 1 -> 8 k3 at stride 1 (a tile of one
      // channel); a 1-D row of 2100 whose planes pass dgrad's band budget, cut into pieces of
      // columns (64 output channels, 2 W phases).
      {"phases, 3 input channels", conv_case_from_shapes(2, {2, 3, 20, 37}, {3, 16, 4, 4}, true,
                                                         {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1)},
      {"phases, grouped 2 input channels",
       conv_case_from_shapes(2, {2, 4, 12, 40}, {4, 12, 3, 3}, false, {1, 1}, {1, 1}, {0, 0},
                             {1, 1}, 2)},
      {"phases, 1-D stride 4, 4 input channels",
       conv_case_from_shapes(1, {2, 4, 300}, {4, 20, 8}, true, {4}, {2}, {1}, {1}, 1)},
      {"phases, 1 input channel", conv_case_from_shapes(2, {2, 1, 30, 50}, {1, 8, 3, 3}, true,
                                                        {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1)},
      {"phases, 1-D row in pieces",
       conv_case_from_shapes(1, {1, 4, 2100}, {4, 64, 4}, false, {2}, {1}, {0}, {1}, 1)},
      // Fewer planes than twice the threads, and enough work for several threads: the depthwise
      // loops and the forward of few input channels cut the planes' rows into bands (one
      // channel, k5x7 at strides 2 x 3; 2 -> 1 channel k5 s2). The one channel's phase rows are
      // past the depthwise loops' band bound (cache_bands) at any thread count: its dgrad converts
      // a band's rows of dy into a buffer of the band's rows, its wgrad sums each band apart and
      // adds the bands in order.
      {"depthwise, one plane in bands",
       conv_case_from_shapes(2, {1, 1, 200, 180}, {1, 1, 5, 7}, true, {2, 3}, {2, 3}, {1, 2},
                             {1, 1}, 1)},
      {"few input channels, one output plane in bands",
       conv_case_from_shapes(2, {1, 2, 150, 150}, {2, 1, 5, 5}, false, {2, 2}, {2, 2}, {1, 1},
                             {1, 1}, 1)},
      // dgrad by phases on rows of 11 (one vector, partial) with one input channel and a tap per
      // stride phase (strides 2 x 3, output padding): the dgrad has no bound on the taps.
      {"dgrad by phases, narrow rows, one tap a phase",
       conv_case_from_shapes(2, {3, 1, 12, 11}, {1, 16, 2, 3}, true, {2, 3}, {1, 0}, {1, 2}, {1, 1},
                             1)},
      // dgrad and wgrad on few columns (dgrad_few_columns, wgrad_few_columns): 2 items of 4 x 4
      // = 32 columns, two vectors of them; 192 input channels, 16 row blocks; 144 rows, wgrad's
      // last panel partial.
      {"dgrad few columns, 2 items", conv_case_from_shapes(2, {2, 192, 4, 4}, {192, 16, 3, 3}, true,
                                                           {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1)},
      // 9 columns (one vector, zero-padded) and 200 input channels: a last row block of 8.
      // wgrad: 48 rows, a panel and a half.
      {"dgrad few columns, last row block partial",
       conv_case_from_shapes(2, {1, 200, 3, 3}, {200, 8, 2, 3}, false, {1, 2}, {0, 1}, {0, 0},
                             {1, 1}, 1)},
      // wgrad on few columns in 3 groups: 3 items of 2 x 5 = 30 columns; 20 input channels a
      // group (a block of 12 and one of 8); 7 x 6 = 42 rows, not whole vectors, so dw is
      // written without streaming stores.
      {"wgrad few columns, grouped, rows not whole vectors",
       conv_case_from_shapes(2, {3, 60, 2, 5}, {60, 7, 2, 3}, true, {2, 1}, {0, 1}, {1, 0}, {1, 2},
                             3)},
      // 2 items of 5 x 10 = 100 columns, more than kFewColumns, and a dw of 2 MiB in float32
      // (4 in float64): wgrad still takes the few-columns product, its dw being past L2.
      {"wgrad few columns, 100 columns, large weight",
       conv_case_from_shapes(2, {2, 64, 5, 10}, {64, 512, 4, 4}, false, {2, 2}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // The same 100 columns for dgrad, with 192 input channels (16 row blocks) and a weight of
      // 2.25 MiB: past kFewColumns, dgrad takes the few-columns product on the large weight.
      {"dgrad few columns, 100 columns, large weight",
       conv_case_from_shapes(2, {2, 192, 5, 10}, {192, 192, 4, 4}, true, {2, 2}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // 60 columns on a cols of 80 x 16 = 1280 rows, 320 KiB in float32: past L2's share, so
      // dgrad_few_columns runs the reduction in runs (512, 512, 256 rows in float32) over tasks
      // of several row blocks, 200 input channels leaving the last block partial (8 of 12
      // rows; 2 of 6 below AVX-512).
      {"dgrad few columns, reduction in runs",
       conv_case_from_shapes(2, {1, 200, 6, 10}, {200, 80, 4, 4}, false, {2, 2}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // 49 columns (7 x 7), one past whole vectors at every level: dgrad_few_columns takes the
      // last by dot products (few_columns_dot), in 2 groups of 94 input channels (a last row
      // block partial) and 80 x 4 x 4 = 1280 rows, past L2's share: its sums run in runs, each
      // taken up again (3 runs in float32, 5 in float64 at AVX-512), and at 2, 5 and 16
      // threads the vectors are cut into parts, the dot products going with the last.
      {"dgrad few columns, one column past whole vectors",
       conv_case_from_shapes(2, {1, 188, 7, 7}, {188, 80, 4, 4}, false, {2, 2}, {1, 1}, {0, 0},
                             {1, 1}, 2)},
      // dgrad and wgrad on few rows (dgrad_few_rows, wgrad_few_rows) in 2 groups of 3 input
      // channels and 1 output channel (5 rows, partial tiles both ways): 1100 positions, wgrad's
      // in chunks of 512, 512 and 76, dgrad's last tile of positions partial.
      {"few rows, grouped, 1-D",
       conv_case_from_shapes(1, {1, 6, 1100}, {6, 1, 5}, true, {3}, {1}, {2}, {2}, 2)},
      // 2-D, 2 items of 15 x 17 (each ending in a partial vector), 9 input channels (wgrad's
      // tiles of 4, 4 and 1; one partial dgrad tile), 2 x 3 x 3 = 18 rows, stride 2 with output
      // padding.
      {"few rows, 2-D, 2 items", conv_case_from_shapes(2, {2, 9, 15, 17}, {9, 2, 3, 3}, false,
                                                       {2, 2}, {1, 1}, {1, 0}, {1, 1}, 1)},
      // Batch 1, 200 input channels on a 33 x 3 image (99 columns, one column block, one task by
      // the shape; rows of 3, too short for the direct dgrad, which takes 64 positions or more
      // of a small weight): dgrad and wgrad cut the input channels for the threads (channel_cut)
      // into blocks of 96 + 104 at 2 threads (the short quantum in the larger block), 4 x 48 + 8
      // at 5 and 16; no cut at 1.
      {"input channels cut for the threads, batch 1",
       conv_case_from_shapes(2, {1, 200, 33, 3}, {200, 40, 2, 2}, true, {2, 2}, {0, 0}, {0, 0},
                             {1, 1}, 1)},
      // The same cut on a block of 3 items of 8 x 3 (x and dx go through buffers, channel by
      // channel from the block's first), 144 input channels: 48 + 96 at 2 threads, 3 x 48 at 5
      // and 16.
      {"input channels cut for the threads, items batched",
       conv_case_from_shapes(2, {3, 144, 8, 3}, {144, 24, 3, 3}, false, {2, 2}, {1, 1}, {1, 1},
                             {1, 1}, 1)},
      // wgrad's GEMM path (k2 s2: one tap per stride phase, so not the direct kernel), one task
      // by the shape, its 30 output channels cut for the threads (output_channel_parts) into
      // parts of 24 and 6 (whole multiples of 12 channels, 48 rows of dw: Eigen's row panels) at
      // 2 threads and more; 40 input channels; 2 items of 14 x 9 in one block, x through its
      // buffer.
      {"wgrad output channels cut for the threads, items batched",
       conv_case_from_shapes(2, {2, 40, 14, 9}, {40, 30, 2, 2}, true, {2, 2}, {0, 0}, {0, 0},
                             {1, 1}, 1)},
      // The same cut over a reduction in slices and with 16 taps (parts of whole multiples of 3
      // channels, 48 rows): one sequence of 400 positions whose column blocks are slices of
      // partial dw (2 in float32, 4 in float64: the channels alone give only 9 tasks, one
      // input-channel block of 48 and parts of 3 of the 29 output channels' one block), cut at 5
      // and 16 threads into parts of 6 or 9 channels, the last of 5 or 2.
      {"wgrad output channels cut for the threads, reduction in slices",
       conv_case_from_shapes(1, {1, 48, 400}, {48, 29, 16}, false, {8}, {4}, {0}, {1}, 1)},
      // With 62 output channels (3 blocks of 21, 21 and 20 by the shape, 21 tasks in parts of 3)
      // the channels can give the threads their tasks, and the reduction is not cut: one product
      // over all 400 positions per task, in parts of 12, 9 and 6 channels at 2, 5 and 16 threads.
      {"wgrad channels cut, reduction whole",
       conv_case_from_shapes(1, {1, 48, 400}, {48, 62, 16}, false, {8}, {4}, {0}, {1}, 1)},
      // dgrad's GEMM path on the backend's GEMM (48 rows: too few for the direct kernel, too
      // many for few rows), DCGAN's RGB layer in small: one 23 x 25 image in 3 column blocks of
      // 192, 192 and 191 positions, 3 tasks by the shape, each block cut for the threads into
      // parts of whole register tiles (dgrad_column_parts: 2 parts at 2 threads, 3 at 5 and
      // 16), the last part's last tile partial.
      {"dgrad columns cut for the threads",
       conv_case_from_shapes(2, {1, 48, 23, 25}, {48, 3, 4, 4}, false, {2, 2}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // Batch 1 on a 6 x 7 image, 96 output channels x 4 taps: one forward task by the shape,
      // cut for the threads (forward_channel_blocks) into blocks of 48, 20 (the last 16) and 6
      // channels at 2, 5 and 16 threads.
      {"forward output channels cut for the threads",
       conv_case_from_shapes(2, {1, 64, 6, 7}, {64, 96, 2, 2}, true, {2, 2}, {0, 0}, {0, 0}, {1, 1},
                             1)},
      // Forward channels-last (forward_channels_last: k4 s2, short rows, 16 taps on 4 phases):
      // 3 items of 16 x 16 in 2 groups of 20 output channels (the channels-last block's
      // transposes with partial vectors), output padding; at 16 threads the forward also cuts
      // its 6 tasks' channels. Then 8 items of 6 x 7 in one GEMM block (float32), 40 channels.
      {"forward channels-last, grouped, output padding",
       conv_case_from_shapes(2, {3, 48, 16, 16}, {48, 20, 4, 4}, true, {2, 2}, {1, 1}, {1, 1},
                             {1, 1}, 2)},
      {"forward channels-last, items batched",
       conv_case_from_shapes(2, {8, 24, 6, 7}, {24, 40, 4, 4}, false, {2, 2}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // Forward channels-last adds a row's taps as one run of (tap, channel) elements where W is
      // undilated, tap by tap where it is: k4x5 dilated 2 in W with padding 3, so each row's
      // taps are clipped at both of y's edges, 24 channels (a vector and a half), output padding
      // in W.
      {"forward channels-last, dilated in W, taps clipped at both edges",
       conv_case_from_shapes(2, {2, 24, 5, 6}, {24, 24, 4, 5}, true, {2, 2}, {1, 3}, {0, 1}, {1, 2},
                             1)},
      {"forward channels-last, taps clipped at both edges",
       conv_case_from_shapes(2, {2, 24, 5, 6}, {24, 24, 4, 5}, false, {2, 2}, {1, 3}, {0, 1},
                             {1, 1}, 1)},
      // At stride 1 on rows under a vector: 24 -> 20 k3x4 on 6 x 7 images, padded, and dilated
      // 2 in W with an output padding.
      {"forward channels-last, stride 1, short rows",
       conv_case_from_shapes(2, {3, 24, 6, 7}, {24, 20, 3, 4}, true, {1, 1}, {1, 2}, {0, 0}, {1, 1},
                             1)},
      {"forward channels-last, stride 1, dilated in W",
       conv_case_from_shapes(2, {3, 24, 6, 7}, {24, 20, 3, 4}, false, {1, 1}, {1, 2}, {0, 1},
                             {1, 2}, 1)},
      // Forward channels-last with fewer columns (2 items of 3 x 4) than input channels (72):
      // the weight stays in (channel, tap) order and each column's 16 x 40 rows are transposed
      // (partial vectors on both sides), output padding on H.
      {"forward channels-last, columns transposed",
       conv_case_from_shapes(2, {2, 72, 3, 4}, {72, 40, 4, 4}, true, {2, 2}, {1, 1}, {1, 0}, {1, 1},
                             1)},
      // Forward and dgrad of 3x3 stride-1 layers in float32 by Winograd's F(2x2, 3x3), at every
      // level (conv_transpose_winograd.cpp): 2 x 2 output tiles, partial in both directions on
      // 11 x 13 planes, 18 output channels (register tiles of 12 and 8 channels); then 2 groups
      // of 16 -> 17 channels with paddings 0 and 2 (the forward's window offsets 2 and 0) on
      // rows of 20 tiles, runs of tiles that start mid-row; then runs of tiles over several
      // tasks per item.
      {"Winograd F(2x2, 3x3), partial tiles",
       conv_case_from_shapes(2, {2, 20, 11, 13}, {20, 18, 3, 3}, true, {1, 1}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      {"Winograd F(2x2, 3x3), grouped, paddings 0 and 2",
       conv_case_from_shapes(2, {1, 32, 9, 40}, {32, 17, 3, 3}, true, {1, 1}, {0, 2}, {0, 0},
                             {1, 1}, 2)},
      {"Winograd F(2x2, 3x3), several runs of tiles",
       conv_case_from_shapes(2, {3, 24, 30, 30}, {24, 40, 3, 3}, false, {1, 1}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      // Larger stride-1 kernels in 3 x 3 blocks on the same transforms, their products summed
      // in one reduction: a 3 x 7 kernel (S5's) in 3 blocks, a partial last one; a 6 x 6 kernel
      // in 4 blocks with W padding 5 (the forward's window offset 0, its output 15 wide).
      {"Winograd in 3 x 3 blocks, 3 x 7 kernel",
       conv_case_from_shapes(2, {2, 16, 9, 21}, {16, 20, 3, 7}, true, {1, 1}, {1, 3}, {0, 0},
                             {1, 1}, 1)},
      {"Winograd in 3 x 3 blocks, 6 x 6 kernel, wide padding",
       conv_case_from_shapes(2, {1, 16, 13, 20}, {16, 16, 6, 6}, false, {1, 1}, {2, 5}, {0, 0},
                             {1, 1}, 1)},
      // wgrad by Winograd's dual F(3x3, 2x2) (layers of 2048 tiles or more: 8 slices of the
      // reduction): 16 -> 20 channels on a 16 x 514 plane, 2056 tiles; rows of 257 tiles are
      // wider than a chunk (128), so they go in pieces; padding 0 on H.
      {"Winograd wgrad in slices, rows wider than a chunk",
       conv_case_from_shapes(2, {1, 16, 16, 514}, {16, 20, 3, 3}, false, {1, 1}, {0, 1}, {0, 0},
                             {1, 1}, 1)},
      // Depthwise (one channel in and out per group): direct loops, W strides above 1 in a phase
      // layout whose rows differ in length when the stride does not divide W_out, stride 1
      // without it, and strides past 16 back on the GEMMs.
      {"depthwise 2-D, strides (2, 3), dilated, padded",
       conv_case_from_shapes(2, {3, 5, 7, 6}, {5, 1, 3, 4}, true, {2, 3}, {1, 2}, {1, 2}, {1, 2},
                             5)},
      {"depthwise 2-D stride 4, output padding",
       conv_case_from_shapes(2, {2, 6, 9, 9}, {6, 1, 4, 4}, false, {4, 4}, {1, 1}, {3, 3}, {1, 1},
                             6)},
      // A 1 x 2 kernel, W-dilated, at strides (3, 4) with padding and output padding: dgrad and
      // wgrad convert only the rows of dy a tap reaches (every third, from the second) and the
      // W phases they reach (1 and 3 of 4).
      {"depthwise 2-D strides (3, 4), rows and phases no tap reads",
       conv_case_from_shapes(2, {2, 4, 6, 7}, {4, 1, 1, 2}, true, {3, 4}, {1, 1}, {2, 1}, {1, 2},
                             4)},
      // W stride 2 on rows of 79 outputs: the phase layout's shuffles (two vectors at a time)
      // and their scalar tail, in both directions.
      {"depthwise 2-D stride 2, wide rows",
       conv_case_from_shapes(2, {2, 3, 5, 40}, {3, 1, 3, 3}, true, {2, 2}, {1, 1}, {0, 0}, {1, 1},
                             3)},
      {"depthwise 1-D stride 1",
       conv_case_from_shapes(1, {4, 7, 300}, {7, 1, 5}, true, {1}, {2}, {0}, {3}, 7)},
      {"depthwise 1-D stride 20 (GEMMs)",
       conv_case_from_shapes(1, {2, 3, 40}, {3, 1, 25}, true, {20}, {3}, {0}, {1}, 3)},
      // Depthwise on blocks of channels laid channels-last (conv_transpose_depthwise_blocked.cpp:
      // the forward and wgrad on 2-D planes, more than half the blocks' lanes holding channels;
      // dgrad on rows under 2 vectors with 13/16 of the lanes holding channels). 28 channels (a
      // last block of 12 at AVX-512) at strides 2, padded, dilated
      // on W, with output padding, every pass; k2 at stride 3, whose third phases no tap
      // reaches (the bias alone there); 1-D k5 over 40 channels, wgrad in 4 slices of the items
      // added in order; 20 channels (5/8 of two blocks): the forward and wgrad blocked, dgrad on
      // its rows; 48 channels at 16 x 16, k4 s2, the work (3 MFLOP) enough to go on several
      // threads, wgrad's 3 blocks in 6 slices (float64: 6 blocks, 3 slices); one item of 32
      // channels, k7 s2: 2 blocks, so the forward and dgrad cut the rows into 8 bands, wgrad
      // into 8 slices.
      {"depthwise blocked, strides 2, dilated, output padding",
       conv_case_from_shapes(2, {3, 28, 9, 11}, {28, 1, 4, 3}, true, {2, 2}, {1, 2}, {1, 0}, {1, 2},
                             28)},
      {"depthwise blocked, k2 s3, phases no tap reaches",
       conv_case_from_shapes(2, {2, 16, 5, 6}, {16, 1, 2, 2}, true, {3, 3}, {0, 0}, {2, 1}, {1, 1},
                             16)},
      {"depthwise blocked, 1-D, wgrad in slices",
       conv_case_from_shapes(1, {4, 40, 30}, {40, 1, 5}, false, {1}, {2}, {0}, {1}, 40)},
      {"depthwise blocked, on several threads",
       conv_case_from_shapes(2, {8, 48, 16, 16}, {48, 1, 4, 4}, false, {2, 2}, {1, 1}, {0, 0},
                             {1, 1}, 48)},
      {"depthwise blocked, one item in bands of rows",
       conv_case_from_shapes(2, {1, 32, 32, 32}, {32, 1, 7, 7}, true, {2, 2}, {3, 3}, {1, 1},
                             {1, 1}, 32)},
      {"depthwise blocked forward and wgrad, 20 channels",
       conv_case_from_shapes(2, {2, 20, 6, 6}, {20, 1, 3, 3}, true, {1, 1}, {1, 1}, {0, 0}, {1, 1},
                             20)},
      // The forward's stride-2 col2im on rows of exactly one vector (16 at AVX-512, 8 at AVX2):
      // an edge tap's 15 positions go as one vector that starts a position before the tap's
      // first (its lanes there add -0.0), where y and the column buffer have that element. k4 s2
      // p1 RGB outputs (the demo's last layer), batched; then one item of 40 rows, whose
      // forward goes by positions in chunks that start inside it.
      {"stride-2 col2im, rows of one AVX-512 vector",
       conv_case_from_shapes(2, {3, 16, 16, 16}, {16, 3, 4, 4}, true, {2, 2}, {1, 1}, {0, 0},
                             {1, 1}, 1)},
      {"stride-2 col2im, rows of one AVX2 vector",
       conv_case_from_shapes(2, {3, 16, 8, 8}, {16, 3, 4, 4}, true, {2, 2}, {1, 1}, {0, 0}, {1, 1},
                             1)},
      {"stride-2 col2im, rows of one vector, by positions",
       conv_case_from_shapes(2, {1, 8, 40, 16}, {8, 3, 4, 4}, true, {2, 2}, {1, 1}, {0, 0}, {1, 1},
                             1)},
  };
}

// float32 against the float64 loops: relative L2 of a few ulps; 1e-5 catches a wrong term.
constexpr Tolerance kFloat32L2{0.0, 0.0, 1e-5};

void check_against_reference(DType dtype, Tolerance tol) {
  for_each_cpu_level([&](cpu::Capability level) {
    uint64_t seed = 7100;
    for (const PathCase& pc : path_cases()) {
      const ConvData d = make_conv_data(pc.c, ++seed);
      const ConvOutputs actual =
          run_backend_passes(pc.c, conv_tensors(pc.c, d, dtype, Device(kCPU)));
      EXPECT_EQ(actual.y.dtype(), dtype);
      passes_close(
          actual, run_reference_passes(pc.c, d), tol,
          std::string(pc.path) + " at level " + cpu::capability_name(level) + ": " + pc.c.str());
    }
  });
}

TEST(CpuConvPaths, MatchReferenceFloat64) {
  check_against_reference(kFloat64, kFloat64Tight);
}

TEST(CpuConvPaths, MatchReferenceFloat32) {
  check_against_reference(kFloat32, kFloat32L2);
}

TEST(CpuConvPaths, SameBitsForAnyThreadCount) {
  for_each_cpu_level([&](cpu::Capability level) {
    uint64_t seed = 7200;
    for (const PathCase& pc : path_cases()) {
      const ConvData d = make_conv_data(pc.c, ++seed);
      for (DType dtype : {kFloat32, kFloat64}) {
        const ConvTensors t = conv_tensors(pc.c, d, dtype, Device(kCPU));
        set_num_threads(1);
        const ConvOutputs one = run_backend_passes(pc.c, t);
        for (int n : {2, 5, 16}) {
          set_num_threads(n);
          const ConvOutputs many = run_backend_passes(pc.c, t);
          const std::string config = std::string(pc.path) + " at level " +
                                     cpu::capability_name(level) + ", " + std::to_string(n) +
                                     " threads";
          EXPECT_TRUE(equal(one.y, many.y)) << "forward " << config;
          EXPECT_TRUE(equal(one.dx, many.dx)) << "dgrad " << config;
          EXPECT_TRUE(equal(one.dw, many.dw)) << "wgrad " << config;
        }
      }
    }
  });
}

// An empty batch on a huge length: every pass has nothing to compute and must allocate nothing
// sized by the length (the depthwise loops' phase planes are per output plane).
TEST(CpuConvPaths, EmptyBatchOnAHugeLengthAllocatesNothing) {
  const int64_t length = int64_t{1} << 40;
  for (int64_t groups : {int64_t{1}, int64_t{3}}) {
    const ConvCase c = conv_case_from_shapes(1, {0, 3, length}, {3, 3 / groups, 4}, true, {2}, {1},
                                             {0}, {1}, groups);
    const ConvData d = make_conv_data(c, 7300);
    for (DType dtype : {kFloat32, kFloat64}) {
      const ConvOutputs out = run_backend_passes(c, conv_tensors(c, d, dtype, Device(kCPU)));
      EXPECT_EQ(out.y.numel(), 0);
      EXPECT_EQ(out.dx.numel(), 0);
      EXPECT_TRUE(equal(out.dw, zeros(c.w_shape4(), TensorOptions(dtype)))) << c.str();
      EXPECT_TRUE(equal(out.db, zeros({3}, TensorOptions(dtype)))) << c.str();
    }
  }
}

// Empty images (length 0) whose output is not empty (a kernel longer than the stride): y is the
// bias, dw is 0; the column blocks have no columns and the kernels no column buffer.
TEST(CpuConvPaths, EmptyImagesGiveTheBias) {
  const ConvCase c = conv_case_from_shapes(1, {5, 2, 0}, {2, 3, 4}, true, {1}, {0}, {0}, {1}, 1);
  ASSERT_EQ(c.p.out_extent(1), 3);
  const ConvData d = make_conv_data(c, 7400);
  for (DType dtype : {kFloat32, kFloat64}) {
    const ConvOutputs out = run_backend_passes(c, conv_tensors(c, d, dtype, Device(kCPU)));
    std::vector<double> bias_everywhere;
    for (int64_t n = 0; n < 5; ++n)
      for (int64_t co = 0; co < 3; ++co)
        for (int64_t i = 0; i < 3; ++i)
          bias_everywhere.push_back(
              static_cast<double>(static_cast<float>(d.b[static_cast<size_t>(co)])));
    const Tensor y = out.y.to(kFloat64);
    if (dtype == kFloat32) {
      EXPECT_TRUE(equal(y, from_vector(bias_everywhere, c.y_shape4(), TensorOptions(kFloat64))));
    } else {
      for (int64_t i = 0; i < 45; ++i)
        bias_everywhere[static_cast<size_t>(i)] = d.b[static_cast<size_t>(i / 3 % 3)];
      EXPECT_TRUE(equal(y, from_vector(bias_everywhere, c.y_shape4(), TensorOptions(kFloat64))));
    }
    EXPECT_EQ(out.dx.numel(), 0);
    EXPECT_TRUE(equal(out.dw, zeros(c.w_shape4(), TensorOptions(dtype)))) << c.str();
  }
}

}  // namespace
}  // namespace tgrad::testing
