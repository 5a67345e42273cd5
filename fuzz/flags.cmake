# fuzz/flags.cmake — included by the top-level CMakeLists.txt when
# MIAOSHA_FUZZ=ON, before any module: every library the harnesses link gets
# libFuzzer's coverage instrumentation (fuzzer-no-link) and ASan + UBSan,
# the same way MIAOSHA_SANITIZE sets its flags for the whole build. Only the
# harnesses themselves link -fsanitize=fuzzer (libFuzzer's main).
if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "MIAOSHA_FUZZ=ON needs clang (libFuzzer): "
    "cmake -S . -B build/fuzz -DCMAKE_C_COMPILER=clang -DMIAOSHA_FUZZ=ON")
endif()
if(MIAOSHA_SANITIZE)
  message(FATAL_ERROR "MIAOSHA_FUZZ=ON brings address,undefined itself: leave MIAOSHA_SANITIZE empty")
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
  -fno-sanitize-recover=all)
add_link_options(-fsanitize=address,undefined)
