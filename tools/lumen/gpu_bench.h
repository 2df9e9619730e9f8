#pragma once
// `lumen bench`: GPU decode and prefill timings through the public C API, beside the
// device-to-device copy bandwidth measured in the same run. Plain C++ header: the `lumen`
// program calls it without CUDA headers.

namespace lumen::cuda {

// `lumen bench --gpu [--quick] [--decode] [--families a,b] [--sessions 1,1024]`: runs the
// benchmark and prints its tables (argv[0] is "bench"). --quick uses few repetitions (a smoke
// test); --decode prints the copy anchor and the decode tables alone; --families and
// --sessions keep those families and decode session counts (to profile one case). Returns
// the process exit code: 0, 1 when the CUDA backend is unavailable or a call fails, 2 for a
// bad argument.
int RunGpuBench(int argc, char** argv);

}  // namespace lumen::cuda
