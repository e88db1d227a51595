# verlpp_add_cuda_program(<target> <source>...): a standalone CUDA program built beside the cuda
# plugin: a kernel microbenchmark (benchmarks/kernels/) or an experiment (experiments/). It
# compiles the plugin sources it names itself (plugins/cuda/...), calls their launchers directly
# (no host library, no plugin ABI), and is built whenever the cuda plugin is, for the plugin's
# architectures, so a change to a launcher that breaks it fails the build instead of a GPU run.
# Call it from a directory that has enabled CUDA (verlpp_enable_cuda_programs below).

# Enables CUDA in the calling directory as plugins/cuda does (its architectures as the default,
# ccache as the launcher). A macro: enable_language must run at the directory's own scope.
macro(verlpp_enable_cuda_programs)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${VERLPP_CUDA_ARCHITECTURES})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(VERLPP_CCACHE)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${VERLPP_CCACHE})
  endif()
endmacro()

function(verlpp_add_cuda_program target)
  add_executable(${target} ${ARGN})
  set_target_properties(${target} PROPERTIES
    CUDA_ARCHITECTURES "${VERLPP_CUDA_ARCHITECTURES}"
    CUDA_RUNTIME_LIBRARY None        # linked explicitly below, statically, as the plugin does
    LINKER_LANGUAGE CXX)
  target_include_directories(${target} PRIVATE
    ${PROJECT_SOURCE_DIR}/plugins/cuda         # the launchers' declarations (kernels.hpp, ...)
    ${PROJECT_SOURCE_DIR}/benchmarks/kernels)  # bench_timing.cuh
  target_link_libraries(${target} PRIVATE verlpp::plugin_sdk CUDA::cudart_static Threads::Threads ${CMAKE_DL_LIBS})
endfunction()
