// The table of the kernels of the level this file is compiled at (kernel_table.h).

#include "backends/cpu/kernel_table.h"

namespace lumen::cpu {
inline namespace LUMEN_KERNEL_NAMESPACE {

extern const KernelTable kLevelKernels = {
    RunRecurrentAtLevel,       ApplyHeldWriteAtLevel,         RunChunkwiseAtLevel,
    ConvolveChannelsAtLevel,   ScanForOutOfDomainAtLevel,     ScanHalfForOutOfDomainAtLevel,
    PrepareHeadInputsAtLevel,
};

}  // namespace LUMEN_KERNEL_NAMESPACE
}  // namespace lumen::cpu
