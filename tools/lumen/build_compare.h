#pragma once
// `lumen bench --builds A,B[,...]`: times two or more builds of lumen side by side in one
// process, each loaded from its own shared library file, calling them in turn so that they
// share the host's phases (a shared host's speed moves by tens of percent within minutes,
// so separate runs cannot resolve a change of a few percent). Also checks whether each build
// gives the first one's outputs and states bit for bit.

#include <cstdint>
#include <string>
#include <vector>

namespace lumen::cli {

struct BuildCompareOptions {
  std::vector<std::string> builds;    // shared library files; the first is the anchor
  std::vector<std::string> families;  // empty: every family
  std::vector<int64_t> threads;
  std::vector<int64_t> sessions;      // decode: sessions per lumen_engine_step_batch
  std::vector<int64_t> tokens;        // prefill: tokens per lumen_session_prefill
  int32_t rounds = 10;                // each build timed once per round
  double min_seconds = 0.05;          // per timing
  bool bf16 = false;                  // bf16 inputs and output
  bool decode = true;
  bool prefill = true;
  bool require_same_bits = false;     // exit status 1 where a build's results differ from A's
};

// Runs the comparison and prints its tables; returns the program's exit status (1 where
// require_same_bits is set and some build's results differ from the first's).
int RunBuildCompare(const BuildCompareOptions& options);

}  // namespace lumen::cli
