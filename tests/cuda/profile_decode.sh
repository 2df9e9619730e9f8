#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and Nsight Compute: profiles the decode kernels of one graph
# replay of `lumen bench --gpu --decode` (fp32 state) for linear_attn and gated_delta_net at
# N = 1024 (the first launch of 256 sessions) and N = 1 (the input check and the step), and
# PyTorch's device copy kernel over 2 GiB for comparison. Clocks are left as they are.
# Usage: profile_decode.sh BUILD_DIR [FAMILIES] > log
set -uo pipefail
lumen=${1:?usage: profile_decode.sh BUILD_DIR [FAMILIES]}/src/cli/lumen
families=${2:-linear_attn gated_delta_net}
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy
          --section LaunchStats --section WarpStateStats --section SchedulerStats)
for family in $families; do
  for n in 1024 1; do
    echo "=== $family N=$n"
    ncu --clock-control none --graph-profiling node "${sections[@]}" \
      -k regex:'StepKernel|CheckKernel' --launch-count $((n == 1 ? 2 : 1)) \
      "$lumen" bench --gpu --decode --families "$family" --sessions "$n" 2>&1 |
      grep -vE '^(==PROF==|lumen bench|anchor|decode|family|linear_attn|gated_delta_net) '
  done
done
if python3 -c "import torch" 2>/dev/null; then
  echo "=== PyTorch copy, 2 GiB"
  ncu --clock-control none "${sections[@]}" -k regex:copy --launch-count 1 python3 -c "
import torch
a = torch.rand(1 << 29, device='cuda'); b = torch.empty_like(a); b.copy_(a)
torch.cuda.synchronize()" 2>&1 | grep -v '^==PROF=='
fi
