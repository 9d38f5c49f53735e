# One static library per src/ folder, and a folder's headers visible only to
# the targets that link its library (docs/architecture.md, "Layers").
#
# Sources include each other as "<folder>/file.h" from src/. Putting src/ on a
# target's include path would show it every folder, so instead each folder
# gets an include root of its own in the build tree holding one symlink,
#   ${HYPERPOOL_INCLUDE_ROOTS}/<folder>/<folder> -> src/<folder>,
# which is the PUBLIC (build-tree only) include directory of that folder's
# library. "endpoint/..." then resolves only in code that links
# hyperpool_endpoint (or a target linking it PUBLIC): the include graph can
# only follow the link graph, and a missing or reversed dependency is a
# compile error, not a convention. (Tests, the benchmarks and the fuzzers add
# src/ themselves: they may look at any folder.)

set(HYPERPOOL_INCLUDE_ROOTS ${PROJECT_BINARY_DIR}/include_roots)

# hyperpool_folder_includes(<target> <folder> [INTERFACE])
# Gives <target> the include root of src/<folder> as its PUBLIC (INTERFACE
# for an interface library) build-tree include directory.
function(hyperpool_folder_includes target folder)
  set(scope PUBLIC)
  if(ARGC GREATER 2)
    set(scope ${ARGV2})
  endif()
  set(root ${HYPERPOOL_INCLUDE_ROOTS}/${folder})
  if(NOT IS_SYMLINK ${root}/${folder})
    file(MAKE_DIRECTORY ${root})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${folder} ${root}/${folder} SYMBOLIC)
  endif()
  target_include_directories(${target} ${scope} $<BUILD_INTERFACE:${root}>)
endfunction()

# hyperpool_check_layers(<target>...)
# Fails the configure step if the link graph among the given targets has a
# cycle (static libraries that need each other would link only by luck of
# the order CMake repeats them in), or if the codec's link closure reaches
# Asio or a TLS library. Reads LINK_LIBRARIES (INTERFACE_LINK_LIBRARIES of an
# interface library), generator expressions included.
function(hyperpool_check_layers)
  set(nodes ${ARGN})
  foreach(t ${nodes})
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(libs ${t} INTERFACE_LINK_LIBRARIES)
    else()
      get_target_property(libs ${t} LINK_LIBRARIES)
    endif()
    set(deps_${t} "")
    set(all_${t} "")
    if(libs)
      string(REGEX MATCHALL "hyperpool(_[a-z_]+)?(::[a-z_]+)?" names "${libs}")
      foreach(n ${names})
        if(n STREQUAL "hyperpool::hyperpool")
          set(n hyperpool)
        endif()
        list(APPEND all_${t} ${n})
        if(n IN_LIST nodes AND NOT n STREQUAL t)
          list(APPEND deps_${t} ${n})
        endif()
      endforeach()
    endif()
  endforeach()

  # Kahn: peel off targets whose dependencies are all peeled; what is left
  # when nothing moves lies on (or behind) a cycle.
  set(remaining ${nodes})
  while(remaining)
    set(next "")
    foreach(t ${remaining})
      set(blocked FALSE)
      foreach(d ${deps_${t}})
        if(d IN_LIST remaining)
          set(blocked TRUE)
        endif()
      endforeach()
      if(blocked)
        list(APPEND next ${t})
      endif()
    endforeach()
    list(LENGTH remaining before)
    list(LENGTH next after)
    if(before EQUAL after)
      set(edges "")
      foreach(t ${next})
        set(in_cycle "")
        foreach(d ${deps_${t}})
          if(d IN_LIST next)
            list(APPEND in_cycle ${d})
          endif()
        endforeach()
        string(APPEND edges "\n  ${t} -> ${in_cycle}")
      endforeach()
      message(FATAL_ERROR "The layers' link graph (docs/architecture.md, \"Layers\") has a cycle; "
        "these libraries lie on it or depend on it:${edges}")
    endif()
    set(remaining ${next})
  endwhile()

  # The codec stays sans-I/O: nothing it links, however indirectly, is Asio or TLS.
  if(hyperpool_protocol IN_LIST nodes)
    set(closure hyperpool_protocol)
    set(i 0)
    list(LENGTH closure n)
    while(i LESS n)
      list(GET closure ${i} t)
      foreach(d ${all_${t}})
        if(d MATCHES "asio|ssl")
          message(FATAL_ERROR "hyperpool_protocol must not link Asio or TLS, but ${t} links ${d}")
        endif()
        if(d IN_LIST nodes AND NOT d IN_LIST closure)
          list(APPEND closure ${d})
        endif()
      endforeach()
      math(EXPR i "${i} + 1")
      list(LENGTH closure n)
    endwhile()
  endif()
endfunction()
