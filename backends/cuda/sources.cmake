# The CUDA backend's sources, compiled into lumen_objects when LUMEN_ENABLE_CUDA is on.
set(LUMEN_CUDA_DIR ${PROJECT_SOURCE_DIR}/backends/cuda)
set(LUMEN_CUDA_SOURCES
  ${LUMEN_CUDA_DIR}/cuda_backend.cu
  ${LUMEN_CUDA_DIR}/async_calls.cu
  ${LUMEN_CUDA_DIR}/run_layer.cu
  ${LUMEN_CUDA_DIR}/step_path.cu
  ${LUMEN_CUDA_DIR}/prefill_path.cu
  ${LUMEN_CUDA_DIR}/scratch_plan.cu
  ${LUMEN_CUDA_DIR}/state_pool.cu
  ${LUMEN_CUDA_DIR}/kernels/recurrent_step.cu
  ${LUMEN_CUDA_DIR}/kernels/register_step.cu
  ${LUMEN_CUDA_DIR}/kernels/pipelined_step.cu
  ${LUMEN_CUDA_DIR}/kernels/prepare_inputs.cu
  ${LUMEN_CUDA_DIR}/kernels/convert.cu
  ${LUMEN_CUDA_DIR}/kernels/input_check.cu
  ${LUMEN_CUDA_DIR}/kernels/prefill_tables.cu
  ${LUMEN_CUDA_DIR}/kernels/short_conv.cu
  ${LUMEN_CUDA_DIR}/kernels/chunkwise.cu
)
