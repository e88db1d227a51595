# cmake -P script behind the ctest layers_architecture_table: docs/architecture.md's layer table
# must say what the build enforces. It reads the layer graph written at configure time
# (GRAPH, build/layer_graph.txt: "<layer>: <direct dependencies>" per line, from the
# verlpp_add_layer() calls in src/core/CMakeLists.txt) and the table in DOC.
# The table format it expects:
# - the table is the first Markdown table (lines starting with "|") after the first line that
#   starts with "## Layers";
# - a row describes the layers whose CMake names appear in backticks in its first cell
#   ("hardware (`hw`)"; one row may name several: "engines (`train`, `rollout`)"); rows that
#   name none (the plugin ABI, the plugins) are not checked;
# - its last cell names, in backticks, the layers it depends on ("`model`, `ops`, `hw`; LibTorch");
#   backticked words that are not layer names (`ProcessGroup`) are ignored.
# It passes when every layer of the graph is described by exactly one row and, for each, the
# layers its row names reach, through the graph, exactly the layers the build lets it use: a
# row may list an implied layer (`core`) or leave it out, but may not claim one the layer
# cannot use nor miss a direct one.
cmake_minimum_required(VERSION 3.18)
file(STRINGS ${GRAPH} graph_lines)
set(layers "")
foreach(line IN LISTS graph_lines)
  if(NOT line MATCHES "^([a-z_]+):(.*)$")
    continue()
  endif()
  set(layer ${CMAKE_MATCH_1})
  string(STRIP "${CMAKE_MATCH_2}" deps)
  string(REPLACE " " ";" deps "${deps}")
  list(APPEND layers ${layer})
  set(deps_${layer} ${deps})
endforeach()
if(NOT layers)
  message(FATAL_ERROR "${GRAPH} names no layers")
endif()

# closure(<out> <layers...>): the layers given and every layer they reach.
function(closure out)
  set(result "")
  set(todo ${ARGN})
  while(todo)
    list(POP_FRONT todo layer)
    if(NOT layer IN_LIST result)
      list(APPEND result ${layer})
      list(APPEND todo ${deps_${layer}})
    endif()
  endwhile()
  list(SORT result)
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# Backticked words of <text> that are layer names.
function(layer_words out text)
  string(REGEX MATCHALL "`[^`]+`" quoted "${text}")
  set(result "")
  foreach(word IN LISTS quoted)
    string(REPLACE "`" "" word "${word}")
    if(word IN_LIST layers)
      list(APPEND result ${word})
    endif()
  endforeach()
  set(${out} "${result}" PARENT_SCOPE)
endfunction()

# Lines of the page; ';' and '[' ']' would split or join CMake list items, and mean nothing here.
file(READ ${DOC} doc_text)
string(REPLACE ";" "," doc_text "${doc_text}")
string(REPLACE "[" "(" doc_text "${doc_text}")
string(REPLACE "]" ")" doc_text "${doc_text}")
string(REPLACE "\n" ";" doc_lines "${doc_text}")
set(state before)  # before the heading, then in_section, then in_table, then done
set(described "")
set(problems "")
foreach(line IN LISTS doc_lines)
  if(state STREQUAL "before")
    if(line MATCHES "^## Layers")
      set(state in_section)
    endif()
  elseif(state STREQUAL "in_section" OR state STREQUAL "in_table")
    if(NOT line MATCHES "^\\|")
      if(state STREQUAL "in_table")
        break()
      endif()
      continue()
    endif()
    set(state in_table)
    string(REGEX REPLACE "^\\|(.*)\\|[ \t]*$" "\\1" cells "${line}")
    string(REPLACE "|" ";" cells "${cells}")
    list(GET cells 0 first)
    list(GET cells -1 last)
    layer_words(row_layers "${first}")
    layer_words(row_deps "${last}")
    foreach(layer IN LISTS row_layers)
      if(layer IN_LIST described)
        string(APPEND problems "  `${layer}` is described by more than one row\n")
        continue()
      endif()
      list(APPEND described ${layer})
      closure(doc_reach ${row_deps})
      closure(build_reach ${deps_${layer}})
      if(NOT doc_reach STREQUAL build_reach)
        string(REPLACE ";" ", " doc_text "${doc_reach}")
        string(REPLACE ";" ", " build_text "${build_reach}")
        string(REPLACE ";" " " declared "${deps_${layer}}")
        string(APPEND problems "  `${layer}`: the table's row reaches [${doc_text}], the build [${build_text}] "
                               "(its DEPENDS: ${declared})\n")
      endif()
    endforeach()
  endif()
endforeach()
if(state STREQUAL "before")
  message(FATAL_ERROR "${DOC} has no line starting with \"## Layers\"")
endif()
foreach(layer IN LISTS layers)
  if(NOT layer IN_LIST described)
    string(APPEND problems "  no row names `${layer}` in backticks in its first cell\n")
  endif()
endforeach()
if(problems)
  message(FATAL_ERROR "${DOC}'s layer table and the build's layers (src/core/CMakeLists.txt) disagree:\n${problems}")
endif()
list(LENGTH layers num_layers)
message(STATUS "${DOC}: the layer table agrees with the build's ${num_layers} layers")
