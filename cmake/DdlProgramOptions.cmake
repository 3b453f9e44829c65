# Compile options for ddl's own programs (tests, bench, examples); never put on the ddl::ddl target,
# so consumers keep their own flags.
# ddl_program_options(<target> [NATIVE]): NATIVE adds -march=native when DDL_NATIVE is on (bench, examples).
function(ddl_program_options target)
  cmake_parse_arguments(arg "NATIVE" "" "" ${ARGN})
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
    if(DDL_WARNINGS_AS_ERRORS)
      target_compile_options(${target} PRIVATE -Werror)
    endif()
    if(DDL_NATIVE AND arg_NATIVE)
      target_compile_options(${target} PRIVATE -march=native)
      if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
        # GCC 12 reports false (maybe-)uninitialized warnings inside avx512fintrin.h for Eigen's
        # AVX-512 packets (fast tanh, fixed-size packet arrays).
        target_compile_options(${target} PRIVATE -Wno-maybe-uninitialized -Wno-uninitialized)
      endif()
    endif()
    if(DDL_SANITIZE)
      target_compile_options(${target} PRIVATE -fsanitize=${DDL_SANITIZE} -fno-omit-frame-pointer
                                               -fno-sanitize-recover=all ${DDL_SANITIZE_OPTIONS})
      target_link_options(${target} PRIVATE -fsanitize=${DDL_SANITIZE})
    endif()
  endif()
endfunction()
