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

# Frames are split and their lengths read only in src/protocol/ (issue 26,
# "decode once"): elsewhere a frame at the start of held bytes is
# protocol::PeekTaggedFrame / PeekTaggedHeader / PeekStartupPacket, and a
# field is read by a decoder or one of the in-place helpers next to it
# (PeekNotificationPid, PatchExecuteMaxRows, AppendWithTextFormats). This
# fails on a hand-read wire integer (LoadUint32) outside src/protocol/.
file(GLOB_RECURSE others ${SRC}/*.h ${SRC}/*.cc)
set(private "")
foreach(f ${others})
  file(RELATIVE_PATH rel ${SRC} ${f})
  if(rel MATCHES "^protocol/")
    continue()
  endif()
  file(STRINGS ${f} lines REGEX "LoadUint32[ \t]*\\(|LoadBigEndian32[ \t]*\\(")
  foreach(line ${lines})
    string(STRIP "${line}" line)
    string(APPEND private "\n  src/${rel}: ${line}")
  endforeach()
endforeach()
if(private)
  message(FATAL_ERROR "a wire integer read by hand outside src/protocol/ (use a protocol:: peek or decoder):${private}")
endif()
message(STATUS "layering_check: ${n} files of src/protocol include no Asio, TLS or socket header; no frame length is read by hand outside it")
