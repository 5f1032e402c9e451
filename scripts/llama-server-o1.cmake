# Included by scripts/build-llama-server.sh (CMAKE_PROJECT_llama.cpp_INCLUDE).
#
# The compute kernels that score and generate live in ggml (ggml-base, ggml-cpu) and keep
# the Release build's -O3. The model code, the server, its HTTP, JSON and chat code and
# the multimodal library around them are built with -O1: they are most of the compile time
# and none of the arithmetic (they build the graph that ggml computes and move requests).
# The targets exist only once the whole tree is read, hence the deferred call.
function(servediff_o1_outside_ggml)
  foreach(target llama llama-common llama-common-base mtmd server-context llama-server-impl
                 llama-server cpp-httplib)
    if(TARGET ${target})
      # after CMAKE_CXX_FLAGS_RELEASE on the command line: the last -O wins
      set_property(TARGET ${target} APPEND PROPERTY COMPILE_OPTIONS -O1)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL servediff_o1_outside_ggml)
