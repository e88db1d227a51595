# The host library's layers as CMake targets, and the include views that make a dependency
# pointing up fail to build. Every public header lives under the one root include/verlpp/, so
# an include directory alone would let any layer reach any header: each layer is compiled
# instead against its view, build/layer_includes/<layer>/, a folder of symbolic links
# verlpp/<name> -> include/verlpp/<name> for its own headers and those of the layers it may
# use (the transitive closure of DEPENDS), and nothing more; <verlpp/config/config.hpp>
# from the train layer is "No such file or directory". Relative includes ("../train/x.hpp")
# bypass include paths, so a build step per layer (cmake/CheckLayerIncludes.cmake) checks
# every include of the layer's files against the same graph before the layer compiles.
# Programs, tests and an install see include/ whole, through libverlpp's usage requirements.

# verlpp_add_layer(<name> [SOURCE_DIR <folder under src/core>] [HEADERS <names>...]
#                  [DEPENDS <layers>...] [LIBRARIES <targets>...] [PRIVATE_LIBRARIES <targets>...]
#                  [EXCEPTIONS <file>|<include>...] [PROGRAMS])
#   SOURCE_DIR   src/core/<dir>/*.cpp are the layer's sources, *.hpp its internal headers
#                (default: <name>; a folder that does not exist yet gives an empty layer).
#   HEADERS      folders or files under include/verlpp/ that are the layer's public headers.
#   DEPENDS      the layers directly below that this one uses (declared earlier); it may include
#                their headers and, transitively, those of the layers they depend on.
#   LIBRARIES    usage requirements its public headers need (LibTorch, fmt, ...): PUBLIC.
#   PRIVATE_LIBRARIES  what only its sources need (ICU, Boost.DLL).
#   EXCEPTIONS   "<file under src/core>|<include as written>": an upward relative include the
#                check lets pass; one that no longer occurs is an error, so none outlives its cause.
#   PROGRAMS     a layer made of programs that link libverlpp (apps): recorded in the graph,
#                no library target.
# Makes verlpp_layer_<name>: an OBJECT library (INTERFACE when it has no sources), linked
# PRIVATE to the layers of DEPENDS. libverlpp links them all (verlpp_library_layers()).
function(verlpp_add_layer name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "PROGRAMS" "SOURCE_DIR" "HEADERS;DEPENDS;LIBRARIES;PRIVATE_LIBRARIES;EXCEPTIONS")
  get_property(declared GLOBAL PROPERTY VERLPP_LAYERS)
  if(name IN_LIST declared)
    message(FATAL_ERROR "verlpp_add_layer(${name}): declared twice")
  endif()
  set(closure "")
  foreach(dep IN LISTS arg_DEPENDS)
    if(NOT dep IN_LIST declared)
      message(FATAL_ERROR "verlpp_add_layer(${name}): DEPENDS ${dep}, which is not declared before it "
                          "(layers are declared bottom to top)")
    endif()
    get_property(dep_closure GLOBAL PROPERTY VERLPP_LAYER_${dep}_CLOSURE)
    list(APPEND closure ${dep} ${dep_closure})
  endforeach()
  list(REMOVE_DUPLICATES closure)
  if(NOT arg_SOURCE_DIR AND NOT arg_PROGRAMS)
    set(arg_SOURCE_DIR ${name})
  endif()
  set_property(GLOBAL APPEND PROPERTY VERLPP_LAYERS ${name})
  set_property(GLOBAL PROPERTY VERLPP_LAYER_${name}_DEPENDS "${arg_DEPENDS}")
  set_property(GLOBAL PROPERTY VERLPP_LAYER_${name}_CLOSURE "${closure}")
  set_property(GLOBAL PROPERTY VERLPP_LAYER_${name}_HEADERS "${arg_HEADERS}")
  set_property(GLOBAL PROPERTY VERLPP_LAYER_${name}_SOURCE_DIR "${arg_SOURCE_DIR}")
  set_property(GLOBAL PROPERTY VERLPP_LAYER_${name}_LIBRARIES "${arg_LIBRARIES}")
  set(dep_targets "")
  foreach(dep IN LISTS arg_DEPENDS)
    list(APPEND dep_targets verlpp_layer_${dep})
  endforeach()
  set_property(GLOBAL PROPERTY VERLPP_LAYER_${name}_TARGETS "${dep_targets}")
  if(arg_PROGRAMS)
    return()
  endif()

  _verlpp_layer_make_view(${name})
  set(src_dir ${PROJECT_SOURCE_DIR}/src/core/${arg_SOURCE_DIR})
  file(GLOB sources CONFIGURE_DEPENDS ${src_dir}/*.cpp)
  file(GLOB internal_headers CONFIGURE_DEPENDS ${src_dir}/*.hpp ${src_dir}/*.h)
  set(public_headers "")
  foreach(header IN LISTS arg_HEADERS)
    set(path ${PROJECT_SOURCE_DIR}/include/verlpp/${header})
    if(IS_DIRECTORY ${path})
      file(GLOB_RECURSE found CONFIGURE_DEPENDS ${path}/*)
      list(APPEND public_headers ${found})
    elseif(EXISTS ${path})
      list(APPEND public_headers ${path})
    endif()
  endforeach()

  set(target verlpp_layer_${name})
  if(sources)
    add_library(${target} OBJECT ${sources} ${internal_headers})
    target_link_libraries(${target} PUBLIC ${arg_LIBRARIES} PRIVATE ${arg_PRIVATE_LIBRARIES})
    verlpp_layer_compile_settings(${target} ${name})
    verlpp_use_pch(${target})
    set_property(GLOBAL APPEND PROPERTY VERLPP_OBJECT_LAYERS ${target})
  else()
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE ${arg_LIBRARIES} ${dep_targets})
  endif()

  # The relative-include check, a build step the layer's compiles wait for.
  set(files_list ${CMAKE_BINARY_DIR}/layer_includes/${name}.files)
  string(REPLACE ";" "\n" files_text "${sources};${internal_headers};${public_headers}")
  file(WRITE ${files_list}.in "${files_text}\n")
  configure_file(${files_list}.in ${files_list} COPYONLY)  # rewritten only when it changes
  _verlpp_layer_reachable_names(reachable ${name})
  set(stamp ${CMAKE_BINARY_DIR}/layer_includes/${name}.checked)
  string(REPLACE ";" "," reachable_arg "${reachable}")
  string(REPLACE ";" "," exceptions_arg "${arg_EXCEPTIONS}")
  get_property(all_layers GLOBAL PROPERTY VERLPP_LAYERS)
  add_custom_command(OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DLAYER=${name} -DREACHABLE=${reachable_arg} -DEXCEPTIONS=${exceptions_arg}
            -DFILES_LIST=${files_list} -DROOT=${PROJECT_SOURCE_DIR} -DSTAMP=${stamp}
            -P ${PROJECT_SOURCE_DIR}/cmake/CheckLayerIncludes.cmake
    DEPENDS ${sources} ${internal_headers} ${public_headers} ${files_list} ${PROJECT_SOURCE_DIR}/cmake/CheckLayerIncludes.cmake
    COMMENT "Checking the includes of layer ${name}" VERBATIM)
  add_custom_target(${target}_includes DEPENDS ${stamp})
  set_property(GLOBAL APPEND PROPERTY VERLPP_LAYER_CHECKS ${target}_includes)
  if(sources)
    add_dependencies(${target} ${target}_includes)
  endif()
endfunction()

# Compiles <target> as the sources of layer <layer> are: against the layer's include view, with
# the layers it depends on (PRIVATE) and what the headers of every layer it may include need
# (a PRIVATE link passes on none of those past one level). Also used by the tests that prove an
# upward include does not compile.
function(verlpp_layer_compile_settings target layer)
  target_include_directories(${target} PRIVATE ${CMAKE_BINARY_DIR}/layer_includes/${layer})
  get_property(closure GLOBAL PROPERTY VERLPP_LAYER_${layer}_CLOSURE)
  set(libraries "")
  foreach(l IN ITEMS ${layer} LISTS closure)
    get_property(layer_libraries GLOBAL PROPERTY VERLPP_LAYER_${l}_LIBRARIES)
    list(APPEND libraries ${layer_libraries})
  endforeach()
  list(REMOVE_DUPLICATES libraries)
  get_property(dep_targets GLOBAL PROPERTY VERLPP_LAYER_${layer}_TARGETS)
  target_link_libraries(${target} PRIVATE ${dep_targets} ${libraries} verlpp_warnings)
endfunction()

# The names a file of <layer> may reach: the include/verlpp/ names and src/core/ folders of the
# layer and of every layer below it that it may use.
function(_verlpp_layer_reachable_names out layer)
  get_property(closure GLOBAL PROPERTY VERLPP_LAYER_${layer}_CLOSURE)
  set(names "")
  foreach(l IN ITEMS ${layer} LISTS closure)
    get_property(headers GLOBAL PROPERTY VERLPP_LAYER_${l}_HEADERS)
    get_property(dir GLOBAL PROPERTY VERLPP_LAYER_${l}_SOURCE_DIR)
    list(APPEND names ${headers} ${dir})
  endforeach()
  list(REMOVE_DUPLICATES names)
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

# build/layer_includes/<layer>/verlpp/<name> -> include/verlpp/<name>, for every public header
# name of the layer and of the layers it may use. Rebuilt at every configure, so a header folder
# that appears later (a CONFIGURE_DEPENDS glob of include/verlpp/ notices it) gets its link.
function(_verlpp_layer_make_view layer)
  set(view ${CMAKE_BINARY_DIR}/layer_includes/${layer})
  file(REMOVE_RECURSE ${view})
  file(MAKE_DIRECTORY ${view}/verlpp)
  get_property(closure GLOBAL PROPERTY VERLPP_LAYER_${layer}_CLOSURE)
  foreach(l IN ITEMS ${layer} LISTS closure)
    get_property(headers GLOBAL PROPERTY VERLPP_LAYER_${l}_HEADERS)
    foreach(header IN LISTS headers)
      if(EXISTS ${PROJECT_SOURCE_DIR}/include/verlpp/${header})
        file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/verlpp/${header} ${view}/verlpp/${header} SYMBOLIC)
      endif()
    endforeach()
  endforeach()
endfunction()

# After the last layer: libverlpp's object layers, a check that every src/core/ folder and every
# include/verlpp/ name belongs to a layer, and the graph written for tests and docs to
# build/layer_graph.txt ("<layer>: <direct dependencies>", one line per layer, bottom to top).
function(verlpp_finish_layers library)
  get_property(layers GLOBAL PROPERTY VERLPP_LAYERS)
  get_property(objects GLOBAL PROPERTY VERLPP_OBJECT_LAYERS)
  get_property(checks GLOBAL PROPERTY VERLPP_LAYER_CHECKS)
  target_link_libraries(${library} PRIVATE ${objects})
  add_dependencies(${library} ${checks})

  set(claimed_headers "")
  set(claimed_dirs "")
  set(graph "")
  foreach(layer IN LISTS layers)
    get_property(headers GLOBAL PROPERTY VERLPP_LAYER_${layer}_HEADERS)
    get_property(dir GLOBAL PROPERTY VERLPP_LAYER_${layer}_SOURCE_DIR)
    get_property(deps GLOBAL PROPERTY VERLPP_LAYER_${layer}_DEPENDS)
    list(APPEND claimed_headers ${headers})
    list(APPEND claimed_dirs ${dir})
    string(REPLACE ";" " " deps_text "${deps}")
    string(APPEND graph "${layer}: ${deps_text}\n")
  endforeach()
  file(GLOB entries CONFIGURE_DEPENDS LIST_DIRECTORIES true RELATIVE ${PROJECT_SOURCE_DIR}/include/verlpp
       ${PROJECT_SOURCE_DIR}/include/verlpp/*)
  foreach(entry IN LISTS entries)
    if(NOT entry IN_LIST claimed_headers)
      message(FATAL_ERROR "include/verlpp/${entry} belongs to no layer: name it in the HEADERS of a "
                          "verlpp_add_layer() in src/core/CMakeLists.txt")
    endif()
  endforeach()
  file(GLOB entries CONFIGURE_DEPENDS LIST_DIRECTORIES true RELATIVE ${PROJECT_SOURCE_DIR}/src/core
       ${PROJECT_SOURCE_DIR}/src/core/*)
  foreach(entry IN LISTS entries)
    if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/src/core/${entry} AND NOT entry IN_LIST claimed_dirs)
      message(FATAL_ERROR "src/core/${entry}/ belongs to no layer: give it a verlpp_add_layer() in "
                          "src/core/CMakeLists.txt")
    endif()
  endforeach()
  file(WRITE ${CMAKE_BINARY_DIR}/layer_graph.txt.in "${graph}")
  configure_file(${CMAKE_BINARY_DIR}/layer_graph.txt.in ${CMAKE_BINARY_DIR}/layer_graph.txt COPYONLY)
endfunction()
