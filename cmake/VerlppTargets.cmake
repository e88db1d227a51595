# Shared build settings as interface targets, so every target opts in the same way.

# Warnings for our own code.
add_library(verlpp_warnings INTERFACE)
target_compile_options(verlpp_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
  $<$<BOOL:${VERLPP_WARNINGS_AS_ERRORS}>:-Werror>)

# fmt header-only: LibTorch 2.x wheels ship their own fmt; header-only keeps the two from
# disagreeing at link time.
add_library(verlpp_fmt INTERFACE)
if(TARGET fmt::fmt-header-only)
  set(VERLPP_FMT_TARGET fmt::fmt-header-only)
else()
  set(VERLPP_FMT_TARGET fmt::fmt)
endif()
target_link_libraries(verlpp_fmt INTERFACE ${VERLPP_FMT_TARGET})

# LibTorch with lean-include enforcement: library code includes ATen/core/Tensor.h and the
# ATen/ops/<op>.h headers it calls, never torch/torch.h (DESIGN.md §7).
add_library(verlpp_torch INTERFACE)
target_link_libraries(verlpp_torch INTERFACE ${TORCH_LIBRARIES})
target_compile_definitions(verlpp_torch INTERFACE TORCH_ASSERT_ONLY_METHOD_OPERATORS)
target_compile_options(verlpp_torch INTERFACE ${TORCH_CXX_FLAGS})

# The lean precompiled header shared by torch-using targets (REUSE_FROM verlpp_pch).
add_library(verlpp_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
target_link_libraries(verlpp_pch PUBLIC verlpp_torch verlpp_fmt nlohmann_json::nlohmann_json)
target_precompile_headers(verlpp_pch PUBLIC
  <ATen/core/Tensor.h>
  <fmt/format.h>
  <nlohmann/json.hpp>
  <algorithm> <cstdint> <functional> <map> <memory> <string> <vector>)

# Adds the shared precompiled header to a torch-using target.
# The header is built with -fPIC; executables would get -fPIE and could not use it, so they
# are compiled with -fPIC as well (harmless: -fPIC code links into a PIE).
function(verlpp_use_pch target)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${target} PRIVATE -fPIC)
  endif()
  target_precompile_headers(${target} REUSE_FROM verlpp_pch)
endfunction()

# Boost.DLL (plugin and reward-library loading) on std::filesystem, so that no compiled Boost
# library is needed; every user must agree on the macro, since it changes Boost.DLL's types.
add_library(verlpp_boost_dll INTERFACE)
target_link_libraries(verlpp_boost_dll INTERFACE Boost::headers ${CMAKE_DL_LIBS})
target_compile_definitions(verlpp_boost_dll INTERFACE BOOST_DLL_USE_STD_FS)
