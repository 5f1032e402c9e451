# Included by scripts/build-llama-server.sh (CMAKE_PROJECT_llama.cpp_INCLUDE): a cheaper
# build of the same llama-server, outside ggml.
#
# The compute kernels that score and generate live in ggml (ggml-base, ggml-cpu) and are
# built as upstream builds them: the Release build's -O3, one object per source file. The
# model code, the server, its HTTP, JSON and chat code and the multimodal library around
# them are most of the compile time and none of the arithmetic (they build the graph that
# ggml computes and move requests):
# - they are built with -O1;
# - the model code, the server and its chat code are unity builds (several sources per
#   compiler run, so their heavy headers are parsed once per batch, not once per file).
#   The multimodal library is left out: its helper refuses to share a compiler run with
#   its internal headers.
# The targets exist only once the whole tree is read, hence the deferred call.
function(servediff_cheaper_outside_ggml)
  foreach(target llama llama-common llama-common-base mtmd server-context llama-server-impl
                 llama-server cpp-httplib)
    if(TARGET ${target})
      # after CMAKE_CXX_FLAGS_RELEASE on the command line: the last -O wins
      set_property(TARGET ${target} APPEND PROPERTY COMPILE_OPTIONS -O1)
    endif()
  endforeach()
  # SERVEDIFF_LLAMA_UNITY=0: no unity builds (an older llama.cpp whose model files define
  # one static helper twice cannot share a compiler run: build 10502's gemma4.cpp)
  foreach(target llama llama-common llama-common-base server-context llama-server-impl
                 llama-server)
    if(TARGET ${target} AND NOT "$ENV{SERVEDIFF_LLAMA_UNITY}" STREQUAL "0")
      set_property(TARGET ${target} PROPERTY UNITY_BUILD ON)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL servediff_cheaper_outside_ggml)
