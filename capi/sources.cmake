# The C API's entry points (extern "C"), compiled into lumen_objects (src/CMakeLists.txt).
set(LUMEN_CAPI_DIR ${PROJECT_SOURCE_DIR}/capi/src)
set(LUMEN_CAPI_SOURCES
  ${LUMEN_CAPI_DIR}/status_capi.cc
  ${LUMEN_CAPI_DIR}/model_capi.cc
  ${LUMEN_CAPI_DIR}/engine_capi.cc
  ${LUMEN_CAPI_DIR}/session_capi.cc
  ${LUMEN_CAPI_DIR}/snapshot_capi.cc
  ${LUMEN_CAPI_DIR}/store_capi.cc
  ${LUMEN_CAPI_DIR}/tentative_capi.cc
  ${LUMEN_CAPI_DIR}/rewind_capi.cc
)
