// One launch per kSessionsPerLaunch sessions: their values travel in the kernel's parameters
// (about 2.4 KB, under the 4 KB every architecture takes).

#include "backends/cuda/kernels/prefill_tables.cuh"

#include <algorithm>

namespace lumen::cuda {
namespace {

constexpr int32_t kSessionsPerLaunch = 192;

struct TableValues {
  int32_t first = 0;  // the first session of this launch
  int32_t count = 0;  // sessions in this launch
  void* blocks[kSessionsPerLaunch];
  int32_t cu_seqlens[kSessionsPerLaunch + 1];  // entries first .. first + count
};

__global__ void __launch_bounds__(kSessionsPerLaunch + 1)
WriteTablesKernel(const PrefillTables tables, const TableValues values) {
  const int32_t i = threadIdx.x;
  if (i > values.count) return;
  const int64_t session = int64_t{values.first} + i;
  tables.cu_seqlens[session] = values.cu_seqlens[i];
  if (i == values.count) return;  // the entry after the last session
  void* block = values.blocks[i];
  float* state = tables.wide != nullptr ? tables.wide + session * tables.count
                                        : static_cast<float*>(block);
  tables.states[session] = state;
  if (tables.normalizers != nullptr) tables.normalizers[session] = state + tables.matrix_count;
  if (tables.stored != nullptr) tables.stored[session] = block;
}

}  // namespace

cudaError_t LaunchWritePrefillTables(const PrefillTables& tables,
                                     const std::vector<void*>& blocks,
                                     const std::vector<int32_t>& cu_seqlens,
                                     cudaStream_t stream) {
  const int32_t n = static_cast<int32_t>(blocks.size());
  TableValues values;
  for (int32_t first = 0; first == 0 || first < n; first += kSessionsPerLaunch) {
    values.first = first;
    values.count = std::min(kSessionsPerLaunch, n - first);
    std::copy_n(blocks.begin() + first, values.count, values.blocks);
    std::copy_n(cu_seqlens.begin() + first, values.count + 1, values.cu_seqlens);
    WriteTablesKernel<<<1, kSessionsPerLaunch + 1, 0, stream>>>(tables, values);
    if (cudaError_t error = cudaGetLastError(); error != cudaSuccess) return error;
  }
  return cudaSuccess;
}

}  // namespace lumen::cuda
