# The CUDA backend's sources, compiled into lumen_objects when LUMEN_ENABLE_CUDA is on.
set(LUMEN_CUDA_DIR ${PROJECT_SOURCE_DIR}/backends/cuda)
set(LUMEN_CUDA_SOURCES
  ${LUMEN_CUDA_DIR}/cuda_backend.cu
  ${LUMEN_CUDA_DIR}/state_pool.cu
  ${LUMEN_CUDA_DIR}/kernels/recurrent_step.cu
  ${LUMEN_CUDA_DIR}/kernels/prepare_inputs.cu
  ${LUMEN_CUDA_DIR}/kernels/convert.cu
)
# The chunkwise prefill kernel is written separately (kernels/chunkwise.cuh is its contract).
# Until it is in the tree, prefills run through the recurrent kernel one token per launch.
if(EXISTS ${LUMEN_CUDA_DIR}/kernels/chunkwise.cu)
  list(APPEND LUMEN_CUDA_SOURCES ${LUMEN_CUDA_DIR}/kernels/chunkwise.cu)
  set(LUMEN_CUDA_HAS_CHUNKWISE ON)
else()
  set(LUMEN_CUDA_HAS_CHUNKWISE OFF)
  message(STATUS "lumen: backends/cuda/kernels/chunkwise.cu is absent; CUDA prefills run "
                 "token by token")
endif()
