// The upsampling_decoder demo's command line, run as a process: bad flags print usage and exit
// non-zero; a short 2-D run lowers the held-out loss and writes every promised file; --resume
// continues from the checkpoint. The binary's path comes from examples/CMakeLists.txt.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code;
  std::string output;  // stdout and stderr
};

Result run_demo(const std::string& args) {
#ifndef TGRAD_DEMO_PATH
  (void)args;
  return {-1, ""};
#else
  const std::string cmd = std::string(TGRAD_DEMO_PATH) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0)
    out.append(buf, n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
#endif
}

#ifndef TGRAD_DEMO_PATH
#define SKIP_WITHOUT_DEMO() GTEST_SKIP() << "built without examples (TGRAD_BUILD_EXAMPLES=OFF)"
#else
#define SKIP_WITHOUT_DEMO() (void)0
#endif

class DemoCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tgrad_demo_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// (step, train, held-out) rows of loss.csv.
std::vector<std::vector<double>> read_csv(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "step,train_loss,heldout_loss");
  std::vector<std::vector<double>> rows;
  while (std::getline(in, line)) {
    std::vector<double> row;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ','))
      row.push_back(std::stod(cell));
    EXPECT_EQ(row.size(), 3u) << line;
    rows.push_back(row);
  }
  return rows;
}

TEST_F(DemoCli, BadFlagsPrintUsageAndFail) {
  SKIP_WITHOUT_DEMO();
  for (const std::string args : {"--mode 3d", "--steps 0", "--steps abc", "--batch -1", "--lr -0.1",
                                 "--device tpu", "--no-such-flag", "extra_positional"}) {
    const Result r = run_demo(args + " --out " + dir_.string());
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE(r.output.find("--help"), std::string::npos) << args << ":\n" << r.output;
  }
  const Result help = run_demo("--help");
  EXPECT_EQ(help.exit_code, 0);
  for (const char* flag :
       {"--mode", "--steps", "--batch", "--lr", "--seed", "--device", "--out", "--resume"}) {
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag;
  }
  EXPECT_FALSE(fs::exists(dir_ / "loss.csv"));
}

TEST_F(DemoCli, ShortTwoDRunLearnsAndResumes) {
  SKIP_WITHOUT_DEMO();
  // 100 steps of batch 16 take a few seconds on one core.
  const std::string common = "--mode 2d --batch 16 --device cpu --seed 3 --out " + dir_.string();
  const Result r = run_demo("--steps 100 " + common);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"loss.csv", "loss.png", "samples_step0.png", "samples_step100.png",
                        "decoder.safetensors", "decoder.optim.safetensors"}) {
    EXPECT_TRUE(fs::exists(dir_ / f)) << f;
  }
  auto rows = read_csv(dir_ / "loss.csv");
  ASSERT_GE(rows.size(), 3u);
  EXPECT_EQ(rows.front()[0], 0);
  EXPECT_EQ(rows.back()[0], 100);
  // 100 steps get past the initial plateau: held-out loss at least 2x lower.
  EXPECT_LT(rows.back()[2], rows.front()[2] / 2) << r.output;

  const Result resumed = run_demo("--steps 130 --resume " + common);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from step 100"), std::string::npos) << resumed.output;
  rows = read_csv(dir_ / "loss.csv");
  EXPECT_EQ(rows.front()[0], 0);  // the history before the resume is kept
  EXPECT_EQ(rows.back()[0], 130);

  const Result wrong_mode = run_demo("--steps 140 --resume --mode 1d --out " + dir_.string());
  EXPECT_NE(wrong_mode.exit_code, 0);
  EXPECT_NE(wrong_mode.output.find("mode"), std::string::npos) << wrong_mode.output;
}

TEST_F(DemoCli, OneDModeRuns) {
  SKIP_WITHOUT_DEMO();
  const Result r = run_demo("--mode 1d --steps 20 --batch 8 --device cpu --out " + dir_.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "samples_step20.png"));
  EXPECT_TRUE(fs::exists(dir_ / "loss.png"));
}

TEST_F(DemoCli, ResumeWithoutCheckpointFailsClearly) {
  SKIP_WITHOUT_DEMO();
  const Result r = run_demo("--steps 5 --resume --device cpu --out " + dir_.string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cannot open"), std::string::npos) << r.output;
}

}  // namespace
