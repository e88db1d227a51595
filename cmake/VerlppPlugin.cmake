# verlpp_add_plugin(<target> <name> <source>...): builds a verlpp hardware plugin, the shared
# object libverlpp-plugin-<name>.so that the host finds by name, against the plugin SDK only.
# Used in this tree and installed with the SDK (find_package(verlpp) includes it), so an
# out-of-tree plugin is built exactly like cpu_ref or the template. <name> is the plugin's ABI
# name, optionally followed by -<variant> (libverlpp-plugin-cuda-sm90.so).
# Symbols are hidden by default: a plugin exports only the two entry points VERLPP_PLUGIN makes.
function(verlpp_add_plugin target name)
  if(NOT name MATCHES "^[a-z0-9_]+(-[a-z0-9_]+)?$")
    message(FATAL_ERROR "verlpp_add_plugin(${target} ${name}): a plugin name is [a-z0-9_]+ (optionally -<variant>), "
                        "and must equal the kName the plugin reports")
  endif()
  if(NOT TARGET verlpp::plugin_sdk)
    message(FATAL_ERROR "verlpp_add_plugin: the target verlpp::plugin_sdk is missing (call find_package(verlpp) first)")
  endif()
  add_library(${target} MODULE ${ARGN})
  set_target_properties(${target} PROPERTIES PREFIX "" OUTPUT_NAME "libverlpp-plugin-${name}" SUFFIX ".so"
    CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  target_link_libraries(${target} PRIVATE verlpp::plugin_sdk)
  if(TARGET verlpp_warnings)  # this tree's warning flags; absent for out-of-tree plugins
    target_link_libraries(${target} PRIVATE verlpp_warnings)
  endif()
endfunction()
