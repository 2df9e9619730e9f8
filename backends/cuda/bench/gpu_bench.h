#pragma once
// `lumen bench`: GPU decode and prefill timings through the public C API, beside the
// device-to-device copy bandwidth measured in the same run. Plain C++ header: the `lumen`
// program calls it without CUDA headers.

namespace lumen::cuda {

// Runs the benchmark and prints its tables; `quick` uses few repetitions (a smoke test);
// `decode_only` prints the copy anchor and the decode tables alone. Returns the process exit
// code: 0, or 1 when the CUDA backend is unavailable or a call fails.
int RunGpuBench(bool quick, bool decode_only);

}  // namespace lumen::cuda
