# `cmake --install <build> --prefix P` lays out the C++ package:
#   P/include/headcount/**.h                          public headers
#   P/lib/libheadcount.a                              the library (position-independent)
#   P/lib/cmake/headcount/headcountConfig.cmake       find_package(headcount): headcount::headcount
#   P/lib/cmake/headcount/headcountConfigVersion.cmake  (same major version = compatible)
#   P/lib/pkgconfig/headcount.pc                      pkg-config --cflags --libs headcount
# Everything is in the "dev" component, so the Python wheel (component "python") carries none
# of it.
include(CMakePackageConfigHelpers)

set(HEADCOUNT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/headcount)
install(TARGETS headcount EXPORT headcountTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/headcount
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev FILES_MATCHING PATTERN "*.h"
        PATTERN "distributed.h" EXCLUDE)  # its library (HEADCOUNT_MPI) is not installed
install(EXPORT headcountTargets NAMESPACE headcount:: DESTINATION ${HEADCOUNT_CMAKE_DIR}
        FILE headcountTargets.cmake COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/headcountConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/headcountConfig.cmake
                              INSTALL_DESTINATION ${HEADCOUNT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/headcountConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/headcountConfig.cmake ${PROJECT_BINARY_DIR}/headcountConfigVersion.cmake
        DESTINATION ${HEADCOUNT_CMAKE_DIR} COMPONENT dev)

# pkg-config: the library is static, so its dependencies go on Libs (utf8proc
# through its own .pc file, found by Requires), not Libs.private.
# The .pc file names its prefix relative to itself (${pcfiledir}), so `cmake --install --prefix`
# anywhere gives a working file.
file(RELATIVE_PATH HEADCOUNT_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/headcount.pc.in ${PROJECT_BINARY_DIR}/headcount.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/headcount.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
