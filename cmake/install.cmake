# Installs the libraries, the one public header, a CMake package (find_package(lumen)) and
# a pkg-config file.
include(CMakePackageConfigHelpers)

install(TARGETS lumen lumen_static EXPORT lumenTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/capi/include/lumen/lumen.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lumen)
install(EXPORT lumenTargets NAMESPACE lumen::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lumen)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/lumenConfig.cmake.in
  ${PROJECT_BINARY_DIR}/lumenConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lumen)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/lumenConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/lumenConfig.cmake
              ${PROJECT_BINARY_DIR}/lumenConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lumen)

# The .pc file finds the prefix relative to itself, so `cmake --install --prefix X` works.
file(RELATIVE_PATH LUMEN_PC_RELATIVE_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
configure_file(${PROJECT_SOURCE_DIR}/cmake/lumen.pc.in ${PROJECT_BINARY_DIR}/lumen.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/lumen.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
