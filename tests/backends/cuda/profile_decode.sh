#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and Nsight Compute: profiles the decode kernels in one graph
# replay of `lumen bench --gpu --decode` (fp32 state): the step kernel's first launch (256
# sessions) at N = 1024, and the input check and the step at N = 1; then an elementwise
# PyTorch kernel that reads and writes 2 GiB (b = a * 1), the copy to compare with. Clocks
# are left as they are. Usage: profile_decode.sh BUILD_DIR [FAMILIES [SESSION_COUNTS]] > log
# (PROFILE_COPY=0 leaves the PyTorch kernel out).
set -uo pipefail
lumen=${1:?usage: profile_decode.sh BUILD_DIR [FAMILIES [SESSION_COUNTS]]}/tools/lumen/lumen
families=${2:-linear_attn gated_delta_net}
counts=${3:-1024 1}
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy
          --section LaunchStats --section WarpStateStats --section SchedulerStats)
profile() {  # kernel regex, kernel count, family, N
  echo "=== $3 N=$4"
  ncu --clock-control none --graph-profiling node "${sections[@]}" -k "regex:$1" \
    --launch-count "$2" "$lumen" bench --gpu --decode --families "$3" --sessions "$4" 2>&1 |
    grep -vE "^(==PROF==|==WARNING==|lumen bench|anchor|decode|family|$3 )"
}
for family in $families; do
  for n in $counts; do
    if ((n == 1)); then
      profile 'StepKernel|CheckKernel' 2 "$family" 1
    else
      profile StepKernel 1 "$family" "$n"
    fi
  done
done
if [[ ${PROFILE_COPY:-1} == 1 ]] && python3 -c "import torch" 2>/dev/null; then
  echo "=== PyTorch b = a * 1 over 2 GiB"
  ncu --clock-control none "${sections[@]}" -k regex:elementwise --launch-count 1 python3 -c "
import torch
a = torch.empty(1 << 29, device='cuda'); b = torch.empty_like(a); torch.mul(a, 1.0, out=b)
torch.cuda.synchronize()" 2>&1 | grep -vE '^==(PROF|WARNING)=='
fi
