# cmake -DSRC=<src dir> -P LayeringCheck.cmake (the ctest `layering_check`).
# What per-folder include roots (cmake/Layers.cmake) cannot hide: headers on
# the system include path. Asio (libasio-dev) lives in /usr/include, so the
# codec could include it without linking hyperpool::asio; this fails if any
# file of src/protocol/ includes Asio, a TLS library or a socket header.
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<src dir> -P LayeringCheck.cmake")
endif()
file(GLOB_RECURSE files ${SRC}/protocol/*.h ${SRC}/protocol/*.cc)
set(forbidden "asio[/.]|openssl/ssl\\.h|sys/socket\\.h|sys/epoll\\.h|netinet/|arpa/|netdb\\.h|poll\\.h")
set(found "")
foreach(f ${files})
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"](${forbidden})")
  foreach(line ${lines})
    file(RELATIVE_PATH rel ${SRC} ${f})
    string(APPEND found "\n  src/${rel}: ${line}")
  endforeach()
endforeach()
list(LENGTH files n)
if(found)
  message(FATAL_ERROR "src/protocol must stay sans-I/O (docs/architecture.md, \"Layers\"):${found}")
endif()
message(STATUS "layering_check: ${n} files of src/protocol include no Asio, TLS or socket header")
