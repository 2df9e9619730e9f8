#pragma once
// `lumen bench --cpu`: decode and prefill timings of every family on the CPU, through the
// public C API, each beside anchors measured in the same run (memcpy and an in-place
// read-modify-write pass over the same bytes of state, a register-blocked fp32 matrix
// product, and the token-by-token loop for prefill).

namespace lumen::cli {

// argv[0] is "bench"; the rest are the benchmark's flags (see the usage text). Returns the
// process exit code.
int RunCpuBench(int argc, char** argv);

}  // namespace lumen::cli
