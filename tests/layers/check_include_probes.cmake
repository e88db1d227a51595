# cmake -P script behind the ctest layers_include_probes (tests/layers/CMakeLists.txt says what
# the probes are). Builds the controls, which must compile, then every upward or sideways probe
# in one keep-going build, which must fail; each probe must fail on its one include, reported as
# a missing file (GCC: "fatal error: <h>: No such file or directory"; Clang: "fatal error: '<h>'
# file not found"), so a probe broken in some other way does not pass for a layer rule.
# Variables: BUILD_DIR, GENERATOR, POSITIVE (comma list of targets), NEGATIVE (comma list of
# "<target>|<source file name>|<header as included>").
cmake_minimum_required(VERSION 3.18)
string(REPLACE "," ";" positive "${POSITIVE}")
string(REPLACE "," ";" negative "${NEGATIVE}")
if(NOT positive OR NOT negative)
  message(FATAL_ERROR "no probes were generated (POSITIVE='${POSITIVE}', NEGATIVE='${NEGATIVE}')")
endif()

execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${positive}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the controls (each layer including the layers it may use) did not compile:\n${out}")
endif()
list(LENGTH positive num_positive)
message(STATUS "${num_positive} controls compile: ${positive}")

set(targets "")
foreach(entry IN LISTS negative)
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 0 target)
  list(APPEND targets ${target})
endforeach()
if(GENERATOR MATCHES "Ninja")
  set(keep_going -k 0)
else()
  set(keep_going -k)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${targets} -- ${keep_going}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "the probes that include a layer above or beside their own all compiled:\n${out}")
endif()
set(problems "")
foreach(entry IN LISTS negative)
  string(REPLACE "|" ";" fields "${entry}")
  list(GET fields 1 source)
  list(GET fields 2 header)
  string(REPLACE "." "\\." source_re "${source}")
  string(REPLACE "." "\\." header_re "${header}")
  if(NOT out MATCHES "/${source_re}:[0-9]+:[0-9]+: fatal error: '?${header_re}'?(: No such file or directory| file not found)")
    string(APPEND problems "  ${source} (#include <${header}>) did not fail as a missing file\n")
  endif()
endforeach()
if(problems)
  message(FATAL_ERROR "probes that should fail on their include did not:\n${problems}build output:\n${out}")
endif()
list(LENGTH negative num_negative)
message(STATUS "${num_negative} upward or sideways includes fail to compile, each on its include")
