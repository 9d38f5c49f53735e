# `cmake --install`: the hyperpool binary, the public headers, the library and
# a CMake package so a host application can `find_package(hyperpool)` and
# link hyperpool::hyperpool; an example config and a systemd unit go to
# share/hyperpool/. The static library's private dependencies (the codec and
# TLS libraries, fmt, BoringSSL) are part of its link interface, so they are
# exported too and found again by hyperpoolConfig.cmake.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HYPERPOOL_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/hyperpool")

set_target_properties(hyperpool_protocol PROPERTIES EXPORT_NAME protocol)
set_target_properties(hyperpool_tls PROPERTIES EXPORT_NAME tls)
set_target_properties(hyperpool_asio PROPERTIES EXPORT_NAME asio)
set_target_properties(hyperpool_ssl PROPERTIES EXPORT_NAME ssl)
set_target_properties(hyperpool_crypto PROPERTIES EXPORT_NAME crypto)

install(TARGETS hyperpool hyperpool_protocol hyperpool_tls hyperpool_asio hyperpool_ssl hyperpool_crypto
  EXPORT hyperpoolTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS hyperpool_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/hyperpool DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/src/generated/hyperpool/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hyperpool)

install(EXPORT hyperpoolTargets NAMESPACE hyperpool:: DESTINATION ${HYPERPOOL_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hyperpoolConfig.cmake.in
  ${PROJECT_BINARY_DIR}/hyperpoolConfig.cmake INSTALL_DESTINATION ${HYPERPOOL_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hyperpoolConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hyperpoolConfig.cmake ${PROJECT_BINARY_DIR}/hyperpoolConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/FindBoringSSL.cmake DESTINATION ${HYPERPOOL_INSTALL_CMAKEDIR})

# The unit names the installed binary and config paths of this prefix.
configure_file(${PROJECT_SOURCE_DIR}/packaging/hyperpool.service.in ${PROJECT_BINARY_DIR}/packaging/hyperpool.service @ONLY)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/hyperpool.toml.example ${PROJECT_BINARY_DIR}/packaging/hyperpool.service
  DESTINATION ${CMAKE_INSTALL_DATADIR}/hyperpool)
