# FindBoringSSL
# -------------
# Finds Debian's packaged BoringSSL (android-libboringssl-dev), which ships no
# CMake config. Headers live in /usr/include/android and must win over the
# system OpenSSL headers; the shared libraries live in a private directory and
# are named like OpenSSL's (libssl.so, libcrypto.so), so they are linked by
# full path and found at run time through an rpath.
#
# Provides the imported targets BoringSSL::SSL and BoringSSL::Crypto and the
# variables BoringSSL_FOUND, BoringSSL_INCLUDE_DIR, BoringSSL_LIBRARY_DIR.

find_path(BoringSSL_INCLUDE_DIR
  NAMES openssl/is_boringssl.h
  HINTS /usr/include/android
  NO_DEFAULT_PATH)
find_library(BoringSSL_CRYPTO_LIBRARY
  NAMES crypto
  HINTS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/android /usr/lib/x86_64-linux-gnu/android
  NO_DEFAULT_PATH)
find_library(BoringSSL_SSL_LIBRARY
  NAMES ssl
  HINTS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/android /usr/lib/x86_64-linux-gnu/android
  NO_DEFAULT_PATH)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(BoringSSL
  REQUIRED_VARS BoringSSL_INCLUDE_DIR BoringSSL_CRYPTO_LIBRARY BoringSSL_SSL_LIBRARY)

if(BoringSSL_FOUND)
  get_filename_component(BoringSSL_LIBRARY_DIR "${BoringSSL_CRYPTO_LIBRARY}" DIRECTORY)
  if(NOT TARGET BoringSSL::Crypto)
    add_library(BoringSSL::Crypto SHARED IMPORTED)
    set_target_properties(BoringSSL::Crypto PROPERTIES
      IMPORTED_LOCATION "${BoringSSL_CRYPTO_LIBRARY}"
      IMPORTED_NO_SONAME FALSE
      INTERFACE_INCLUDE_DIRECTORIES "${BoringSSL_INCLUDE_DIR}"
      INTERFACE_LINK_OPTIONS "LINKER:-rpath,${BoringSSL_LIBRARY_DIR}")
  endif()
  if(NOT TARGET BoringSSL::SSL)
    add_library(BoringSSL::SSL SHARED IMPORTED)
    set_target_properties(BoringSSL::SSL PROPERTIES
      IMPORTED_LOCATION "${BoringSSL_SSL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${BoringSSL_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES BoringSSL::Crypto)
  endif()
endif()
mark_as_advanced(BoringSSL_INCLUDE_DIR BoringSSL_CRYPTO_LIBRARY BoringSSL_SSL_LIBRARY)
