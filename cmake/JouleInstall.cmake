# Install the headers and an exported package, so another CMake project can
# find_package(joule) and link joule::core.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

foreach(dir common core energy parallel scheduler)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/joule
          FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(TARGETS joule_core_io joule_core joule_energy_core joule_energy joule_parallel joule_run_log joule_scheduler EXPORT jouleTargets)
install(EXPORT jouleTargets NAMESPACE joule:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/joule)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/jouleConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/jouleConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/joule)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/jouleConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/jouleConfig.cmake ${PROJECT_BINARY_DIR}/jouleConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/joule)
